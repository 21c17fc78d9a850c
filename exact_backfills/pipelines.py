"""Which pipeline the machinery works on: a command's `--pipeline <module>:<attribute>`, else
EXACT_BACKFILLS_PIPELINE, else this repository's orders pipeline. The code location workspace.yaml loads, and the
runs and sensors it starts, select theirs the same way."""

import importlib
import os

from exact_backfills.declare import DeclarationError, Pipeline

PIPELINE_VARIABLE = "EXACT_BACKFILLS_PIPELINE"
# The pipeline selected when none is: the repository's own.
DEFAULT_PIPELINE = "assets_pkg.pipeline:pipeline"

_loaded: dict[str, Pipeline] = {}
_references: dict[str, str] = {}  # pipeline name -> the reference it was loaded by


def load(reference: str) -> Pipeline:
    """The `Pipeline` a `<module>:<attribute>` reference names; a DeclarationError saying what is wrong otherwise."""
    if reference not in _loaded:
        module_name, _, attribute = reference.partition(":")
        if not module_name or not attribute:
            raise DeclarationError(f"{reference!r} is not <module>:<attribute> (say, assets_pkg.pipeline:pipeline)")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            raise DeclarationError(f"{reference}: no module {e.name} (is its folder on PYTHONPATH?)") from None
        found = getattr(module, attribute, None)
        if not isinstance(found, Pipeline):
            what = "nothing" if found is None else type(found).__name__
            raise DeclarationError(f"{reference}: {module_name}.{attribute} is {what}, not a Pipeline(...)")
        _loaded[reference] = found
        _references.setdefault(found.name, reference)
    return _loaded[reference]


def selected_reference() -> str:
    return os.environ.get(PIPELINE_VARIABLE) or DEFAULT_PIPELINE


def selected() -> Pipeline:
    """The pipeline selected by the environment (the orders pipeline when nothing is)."""
    return load(selected_reference())


def reference(pipeline: Pipeline) -> str:
    """The `<module>:<attribute>` the pipeline was loaded by."""
    return _references.get(pipeline.name, "")


def command(pipeline: Pipeline) -> str:
    """How a message tells the user to run a command on this pipeline."""
    ref = reference(pipeline)
    return "python -m exact_backfills" + (f" --pipeline {ref}" if ref and ref != selected_reference() else "")

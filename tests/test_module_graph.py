"""The packages' shape, read from their source with `ast`: no import cycle between the modules of exact_backfills,
assets_pkg and resources, deferred imports inside functions included; and the machinery (exact_backfills) names no
table, source or column of any pipeline and imports none: a pipeline is a declaration the machinery reads."""

import ast
import re
from pathlib import Path

from exact_backfills.declare import BATCH_COLUMN, FILE_COLUMN, QUARANTINE_DAY, RUN_COLUMN, VALID_FROM
from examples.ml_features.pipeline import pipeline as ML_FEATURES
from resources.lake import REPO_ROOT
from tests.support.orders import ORDERS

PACKAGES = ("exact_backfills", "assets_pkg", "examples", "resources")
PIPELINES = [ORDERS, ML_FEATURES]
# The columns the machinery adds to a pipeline's rows: its own names.
MACHINERY_COLUMNS = {BATCH_COLUMN, FILE_COLUMN, QUARANTINE_DAY, RUN_COLUMN, VALID_FROM}
# Words the machinery uses in a meaning of its own, which a pipeline may name a column too: a run's, a plan's and the
# engine's status; the id of an event in Dagster's event log.
MACHINERY_WORDS = {"status", "event_id"}


def modules() -> dict[str, Path]:
    """Every module of the packages, by its dotted name (a package by its own)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            parts = path.relative_to(REPO_ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if path.stem == "__init__" else parts)] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> dict[str, int]:
    """The modules of `known` that module `name` imports, anywhere in it (at the top, in a function, in a branch),
    each with the line of its first import."""
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package, up `level - 1` packages
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            # `from package import module` imports the module; `from module import name`, the module.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        for target in targets:
            if target in known and target != name:
                found.setdefault(target, node.lineno)
    return found


def import_graph() -> dict[str, dict[str, int]]:
    found = modules()
    return {name: imports(name, path, set(found)) for name, path in found.items()}


def find_cycle(graph: dict[str, dict[str, int]] | dict[str, set[str]]) -> list[str]:
    """A cycle of the graph, as the modules along it back to the first ([] when there is none)."""
    done: set[str] = set()
    for root in sorted(graph):
        if root in done:
            continue
        path, on_path = [root], {root}
        stack = [iter(sorted(graph[root]))]
        while stack:
            following = next(stack[-1], None)
            if following is None:
                stack.pop()
                done.add(path[-1])
                on_path.discard(path.pop())
            elif following in on_path:
                return [*path[path.index(following) :], following]
            elif following not in done:
                path.append(following)
                on_path.add(following)
                stack.append(iter(sorted(graph.get(following, ()))))
    return []


def test_the_modules_import_one_another_without_a_cycle():
    graph = import_graph()
    cycle = find_cycle(graph)
    assert not cycle, (
        "import cycle: "
        + " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:], strict=False))
        + f" -> {cycle[-1]}"
    )


def test_the_import_graph_sees_imports_at_the_top_and_deferred_into_functions():
    graph = import_graph()
    assert "exact_backfills.publish" in graph["exact_backfills.late_data"]  # `from exact_backfills.publish import ...`
    assert "exact_backfills.landing" in graph["exact_backfills.late_data"]  # `from exact_backfills import landing, ...`
    assert "resources.control" in graph["exact_backfills.late_data"]  # `from resources import control`
    # `rollback` imports the rollback module when the command runs, not when the command line is imported.
    writing = ast.parse((REPO_ROOT / "exact_backfills" / "cli" / "writing.py").read_text())
    top_level = {n.module for n in writing.body if isinstance(n, ast.ImportFrom)}
    assert "exact_backfills.rollback" not in top_level
    assert "exact_backfills.rollback" in graph["exact_backfills.cli.writing"]


def test_a_cycle_is_named_along_its_modules():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a", "c"}}) == []


def _declared_names(pipeline) -> tuple[set[str], set[str]]:
    """(the tables, side tables, sources and landing assets a pipeline declares; the columns it names)."""
    tables = {*pipeline.every_table, *(s.name for s in pipeline.sources), *pipeline.landing_assets}
    columns = {c for s in pipeline.sources for c in s.schema.fieldNames()}
    columns |= {c for t in pipeline.tables for c in (*t.key, t.day_column)}
    return tables, columns - MACHINERY_COLUMNS - MACHINERY_WORDS


def test_the_machinery_names_no_table_source_or_column_of_a_pipeline_and_imports_none():
    """Checked against every pipeline's declaration: a table or source name anywhere in a module of the machinery
    (code, strings, comments), a column as a string, an import of a pipeline's package."""
    found = []
    for pipeline in PIPELINES:
        tables, columns = _declared_names(pipeline)
        package = pipeline.declared_in.split(".")[0]
        for path in sorted((REPO_ROOT / "exact_backfills").rglob("*.py")):  # its packages' modules too
            text = path.read_text()
            where = str(path.relative_to(REPO_ROOT))
            for name in sorted(tables):
                for number, line in enumerate(text.splitlines(), start=1):
                    if re.search(rf"\b{re.escape(name)}\b", line):
                        found.append(f"{where}:{number}: names {pipeline.name}'s {name}")
            for node in ast.walk(ast.parse(text)):
                named = node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None
                if named in columns:
                    found.append(f"{where}:{node.lineno}: names {pipeline.name}'s column {named}")
                if isinstance(node, ast.Import | ast.ImportFrom):
                    modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                    found += [f"{where}:{node.lineno}: imports {m}" for m in modules if m.split(".")[0] == package]
    assert not found, "the machinery knows a pipeline:\n" + "\n".join(found)


def _too_long(path: Path) -> list[str]:
    """The functions of a module longer than 60 lines or taking more than 6 parameters (self and cls aside)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            params = [p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs] if p.arg not in ("self", "cls")]
            params += [p.arg for p in (a.vararg, a.kwarg) if p is not None]
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > 60 or len(params) > 6:
                found.append(f"{path.name}:{node.lineno}: {node.name}: {lines} lines, {len(params)} parameters")
    return found


def test_the_write_path_is_named_stages_each_a_module_of_short_functions():
    """publish.py lists the stages; each stage is a module of exact_backfills/write_path/ of at most 450 lines, whose
    functions are at most 60 lines and take at most 6 parameters."""
    publish = REPO_ROOT / "exact_backfills" / "publish.py"
    stages = sorted((REPO_ROOT / "exact_backfills" / "write_path").glob("*.py"))
    assert {p.stem for p in stages} >= {"changes", "context", "staging", "verify", "intent", "commit", "record"}
    assert len(publish.read_text().splitlines()) < 200
    assert [p.name for p in stages if len(p.read_text().splitlines()) > 450] == []
    assert [f for p in [publish, *stages] for f in _too_long(p)] == []


def test_no_module_of_the_machinery_is_over_450_lines_nor_a_function_over_60_lines_or_6_parameters():
    modules = sorted((REPO_ROOT / "exact_backfills").rglob("*.py"))
    assert len(modules) > 40  # its packages' modules too
    lines = {p: len(p.read_text().splitlines()) for p in modules}
    too_big = [f"{p.relative_to(REPO_ROOT)}: {n} lines" for p, n in lines.items() if n > 450]
    assert too_big + [f for p in modules for f in _too_long(p)] == []


def test_a_function_over_60_lines_or_6_parameters_is_named(tmp_path):
    module = tmp_path / "long.py"
    body = "\n".join(f"    x{i} = {i}" for i in range(60))
    module.write_text(
        f"def f(a, b, c, d, e, f, g):\n{body}\n\n\nclass C:\n    def m(self, a, b, c, d, e, f):\n        pass\n"
    )
    assert _too_long(module) == ["long.py:1: f: 61 lines, 7 parameters"]

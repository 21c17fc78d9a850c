"""Each table's code version, derived from the code that decides its rows: its declaration (without its description:
key, day column, day dependencies, checks, and for a staging table its source's contract), its build and every
function and constant they reach, followed by name through the pipeline's package and the machinery (the machinery's
own build of a staging table included). Functions are compared by their syntax tree without docstrings and type
annotations, so formatting, comments and hints change nothing. A table's version leaves out its upstream tables'
code: their rows reach it through `read`, a parameter, so a change upstream makes its days stale through the graph, as
Dagster's own versions do.

The sources are read from files (`roots`), not from the imported modules, so the versions of an edited copy of a
pipeline can be computed beside the running one."""

import ast
import hashlib
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from exact_backfills.declare import Declared, Pipeline, Staging

MACHINERY = "exact_backfills"
# Modules followed no further: where rows are stored and how the process is configured, what a declaration is, and
# which batches a build reads (not what it makes of them).
BOUNDARIES = (
    "resources.",
    "exact_backfills.declare",
    "exact_backfills.declaration_error",
    "exact_backfills.sources",
    "exact_backfills.day_checks",
    "exact_backfills.day_dependencies",
    "exact_backfills.calendar",
    "exact_backfills.landing_index",
    "exact_backfills.partitions",
)
# The calls that declare: their description is left out of a version.
DECLARATIONS = {"Table", "Staging", "Source", "Pipeline"}
VERSION_LENGTH = 12


@dataclass(frozen=True)
class _Module:
    name: str
    definitions: dict[str, ast.AST]  # top-level functions, classes and assignments, by name
    imports: dict[str, tuple[str, str | None]]  # local name -> (module, attribute or None for the module itself)
    tree: ast.Module


class _Sources:
    """The modules of `packages` under the first of `roots` that holds each, parsed once each."""

    def __init__(self, roots: list[Path], packages: set[str], renamed: Mapping[str, str] | None = None):
        self.roots, self.packages, self.renamed = roots, packages, renamed or {}
        self.modules: dict[str, _Module] = {}

    def _is_project(self, module: str) -> bool:
        return module.split(".")[0] in self.packages

    def _file(self, name: str) -> Path | None:
        for root in self.roots:
            for candidate in (
                (root / Path(*name.split("."))).with_suffix(".py"),
                root / Path(*name.split(".")) / "__init__.py",
            ):
                if candidate.exists():
                    return candidate
        return None

    def module(self, name: str) -> _Module:
        if name not in self.modules:
            self.modules[name] = self._parse(name)
        return self.modules[name]

    def _parse(self, name: str) -> _Module:
        path = self._file(name)
        if path is None:
            raise FileNotFoundError(f"the source of module {name} is under none of {[str(r) for r in self.roots]}")
        tree = ast.parse(path.read_text())
        definitions: dict[str, ast.AST] = {}
        imports: dict[str, tuple[str, str | None]] = {}
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                definitions[node.name] = node
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        definitions[target.id] = node
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                definitions[node.target.id] = node
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the module's package, up `level - 1` packages
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, *([node.module] if node.module else [])])
                if not self._is_project(base):
                    continue
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    as_module = self._file(full) is not None
                    imports[alias.asname or alias.name] = (full, None) if as_module else (base, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if self._is_project(alias.name):
                        imports[alias.asname or alias.name] = (alias.name, None)
        return _Module(name, definitions, imports, tree)

    def references(self, module: _Module, node: ast.AST) -> Iterator[tuple[str, str]]:
        """The project definitions `node` names: (module, name)."""
        for child in ast.walk(node):
            if isinstance(child, ast.Attribute) and isinstance(child.value, ast.Name):
                target = module.imports.get(child.value.id)
                if target and target[1] is None:  # module.attribute
                    yield target[0], child.attr
            if isinstance(child, ast.Name):
                if child.id in module.definitions:
                    yield module.name, child.id
                elif child.id in module.imports and module.imports[child.id][1] is not None:
                    found, attribute = module.imports[child.id]
                    yield found, str(attribute)

    def closure(self, roots: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
        """Every definition `roots` reach, as its normalized syntax tree."""
        seen: dict[tuple[str, str], str] = {}
        todo = list(roots)
        while todo:
            name = todo.pop()
            if name in seen or name[0].startswith(BOUNDARIES) or not self._is_project(name[0]):
                continue
            module = self.module(name[0])
            node = module.definitions.get(name[1])
            if node is None:  # a name the module takes from elsewhere, or a submodule
                if name[1] in module.imports:
                    found, attribute = module.imports[name[1]]
                    todo.append((found, attribute or ""))
                continue
            normalized = _normalized(node, self.renamed)
            seen[name] = ast.dump(normalized, annotate_fields=False)
            todo.extend(self.references(module, normalized))
        return seen

    def declaration(self, module_name: str, table: str) -> ast.Call | None:
        """The table's `Table(...)` or `Staging(...)` call in the declaring module, whose name is `table`."""
        module = self.module(module_name)
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Call) and _called(node) in ("Table", "Staging"):
                name = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "name"), None)
                if name is not None and self._value(module, name) == table:
                    return node
        return None

    @staticmethod
    def _value(module: _Module, node: ast.expr) -> object:
        if isinstance(node, ast.Name) and isinstance(module.definitions.get(node.id), ast.Assign):
            node = module.definitions[node.id].value  # type: ignore[attr-defined]
        return node.value if isinstance(node, ast.Constant) else None


def _called(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _normalized(node: ast.AST, renamed: Mapping[str, str] | None = None) -> ast.AST:
    """`node` without what does not decide rows: docstrings, type annotations, a declaration's description, and a
    rename (`renamed`: new name -> the name before): a renamed table's name reads as its name before, wherever it is
    written, so that the rename alone changes neither its version nor those of the tables built from it."""
    renamed = renamed or {}
    parsed = ast.parse(ast.unparse(node))
    node = parsed if isinstance(node, ast.Module) else parsed.body[0]
    for child in ast.walk(node):
        body = getattr(child, "body", None)
        if (
            isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Module)
            and isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            child.body = body[1:] or [ast.Pass()]
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            child.returns = None
            for arg in [*child.args.posonlyargs, *child.args.args, *child.args.kwonlyargs]:
                arg.annotation = None
        if isinstance(child, ast.arg):
            child.annotation = None
        if isinstance(child, ast.Call) and _called(child) in DECLARATIONS:
            child.keywords = [k for k in child.keywords if k.arg not in ("description", "renamed_from")]
        if isinstance(child, ast.Constant) and isinstance(child.value, str) and child.value in renamed:
            child.value = renamed[child.value]
    return node


def _root_of(module_name: str) -> Path:
    """The folder a module's top package is imported from."""
    module = sys.modules[module_name]
    path = Path(module.__file__ or "")
    depth = len(module_name.split(".")) + (path.name == "__init__.py")
    return path.parents[depth - 1]


def _builds(table: Declared) -> list[tuple[str, str]]:
    """The functions that build the table's rows: the user's build, or the machinery's for a staging table."""
    if isinstance(table, Staging):
        names = ["build_events", "restate_events"] if table.events else ["build_dimension"]
        return [(f"{MACHINERY}.builds", n) for n in names]
    return [(table.build.__module__, table.build.__name__)]


def code_versions(pipeline: Pipeline, roots: list[Path] | None = None) -> dict[str, str]:
    """Table (and side table) -> its code version, from the sources of the pipeline and the machinery under `roots`
    (by default, where they are imported from)."""
    declared_in = pipeline.declared_in
    roots = roots or list(dict.fromkeys([_root_of(declared_in), _root_of(MACHINERY)]))
    sources = _Sources(roots, {declared_in.split(".")[0], MACHINERY}, pipeline.renamed)
    module = sources.module(declared_in)
    versions: dict[str, str] = {}
    for table in pipeline.tables:
        declaration = sources.declaration(declared_in, table.name)
        if declaration is None:  # declared in a way not found by name (a loop, say): the whole module decides it
            declared = _normalized(module.tree, pipeline.renamed)
        else:
            declared = _normalized(declaration, pipeline.renamed)
        reached = sources.closure(_builds(table) + list(sources.references(module, declared)))
        digest = hashlib.sha256(ast.dump(declared, annotate_fields=False).encode())
        for name in sorted(reached):
            digest.update(f"{name}\n{reached[name]}\n".encode())
        versions[table.name] = digest.hexdigest()[:VERSION_LENGTH]
        for side in table.side_tables:
            versions[side.name] = versions[table.name]  # written by the same build
    return versions


_current: dict[int, dict[str, str]] = {}


def current(pipeline: Pipeline) -> dict[str, str]:
    """The code versions of the code this process loaded (computed once per pipeline, when first asked)."""
    if id(pipeline) not in _current:
        _current[id(pipeline)] = code_versions(pipeline)
    return _current[id(pipeline)]

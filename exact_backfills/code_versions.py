"""Each table's code version, derived from the code that decides its rows: its builds (`build`, `restate`), every
project function and constant they reach, followed by name through the package's modules, and its spec (key, day
column, side tables, checks). Functions are compared by their syntax tree without docstrings, so formatting and
comments alone change nothing. A table's version leaves out its upstream tables' code: their rows reach it through
`read`, a parameter, so a change upstream makes its days stale through the graph, as Dagster's own versions do.

The sources are read from files (`root`), not from the imported modules, so the versions of an edited copy of the
project can be computed beside the running one."""

import ast
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from assets_pkg.tables import TABLES, Table
from resources.lake import REPO_ROOT

PACKAGES = ("exact_backfills", "assets_pkg", "resources")
# Modules followed no further: where rows are stored and how the process is configured, not what the rows are.
BOUNDARIES = ("resources.",)
VERSION_LENGTH = 12


@dataclass(frozen=True)
class _Module:
    name: str
    definitions: dict[str, ast.AST]  # top-level functions, classes and assignments, by name
    imports: dict[str, tuple[str, str | None]]  # local name -> (module, attribute or None for the module itself)


def _is_project(module: str) -> bool:
    return module.split(".")[0] in PACKAGES


def _parse(root: Path, name: str) -> _Module:
    tree = ast.parse((root / Path(*name.split("."))).with_suffix(".py").read_text())
    definitions: dict[str, ast.AST] = {}
    imports: dict[str, tuple[str, str | None]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            definitions[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    definitions[target.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            definitions[node.target.id] = node
        elif isinstance(node, ast.ImportFrom) and node.module and _is_project(node.module):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                as_module = (root / Path(*full.split("."))).with_suffix(".py").exists()
                imports[alias.asname or alias.name] = (full, None) if as_module else (node.module, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _is_project(alias.name):
                    imports[alias.asname or alias.name] = (alias.name, None)
    return _Module(name, definitions, imports)


def _without_docstrings(node: ast.AST) -> ast.AST:
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
    return node


class _Sources:
    """The project's modules under `root`, parsed once each."""

    def __init__(self, root: Path):
        self.root = root
        self.modules: dict[str, _Module] = {}

    def module(self, name: str) -> _Module:
        if name not in self.modules:
            self.modules[name] = _parse(self.root, name)
        return self.modules[name]

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
            if name in seen or name[0].startswith(BOUNDARIES):
                continue
            module = self.module(name[0])
            node = module.definitions.get(name[1])
            if node is None:  # a name the module takes from elsewhere, or a submodule
                if name[1] in module.imports:
                    found, attribute = module.imports[name[1]]
                    todo.append((found, attribute or ""))
                continue
            seen[name] = ast.dump(_without_docstrings(ast.parse(ast.unparse(node))), annotate_fields=False)
            todo.extend(self.references(module, node))
        return seen

    def declaration(self, table: str) -> ast.Call:
        """The table's `Table(...)` in the spec's TABLES, without its description: what the spec says of its rows."""
        spec = self.module(SPEC_MODULE)
        declared = spec.definitions["TABLES"]
        assert isinstance(declared, ast.Assign) and isinstance(declared.value, ast.List)
        for call in declared.value.elts:
            if isinstance(call, ast.Call) and call.args and self._value(spec, call.args[0]) == table:
                call.keywords = [k for k in call.keywords if k.arg != "description"]
                return call
        raise ValueError(f"{table} is not declared in {SPEC_MODULE}.TABLES")

    @staticmethod
    def _value(module: _Module, node: ast.expr) -> object:
        if isinstance(node, ast.Name) and isinstance(module.definitions.get(node.id), ast.Assign):
            node = module.definitions[node.id].value  # type: ignore[attr-defined]
        return node.value if isinstance(node, ast.Constant) else None


SPEC_MODULE = "assets_pkg.tables"


def code_versions(root: Path = REPO_ROOT, tables: list[Table] = TABLES) -> dict[str, str]:
    """Table (and side table) -> its code version, from the project's sources under `root`."""
    sources = _Sources(root)
    versions: dict[str, str] = {}
    for table in tables:
        declaration = sources.declaration(table.name)
        spec = sources.module(SPEC_MODULE)
        builds = [b for b in (table.build, table.restate) if b is not None]
        roots = [(b.__module__, b.__name__) for b in builds] + list(sources.references(spec, declaration))
        reached = sources.closure(roots)
        digest = hashlib.sha256(ast.dump(declaration, annotate_fields=False).encode())
        for name in sorted(reached):
            digest.update(f"{name}\n{reached[name]}\n".encode())
        versions[table.name] = digest.hexdigest()[:VERSION_LENGTH]
        for side in table.side_tables:
            versions[side.name] = versions[table.name]  # written by the same build
    return versions


@cache
def current() -> dict[str, str]:
    """The code versions of the code this process loaded (computed once, when first asked: at the code's load)."""
    return code_versions()

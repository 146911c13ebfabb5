"""The package's shape, checked: imports flow one way (no module reaches itself through its imports,
and each imports only the layers below its own, as docs/architecture.md draws them), nothing outside
the registry branches on an algorithm's or a drafter's name (`speculab.registry` holds what every
other module needs to know of them), no function grows past one screen and no module past 450 lines."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from speculab.config import PROJECT_ROOT
from speculab.registry import ALGORITHMS, DRAFTERS

PACKAGE = PROJECT_ROOT / "platform"
REGISTRY = PACKAGE / "speculab" / "registry.py"
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 450
# The package's components (its top-level modules and subpackages), top layer first: a component
# imports only itself and the layers below its own (docs/architecture.md draws the same picture).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("speculab_launcher", "speculab_racing"),  # hydra_plugins' modules: Hydra's entries into `launch`
    ("launch",),
    ("point", "report"),
    ("tracking",),
    ("show",),
    ("runtime", "results"),
    ("config",),
    ("models",),
    ("core", "registry"),
    ("verify",),
    ("drafting",),
    ("device", "process", "data", "stats"),
)


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(path: Path, package: str) -> Iterator[str]:
    """Every module name an `import` or `from ... import` anywhere in the file names (lazy and
    type-checking imports included: a circle through them is still a circle of concerns)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the importing module's package, `level` steps up
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            yield from (f"{base}.{alias.name}" for alias in node.names)


def import_graph(root: Path) -> dict[str, set[str]]:
    """speculab module -> the speculab modules it imports, each with the packages above it (importing
    `a.b.c` runs `a.b`'s __init__ too), leaving out the importer's own packages."""
    modules = {module_name(path, root): path for path in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str] = set()
        for imported in imported_names(path, package):
            while imported and imported not in modules:  # `from pkg.mod import attr` names pkg.mod
                imported = imported.rpartition(".")[0]
            while imported.count("."):
                if imported != name and not name.startswith(f"{imported}."):
                    edges.add(imported)
                imported = imported.rpartition(".")[0]
        graph[name] = edges
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while (member := stack.pop()) != node:
                component.append(member)
            if component:
                found.append(sorted([node, *component]))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_through_others() -> None:
    assert circles(import_graph(PACKAGE)) == []


def component(module: str) -> str:
    """`speculab.tracking.spool` -> `tracking`; the package's own `__init__` is `speculab`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def upward_imports(graph: dict[str, set[str]], layers: tuple[tuple[str, ...], ...]) -> list[str]:
    """`importer -> imported` for each import of a component in the importer's layer or above it."""
    level = {name: depth for depth, names in enumerate(layers) for name in names}
    found = []
    for importer, imported in sorted((a, b) for a, targets in graph.items() for b in targets):
        low, high = component(importer), component(imported)
        if "speculab" not in (low, high) and low != high and level[high] <= level[low]:
            found.append(f"{importer} -> {imported}")
    return found


def test_imports_point_down_the_layers() -> None:
    graph = import_graph(PACKAGE)
    assert {component(m) for m in graph} - {"speculab"} == {name for names in LAYERS for name in names}
    assert upward_imports(graph, LAYERS) == []


def test_the_layer_check_finds_an_import_upward() -> None:
    """The check itself can fail: results reaching up into tracking."""
    graph = {"speculab.results.point": {"speculab.tracking.spool", "speculab.config"}}
    assert upward_imports(graph, LAYERS) == ["speculab.results.point -> speculab.tracking.spool"]


def test_the_circle_check_finds_a_circle(tmp_path: Path) -> None:
    """The check itself can fail: a lazy import back up is a circle."""
    package = tmp_path / "speculab"
    (package / "runtime").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "loop.py").write_text("from speculab.runtime import clock\n")
    (package / "runtime" / "__init__.py").write_text("def clock():\n    from speculab.loop import Loop\n")
    assert circles(import_graph(tmp_path)) == [["speculab.loop", "speculab.runtime"]]


def name_branches(path: Path, names: set[str]) -> Iterator[str]:
    """`file:line` of each comparison (==, !=, in, not in, match) against a registered name literal."""
    for node in ast.walk(ast.parse(path.read_text())):
        literals: list[ast.expr] = []
        if isinstance(node, ast.Compare) and any(
            isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn) for op in node.ops
        ):
            for side in [node.left, *node.comparators]:
                literals += side.elts if isinstance(side, ast.Tuple | ast.List | ast.Set) else [side]
        elif isinstance(node, ast.MatchValue):
            literals = [node.value]
        for literal in literals:
            if isinstance(literal, ast.Constant) and literal.value in names:
                yield f"{path.relative_to(PROJECT_ROOT)}:{literal.lineno} ({literal.value!r})"


def test_nothing_outside_the_registry_branches_on_an_algorithm_or_drafter_name() -> None:
    names = set(ALGORITHMS) | set(DRAFTERS)
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) if path != REGISTRY for hit in name_branches(path, names)]
    assert found == [], "branch on the registry's fields (speculab.registry) instead:\n" + "\n".join(found)


def long_functions(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            if (lines := node.end_lineno - node.lineno + 1) > MAX_FUNCTION_LINES:
                yield f"{path.relative_to(PROJECT_ROOT)}:{node.lineno} {node.name} ({lines} lines)"


def test_no_function_in_the_package_is_longer_than_a_screen() -> None:
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) for hit in long_functions(path)]
    assert found == [], f"split these (at most {MAX_FUNCTION_LINES} lines each):\n" + "\n".join(found)


def test_no_module_is_longer_than_one_job_needs() -> None:
    found = [
        f"{path.relative_to(PROJECT_ROOT)} ({lines} lines)"
        for path in sorted(PACKAGE.rglob("*.py"))
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert found == [], f"split these by job (at most {MAX_MODULE_LINES} lines each):\n" + "\n".join(found)


def test_the_platform_folder_is_not_a_package() -> None:
    """`platform/` is the source root, not a package: an __init__.py there would shadow the standard
    library's `platform` module for anything that puts the repository root on sys.path."""
    assert not (PACKAGE / "__init__.py").exists()

"""The import graph of the product packages: no cycle between modules, and every import follows the
layering of docs/ARCHITECTURE.md ("Import direction").

The imports are read from the source (``ast``; nothing is imported), all of them: module level,
function level and ``if TYPE_CHECKING:`` blocks alike, since a cycle broken by a function-level import is
still a cycle for its reader. ``from a.b import c`` is an edge to ``a.b.c`` when that is a module, else to
``a.b``; the packages ``a`` and ``a.b`` above it are not counted (Python runs their ``__init__`` first, but
that is not what the code depends on).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

from tests.support.ignored import ignored

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = (
    "common", "log", "replication", "metadata", "controller", "broker", "odradek", "proto", "chaos", "spark", "deploy"
)
NOT_PRODUCT = ("bench", "tests")  # no product module may import them (their own imports are not checked)

# Which package may import which (docs/ARCHITECTURE.md, "Import direction"). A package may import itself.
LAYERS: dict[str, frozenset[str]] = {
    "common": frozenset(),
    "proto": frozenset(),
    "log": frozenset({"common"}),
    "replication": frozenset({"common", "log"}),
    "metadata": frozenset({"common", "proto"}),  # the metadata model brokers and controllers share (issue 22)
    "controller": frozenset({"common", "metadata", "proto"}),
    "broker": frozenset({"common", "log", "replication", "metadata", "controller", "proto"}),
    "odradek": frozenset({"common", "proto", "log.record", "log.trace"}),  # of log: the record codec, the trace
    "chaos": frozenset({"common", "odradek", "proto"}),
    "spark": frozenset({"common", "odradek"}),
    "deploy": frozenset({"common", "odradek"}),
}

# Imports across the layers that are there on purpose (listed in docs/ARCHITECTURE.md, "Import direction"):
# importer module -> imported module.
ALLOWED_EDGES: frozenset[tuple[str, str]] = frozenset(
    {
        # the odradek command carries the servers' subcommands (imported when the parser is built)
        ("odradek.cli", "broker.cli"),
        ("odradek.cli", "controller.cli"),
        # odradek dump-log reads segment files: the storage engine's errors and its trace format
        ("odradek.dump_log", "log.errors"),
        # chaos starts nodes and reads their configs like the launchers do
        ("chaos.backends.compose", "controller.ports"),
        ("chaos.backends.local", "controller.ports"),
        ("chaos.runner", "metadata.configs"),
        # the start-time measurement of the compose deployment drives chaos's compose backend
        ("deploy.measure_start", "chaos.backends.compose"),
    }
)


def _modules(packages: tuple[str, ...] = PRODUCT) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):  # nothing when the package does not exist (yet)
            if ignored(str(path.relative_to(ROOT))):  # a build product (deploy/build/context/: a copy of the sources)
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _type_checking_imports(tree: ast.AST) -> set[int]:
    """The ``id`` of every import statement inside an ``if TYPE_CHECKING:`` block."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            for statement in node.body:
                inside.update(id(n) for n in ast.walk(statement) if isinstance(n, (ast.Import, ast.ImportFrom)))
    return inside


def _imported(path: Path, module: str, is_package: bool) -> Iterator[tuple[str, bool]]:
    """``(dotted name, type_only)`` for every name ``path`` imports (``from x import y`` gives ``x.y``; the
    caller walks up to a module)."""
    package = module if is_package else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    type_only = _type_checking_imports(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, id(node) in type_only
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                yield f"{base}.{alias.name}", id(node) in type_only


@functools.cache
def _edges() -> dict[str, tuple[frozenset[str], frozenset[str]]]:
    """Module -> (the product modules it imports where the import runs, those imported only for typing);
    read once per test session."""
    modules = _modules()
    known = {**_modules(NOT_PRODUCT), **modules}  # an import of bench or tests resolves, and is refused below
    edges: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
    for module, path in modules.items():
        run: set[str] = set()
        typed: set[str] = set()
        for name, only_typing in _imported(path, module, path.name == "__init__.py"):
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                (typed if only_typing else run).add(name)
        edges[module] = (frozenset(run), frozenset(typed - run))
    return edges


def import_graph(type_only: bool = False) -> dict[str, set[str]]:
    """Module -> the product modules it imports (the deepest module each import names); with ``type_only``,
    only the edges whose every import is inside ``if TYPE_CHECKING:``. A new dict: the caller may change it."""
    return {module: set(typed) if type_only else set(run | typed) for module, (run, typed) in _edges().items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:  # iterative: no recursion limit on a deep graph
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def _allowed(importer: str, imported: str) -> bool:
    source, target = importer.split(".")[0], imported.split(".")[0]
    if source == target or (importer, imported) in ALLOWED_EDGES:
        return True
    return any(imported == layer or imported.startswith(layer + ".") for layer in LAYERS[source])


def test_no_import_cycle_between_modules() -> None:
    graph = import_graph()
    found = cycles(graph)
    described = [
        ", ".join(f"{a} -> {b}" for a in component for b in sorted(graph[a]) if b in component)
        for component in found
    ]
    assert not found, "import cycles (the edges inside each):\n" + "\n".join(described)


def test_imports_follow_the_layers() -> None:
    graph = import_graph()
    offending = sorted((a, b) for a, edges in graph.items() for b in edges if not _allowed(a, b))
    assert not offending, "imports against docs/ARCHITECTURE.md's layering:\n" + "\n".join(
        f"{a} -> {b}" for a, b in offending
    )


def test_every_import_of_the_project_names_a_module() -> None:
    """``from a.b import c`` needs the module ``a.b``, ``import a.b`` the module ``a.b``: after a move, an import
    of the old place fails here by name (mypy is told to ignore missing imports, so it would not)."""
    modules = _modules()
    known = {**_modules(NOT_PRODUCT), **modules}
    packages = set(PRODUCT) | set(NOT_PRODUCT)
    missing = []
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                names = [base]
            else:
                continue
            missing += [
                f"{module}: {name}"
                for name in names
                if name.split(".")[0] in packages
                and name not in known
                and not (ROOT / name.replace(".", "/")).is_dir()  # a package without __init__.py
            ]
    assert not missing, "imports of modules that do not exist:\n" + "\n".join(sorted(missing))


def test_the_checks_see_what_they_must() -> None:
    """The graph is read (a module known to import another shows the edge), a cycle is found, and an edge
    against the layers is refused: the two tests above cannot pass by seeing nothing."""
    graph = import_graph()
    assert "replication.partition" in graph
    assert "controller.node_api" in graph["controller.service"]
    assert "broker.metrics.node" in import_graph(type_only=True)["broker.metrics"]
    assert "broker.server" not in import_graph(type_only=True)["broker.cli"]  # imported in functions: runs
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert not _allowed("log.log", "broker.server")
    assert not _allowed("controller.server", "odradek.errors")
    assert not _allowed("odradek.producer", "log.log")
    assert not _allowed("broker.server", "bench.group_shard")
    assert not _allowed("log.log", "tests.log.conftest")
    assert _allowed("odradek.producer", "log.record.builder")

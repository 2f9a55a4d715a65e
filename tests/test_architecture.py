"""The architecture's rules that import-linter's contracts (pyproject ``[tool.importlinter]``) cannot
state: no import circle anywhere in the package, the package face imported by nobody below it, and
no import inside a function unless it defers a cost (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "cubeplug"

#: The modules of the face: only they import the package itself (``import cubeplug``).
FACE = {"cubeplug", "cubeplug.__main__", "cubeplug.cli"}

#: Modules that import cubeplug modules inside functions, and why (never to dodge a circle).
DEFERRED = {
    "cubeplug": "the lazy public names keep `import cubeplug` cheap",
    "cubeplug.cli": "`cubeplug --help` starts without the registry, the client and numpy",
    "cubeplug.commands.bench": "the bench machinery loads only when `cubeplug bench` runs",
    "cubeplug.commands.cache": "the settings load only when `cubeplug cache` runs",
    "cubeplug.commands.conformance": "the suite loads only when `cubeplug conformance` runs",
    "cubeplug.testing.backend": "the pytest plugin loads in every pytest session, the registry on use",
    "cubeplug.testing": "the suite's names load on first use",
    "cubeplug.testing.suite": "the suite's modules load on first use",
    "cubeplug.lang": "its modules load on first use of a name: `import cubeplug.lang` stays cheap",
    "cubeplug.collectives.portable": "the lang compiler loads at the first collective, not at client()",
    "cubeplug.backends.opencl.launch_path": "the compiled launcher is optional (absent without a C compiler)",
}
#: A backend's hooks module loads at discovery and probing; its server, storage and GPU library only
#: when a client of it is built.
DEFERRED_SUFFIX = (".plugin", "a backend's hooks load its server and GPU library only to build a client")


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("cubeplug")


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
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
    return found


def test_no_import_circle_anywhere(graph: grimp.ImportGraph) -> None:
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_circle() -> None:
    made = grimp.ImportGraph()
    for a, b in (("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")):
        made.add_import(importer=a, imported=b)
    assert _cycles(made) == [["p.a", "p.b", "p.c"]]


def test_only_the_face_imports_the_package_itself(graph: grimp.ImportGraph) -> None:
    assert graph.find_modules_that_directly_import("cubeplug") - FACE == set()


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _deferred_imports(tree: ast.Module) -> list[tuple[int, str]]:
    """Imports of cubeplug modules inside functions (not under ``if TYPE_CHECKING:``)."""
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                if (node.module or "").startswith("cubeplug"):
                    found.append((node.lineno, node.module or ""))
            elif isinstance(node, ast.Import):
                found += [(node.lineno, a.name) for a in node.names if a.name.startswith("cubeplug")]
    return found


def test_imports_inside_functions_only_defer_a_cost() -> None:
    unexplained = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module(path)
        found = _deferred_imports(ast.parse(path.read_text(), str(path)))
        backend_hooks = module.startswith("cubeplug.backends.") and module.endswith(DEFERRED_SUFFIX[0])
        if found and module not in DEFERRED and not backend_hooks:
            unexplained[module] = found
    assert unexplained == {}, "import at module level, or say in DEFERRED what the deferral saves"

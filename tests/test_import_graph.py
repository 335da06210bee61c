"""No import cycle among spreeze_like's modules.

The graph is built from the source files with ``ast`` (nothing is imported), one node per module.
An edge ``a -> b`` is any ``import``/``from ... import`` of ``b`` in ``a``, **at module level or
inside a function** (chosen so): a function-level import is still a dependency (it only runs later), and the
circle this test was written against (``training`` <-> ``serial``/``supervisor``/``autotune.apply``
through ``TrainResult`` and ``parallel_entry``) had its upward half inside functions. Not counted:
imports under ``if TYPE_CHECKING:`` (never executed), and the root package ``spreeze_like`` as the
implied parent of every submodule import (it is initialised before anything else and imports its
submodules only lazily, in ``__getattr__``; an explicit ``from spreeze_like import train`` would
count). ``from pkg import name`` is an edge to ``pkg.name`` when that is a module (a source file, or
the compiled ``_native``), else to ``pkg``.

A second test imports every module in one fresh interpreter, so a module that cannot be imported
(a missing file, an import-time error) fails here too.
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

PACKAGE = "spreeze_like"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE


def module_names() -> dict[str, Path]:
    names = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST):
    """Every Import/ImportFrom node, skipping the bodies of ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            yield from (n for child in node.orelse for n in _imports_in(child))
            continue
        yield from _imports_in(node)


def _imports_in(node: ast.AST):
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    else:
        yield from _imports(node)


def _is_module(name: str, modules: dict[str, Path]) -> bool:
    if name in modules:
        return True
    if not name.startswith(PACKAGE + "."):
        return False
    try:  # a compiled extension (spreeze_like._native); finding it imports only the light root package
        return importlib.util.find_spec(name) is not None
    except ImportError:
        return False


def import_graph() -> dict[str, set[str]]:
    modules = module_names()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in _imports(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:  # relative: from the module's package, up level - 1 more
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                targets = [f"{source}.{a.name}" if _is_module(f"{source}.{a.name}", modules) else source
                           for a in node.names]
            for target in targets:
                if target in modules and target != PACKAGE and target != name:
                    graph[name].add(target)
                elif target == PACKAGE and isinstance(node, ast.ImportFrom):
                    graph[name].add(PACKAGE)  # an attribute of the root package: its __getattr__ runs
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path a -> ... -> a, or None (iterative DFS, three colours)."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    for start in sorted(graph):
        if state.get(start):
            continue
        stack = [(start, iter(sorted(graph[start])))]
        path = [start]
        state[start] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state.get(child) == 1:
                return path[path.index(child):] + [child]
            elif not state.get(child):
                state[child] = 1
                stack.append((child, iter(sorted(graph[child]))))
                path.append(child)
    return None


def test_the_graph_sees_function_level_and_relative_imports():
    graph = import_graph()
    assert "spreeze_like.config" in graph["spreeze_like.training"]
    assert "spreeze_like.serial" in graph["spreeze_like.modes"]  # imported inside serial_entry()
    assert "spreeze_like.autotune.apply" in graph["spreeze_like.training"]  # imported inside train()
    assert "spreeze_like.algos.base" in graph["spreeze_like.algos.sac"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_among_spreeze_like_modules():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_every_module_imports():
    names = sorted(n for n in module_names() if n != PACKAGE and not n.endswith(".__main__"))  # __main__ runs
    code = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    proc = subprocess.run([sys.executable, "-c", code, *names], capture_output=True, text=True, check=False,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]

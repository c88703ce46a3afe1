"""The package has no import circle, at runtime or for type checking.

import-linter (``pyproject.toml``) keeps the layers one way down between packages; this test
catches a circle anywhere, also between modules of one package, where no contract reaches.
"""

from __future__ import annotations

import grimp

#: Circles known to remain, each with the reason; a new circle fails the test. None remain:
#: model/calls.py and model/generation.py annotate their model with the LanguageModel protocol,
#: and the row ops see the planner through a protocol of their own.
KNOWN: dict[frozenset[str], str] = {}


def circles(graph: grimp.ImportGraph) -> list[frozenset[str]]:
    """Every set of two or more modules that import each other in a loop (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            members = set()
            while True:
                top = stack.pop()
                on_stack.discard(top)
                members.add(top)
                if top == module:
                    break
            if len(members) > 1:
                found.append(frozenset(members))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_no_import_circle():
    graph = grimp.build_graph("bindscope", include_external_packages=False)
    new = [sorted(c) for c in circles(graph) if c not in KNOWN]
    assert new == [], f"import circle(s): {new}; move the shared piece down a layer"


def test_a_circle_is_found():
    """The search itself works: two modules importing each other form one circle."""
    graph = grimp.ImportGraph()
    for name in ("a", "a.one", "a.two", "a.three"):
        graph.add_module(name)
    graph.add_import(importer="a.one", imported="a.two")
    graph.add_import(importer="a.two", imported="a.one")
    graph.add_import(importer="a.three", imported="a.one")
    assert circles(graph) == [frozenset({"a.one", "a.two"})]

"""The package has no import circle, at runtime or for type checking.

import-linter (``pyproject.toml``) keeps the layers one way down between packages; this test
catches a circle anywhere, also between modules of one package, where no contract reaches.
"""

from __future__ import annotations

import ast
from pathlib import Path

import grimp

import bindscope

PACKAGE = Path(bindscope.__file__).parent

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


def function_level_imports(source: str) -> list[tuple[int, str]]:
    """``(line, statement)`` of every import inside a function, not under ``TYPE_CHECKING``."""
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)) and in_function:
                found.append((child.lineno, ast.unparse(child)))
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            visit(child, inner)

    visit(ast.parse(source), False)
    return found


def says_why(lines: list[str], line: int) -> bool:
    """Whether the import at ``line`` (1-based) has a comment on it or just above its group.

    The group is the run of import lines it stands in; one comment above the run serves all.
    """
    if "#" in lines[line - 1]:
        return True
    above = line - 2
    while above >= 0 and lines[above].strip().startswith(("import ", "from ")):
        above -= 1
    return above >= 0 and lines[above].strip().startswith("#")


def test_function_level_imports_say_why():
    """An import inside a function hides a dependency from the linters: each says why.

    The reasons that hold: a heavy or optional third-party library that most commands do not
    need (nnsight, transformers, matplotlib, the HTTP clients), also behind a bindscope module
    that imports one, and nnsight's private modules, looked up where used.
    """
    unexplained = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        lines = source.splitlines()
        for line, statement in function_level_imports(source):
            where = f"{path.relative_to(PACKAGE.parent)}:{line}: {statement}"
            if not says_why(lines, line):
                unexplained.append(f"{where} (no comment says why it is not at the top)")
    assert unexplained == [], "\n".join(unexplained)


def test_an_unexplained_function_level_import_is_found():
    source = (
        "import os\n"
        "def f():\n"
        "    import json\n"
        "    # heavy, needed only here\n"
        "    import numpy\n"
        "    import torch\n"
        "    if TYPE_CHECKING:\n"
        "        import typing\n"
    )
    lines = source.splitlines()
    found = function_level_imports(source)
    assert [line for line, _ in found] == [3, 5, 6]
    assert [says_why(lines, line) for line, _ in found] == [False, True, True]


def _sibling_layers(container: str) -> list[set[str]]:
    """The ``|`` layers of the import-linter contract on ``container`` (``pyproject.toml``)."""
    import tomllib

    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text("utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c.get("containers") == [container]]
    return [{m.strip() for m in layer.split("|")} for layer in contract["layers"]]


def test_sibling_contracts_list_exactly_the_discovered_studies():
    """Adding a study is two modules: this names the contract line the linter needs.

    The experiments (``registry.definitions``) and their figure sections
    (``sections.sections``) are found by discovery; the import-linter contracts that keep
    them siblings list them by name, so each must list exactly what is discovered.
    """
    from bindscope.experiments.kit.registry import definitions
    from bindscope.figures.sections import sections

    for container, found in (
        ("bindscope.experiments", set(definitions())),
        ("bindscope.figures", set(sections())),
    ):
        layers = _sibling_layers(container)
        line = " | ".join(sorted(found))
        assert found in layers, (
            f"pyproject.toml: the contract on {container} must have the layer {line!r} "
            "(its studies, found by discovery) as one line, in place of the old one"
        )

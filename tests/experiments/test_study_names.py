"""A study is its own modules: nothing else in the package names it (issue 29).

A study's modules are ``experiments/<name>.py``, ``experiments/<name>_summary.py``, its
presets ``experiments/<name>_presets.py`` and its figure section ``figures/<name>.py``.
Anywhere else, naming it (importing it, or comparing with, or building a path from, its
name as a string) means that adding or renaming a study touches code outside it. The names
come from discovery (``registry.definitions``), so a new study is checked the day it is
added.
"""

from __future__ import annotations

import ast
from pathlib import Path

import bindscope
from bindscope.experiments.kit.registry import definitions

PACKAGE = Path(bindscope.__file__).parent

#: Folders (and one record kind) one study writes and others read, named once where the kit
#: reads them (the study takes its name from that constant): OUT/binding (reused by C5,
#: the controls and the taxonomy) and OUT/heads (written by `heads` and by `sweep --heads`).
SHARED_FOLDERS = {
    ("binding", "experiments/kit/binding_reuse.py"),
    ("heads", "experiments/kit/taxonomy_summary.py"),
    # the estimate records of `--method attribution`, written by scan and patch alike: their
    # kind `scan-estimate` is a stored format, so renaming it would orphan existing folders
    ("scan", "experiments/kit/attribution_method.py"),
}

#: The demo composes four studies into one run, and the viewer reads five studies' folders:
#: they are their users, like the README.
USERS = {"demo.py", "viewer/folders.py"}


def _names_the_study(value: object, name: str) -> bool:
    return isinstance(value, str) and (value == name or value.startswith((f"{name}-", f"{name}/")))


def places_naming(source: str, names: set[str]) -> list[tuple[int, str]]:
    """``(line, study)`` for each import of a study, or its name compared or used as a path."""
    found = []
    for node in ast.walk(ast.parse(source)):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for module in modules:
            for package in ("bindscope.experiments.", "bindscope.figures."):
                rest = module.removeprefix(package)
                if rest != module and rest.removesuffix("_summary") in names:
                    found.append((node.lineno, rest.removesuffix("_summary")))
        operands: list[ast.expr] = []
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            operands = [node.left, node.right]
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            operands = [node.value]
        for operand in operands:
            if isinstance(operand, ast.Constant):
                found += [(node.lineno, n) for n in names if _names_the_study(operand.value, n)]
    return sorted(set(found))


def test_no_module_outside_a_study_names_it():
    names = set(definitions())
    places = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where in USERS:
            continue
        for line, name in places_naming(path.read_text("utf-8"), names):
            own = {f"experiments/{name}{part}.py" for part in ("", "_summary", "_presets")}
            own.add(f"figures/{name}.py")
            if where not in own and (name, where) not in SHARED_FOLDERS:
                places.append(f"bindscope/{where}:{line} names the study {name!r}")
    assert not places, "\n".join(places)


def test_the_scanner_finds_each_way_of_naming_a_study():
    source = (
        "from bindscope.experiments import c5\n"
        "import bindscope.experiments.scan_summary\n"
        "if name == 'c5':\n    pass\n"
        "folder = out / 'binding'\n"
        "KIND = 'c5-ranking'\n"
        "scores['binding'] = 1\n"  # a taxonomy score called binding: not the study
    )
    found = places_naming(source, {"c5", "scan", "binding"})
    assert found == [(1, "c5"), (2, "scan"), (3, "c5"), (5, "binding"), (6, "c5")]


def test_experiments_holds_only_the_studies():
    """``experiments/`` shows the studies: each module is one, or a study's summary or
    presets."""
    names = set(definitions())
    folder = PACKAGE / "experiments"
    modules = {p.stem for p in folder.glob("*.py")} - {"__init__"}
    others = sorted(
        m for m in modules if m.removesuffix("_summary").removesuffix("_presets") not in names
    )
    assert not others, f"bindscope/experiments/ holds {others}: the kit goes in experiments/kit/"

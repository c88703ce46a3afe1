"""Every function of the package stays at 50 lines or fewer (issue 42's house rule)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import bindscope

PACKAGE = Path(bindscope.__file__).parent
MODULES = sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("module", MODULES)
def test_functions_keep_to_50_lines(module):
    """Counted as tools/house_figures.py counts them: the whole def, docstring included."""
    tree = ast.parse((PACKAGE / module).read_text("utf-8"))
    long = [
        f"{module}:{fn.lineno} {fn.name} ({fn.end_lineno - fn.lineno + 1} lines)"
        for fn in ast.walk(tree)
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
        and fn.end_lineno - fn.lineno + 1 > 50
    ]
    assert long == []

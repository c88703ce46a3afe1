"""Functions split into named steps by issue 42 stay at 50 lines or fewer."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import bindscope

# issue 42: the functions split into named steps, by module (the engine's, the C5 and the
# figures' modules are other engineers' and not listed here)
SPLIT = (
    "demo.py",
    "runners/patching_sweep.py",
    "runners/binding.py",
    "runners/taxonomy_scores.py",
    "runners/behaviour.py",
    "metrics/taxonomy.py",
    "experiments/scan_summary.py",
    "results/settings.py",
    "results/summaries.py",
    "results/records.py",
    "model/wrapper.py",
    "model/calls.py",
    "model/generation.py",
    "cli/arguments.py",
    "remote/preflight.py",
    "loading/__init__.py",
    "loading/weights.py",
    "local_ndif/supervisor.py",
    "local_ndif/pieces.py",
)


@pytest.mark.parametrize("module", SPLIT)
def test_split_modules_keep_functions_to_50_lines(module):
    """Counted as tools/house_figures.py counts them: the whole def, docstring included."""
    path = Path(bindscope.__file__).parent / module
    tree = ast.parse(path.read_text("utf-8"))
    long = [
        f"{module}:{fn.lineno} {fn.name} ({fn.end_lineno - fn.lineno + 1} lines)"
        for fn in ast.walk(tree)
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
        and fn.end_lineno - fn.lineno + 1 > 50
    ]
    assert long == []

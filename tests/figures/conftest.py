"""One full synthetic results folder with its figures drawn once per session."""

from __future__ import annotations

import pytest

from bindscope.figures import make_figures
from tests.figures.synthetic import write_results


@pytest.fixture(scope="session")
def full_results(tmp_path_factory):
    """(results folder, FigureReport) for every experiment, figures in results/figures."""
    root = write_results(tmp_path_factory.mktemp("results"))
    return root, make_figures(root)


@pytest.fixture(scope="session")
def fewshot_only(tmp_path_factory):
    """(results folder, FigureReport) where only the few-shot experiment was run."""
    root = write_results(tmp_path_factory.mktemp("partial"), experiments=("fewshot",))
    return root, make_figures(root)

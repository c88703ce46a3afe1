"""The synthetic results the figure tests draw from cover every discovered section."""

from __future__ import annotations

from bindscope.figures.sections import sections
from tests.figures.synthetic import ALL


def test_synthetic_results_cover_every_discovered_section():
    missing = sorted(set(sections()) - set(ALL))
    unknown = sorted(set(ALL) - set(sections()))
    assert not missing, (
        f"tests/figures/studies/ has no module for {missing}: add one with synthetic_results() "
        "and expected_figures(), so its figures are drawn in the tests"
    )
    assert not unknown, f"tests/figures/studies/ has {unknown}, which no section has"

"""The C5 frontier's maths: detectable specificity against items and sets, and the time model."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bindscope.metrics.stats import detectable_drop
from bindscope.metrics.stats.frontier import (
    c5_seconds,
    detectable_specificity,
    expected_sets_no_effect,
    p_floor,
    unit_spread,
)

SPREAD = unit_spread(item_sd=0.4, random_drops_sd=0.03, n_items=41)


@pytest.mark.parametrize("n", [1, 5, 41, 205])
def test_detectable_specificity_shrinks_as_one_over_sqrt_n(n: int) -> None:
    """Four times the items halve it; sqrt(n) times it stays the same."""
    one = detectable_specificity(SPREAD, n, n_sets=199, n_models=3)
    four = detectable_specificity(SPREAD, 4 * n, n_sets=199, n_models=3)
    assert four == pytest.approx(one / 2, rel=1e-12)
    base = detectable_specificity(SPREAD, 1, n_sets=199, n_models=3)
    assert one * math.sqrt(n) == pytest.approx(base, rel=1e-12)


def test_detectable_specificity_matches_the_summarys_drop_at_the_measured_size() -> None:
    """On the items and sets it was measured on, it is ``detectable_drop`` less the mean."""
    rng = np.random.default_rng(0)
    items = rng.normal(0.1, 0.4, size=41)
    sets = rng.normal(0.02, 0.03, size=39)
    spread = unit_spread(float(items.std(ddof=1)), float(sets.std(ddof=1)), items.size)
    predicted = detectable_specificity(spread, items.size, n_sets=199, n_models=3)
    summary = detectable_drop(sets, items, alpha=0.05 / 3) - sets.mean()
    assert predicted == pytest.approx(summary, rel=1e-12)


def test_a_null_whose_p_cannot_pass_holm_detects_nothing() -> None:
    """At alpha 0.05 over 3 models the level is 1/60: 59 sets reach it, 58 do not."""
    assert p_floor(59) == pytest.approx(0.05 / 3)
    assert math.isfinite(detectable_specificity(SPREAD, 41, n_sets=59, n_models=3))
    assert detectable_specificity(SPREAD, 41, n_sets=58, n_models=3) == math.inf


def test_the_time_model_adds_up() -> None:
    """Fixed part plus items x conditions x cost; each set more adds items x nulls x cost."""
    kw = {"n_items": 41, "n_nulls": 2, "item_seconds": 0.05, "fixed_seconds": 12.0}
    t = c5_seconds(n_sets=10, **kw)
    assert t == pytest.approx(12.0 + 41 * (3 + 2 * 10) * 0.05)
    assert c5_seconds(n_sets=11, **kw) - t == pytest.approx(41 * 2 * 0.05)
    assert c5_seconds(n_sets=0, n_items=0, n_nulls=2, item_seconds=0.05, fixed_seconds=12.0) == 12


def test_expected_sets_without_an_effect() -> None:
    """h + h ln(N/h) under a uniform p (checked by simulation), N when h reaches N."""
    u = np.random.default_rng(1).uniform(size=200_000)
    simulated = np.minimum(199, np.ceil(10 / u)).mean()
    # ceil adds at most one set per draw: the bound is the rounding, not a tuned margin
    assert expected_sets_no_effect(199, 10) <= simulated <= expected_sets_no_effect(199, 10) + 1
    assert expected_sets_no_effect(5, 10) == 5

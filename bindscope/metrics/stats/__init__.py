"""Statistics for head experiments, on numpy, scipy and statsmodels (docs/internals.md).

Inputs are float array-likes (NaN, inf or too few values raise ``ValueError``); an int
``seed`` makes resampling reproducible; results are frozen dataclasses with ``to_dict()``.
"""

from __future__ import annotations

from bindscope.metrics.stats._checks import is_constant
from bindscope.metrics.stats.estimates import (
    bootstrap_statistic,
    cohens_d,
    cohens_d_ci,
    cohens_dz,
    mean_ci,
    paired_difference,
    specificity,
    wilson_ci,
)
from bindscope.metrics.stats.hypothesis_tests import (
    SequentialP,
    adjust_pvalues,
    binomial_leads,
    correlation,
    detectable_drop,
    lagged_correlations,
    paired_permutation,
    rank_p_value,
    sequential_p_value,
    two_sample_permutation,
    windowed_correlation,
)
from bindscope.metrics.stats.results import Estimate, TestResult
from bindscope.metrics.stats.tail import TailP, tail_p_value

__all__ = [
    "Estimate",
    "SequentialP",
    "TailP",
    "TestResult",
    "adjust_pvalues",
    "binomial_leads",
    "bootstrap_statistic",
    "cohens_d",
    "cohens_d_ci",
    "cohens_dz",
    "correlation",
    "detectable_drop",
    "is_constant",
    "lagged_correlations",
    "mean_ci",
    "paired_difference",
    "paired_permutation",
    "rank_p_value",
    "sequential_p_value",
    "specificity",
    "tail_p_value",
    "two_sample_permutation",
    "wilson_ci",
    "windowed_correlation",
]

"""Statistics for attention-head experiments.

Confidence intervals, permutation tests, effect sizes, multiple-comparison
adjustment and (lagged) correlations, built on numpy, scipy and statsmodels.

Modules:
    results: ``Estimate`` and ``TestResult``.
    estimates: bootstrap intervals (means, paired drops, specificity) and Wilson.
    effects: Cohen's d and d_z.
    hypothesis_tests: rank p-values, permutation tests, the binomial test.
    multiple: p-value adjustment.
    sequential: sequential Monte Carlo p-values (Besag and Clifford).
    tail: a permutation p's tail approximation (generalized Pareto fit).
    power: the smallest drop a rank test could detect.
    correlation: correlations, lead-lag and windowed correlations.

Conventions:
    * Inputs are array-likes of floats. NaN or infinite values raise
      ``ValueError`` naming the argument and the count.
    * Too few values for a method raise ``ValueError``.
    * Randomness comes from ``numpy.random.default_rng(seed)`` with an int
      ``seed`` passed (and stored) by the caller, so results are reproducible.
    * Results are frozen dataclasses whose ``to_dict()`` is JSON-serialisable.

Interval method strings:
    ``"bootstrap-bca"``: scipy's BCa bootstrap interval.
    ``"bootstrap-percentile"``: percentile interval, used when BCa is undefined
    (non-finite) but the bootstrap distribution is not constant, or when over 1% of
    the resamples tie with the estimate (few distinct values), where BCa's bias
    correction would move its bounds by a whole step on float noise of 1e-6.
    ``"degenerate"``: every resample (or every value) gives the same statistic,
    so the interval is ``(value, value)``. "Same" allows a spread of
    1e-12 relative to the magnitude of the inputs (floating-point rounding,
    e.g. the differences ``a - (a - 0.3)``).
    ``"wilson"``: Wilson score interval for a proportion.
"""

from __future__ import annotations

from bindscope.metrics.stats._checks import is_constant
from bindscope.metrics.stats.correlation import (
    correlation,
    lagged_correlations,
    windowed_correlation,
)
from bindscope.metrics.stats.effects import cohens_d, cohens_d_ci, cohens_dz
from bindscope.metrics.stats.estimates import (
    bootstrap_statistic,
    mean_ci,
    paired_difference,
    specificity,
    wilson_ci,
)
from bindscope.metrics.stats.hypothesis_tests import (
    binomial_leads,
    paired_permutation,
    rank_p_value,
    two_sample_permutation,
)
from bindscope.metrics.stats.multiple import adjust_pvalues
from bindscope.metrics.stats.power import detectable_drop
from bindscope.metrics.stats.results import (  # noqa: F401  METHOD_*: names the one-file module had
    METHOD_BCA,
    METHOD_DEGENERATE,
    METHOD_PERCENTILE,
    Estimate,
    TestResult,
)
from bindscope.metrics.stats.sequential import SequentialP, sequential_p_value
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

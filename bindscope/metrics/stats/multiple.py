"""Multiple-comparison adjustment of p-values (statsmodels' ``multipletests``)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from statsmodels.stats.multitest import multipletests

from bindscope.metrics.stats._checks import _as_1d


def adjust_pvalues(pvalues: ArrayLike, *, method: str = "holm") -> list[float]:
    """Adjusted p-values, in input order, by a ``multipletests`` method (``"fdr_bh"``...)."""
    p = _as_1d(pvalues, "pvalues", min_len=1)
    # multipletests does not check the range; a p-value outside [0, 1] is a caller's bug.
    if np.any((p < 0.0) | (p > 1.0)):
        raise ValueError("'pvalues' must all lie in [0, 1]")
    adjusted = multipletests(p, method=method)[1]
    return [float(v) for v in adjusted]

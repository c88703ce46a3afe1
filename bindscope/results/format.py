"""How numbers in results read, the same on the terminal and in the report."""

from __future__ import annotations

import math
from collections.abc import Sequence

DASH = "–"


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def num(value: float | None, digits: int = 3) -> str:
    """A float to ``digits`` decimals, an int as it is; None or NaN as a dash."""
    if value is None or _missing(value):
        return DASH
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return f"{float(value):.{digits}f}"


def estimate(est: dict | None, digits: int = 3, scale: float = 1.0) -> str:
    """An Estimate dict as ``value [low, high]`` (scaled, e.g. by 100 for points)."""
    if not est or est.get("value") is None:
        return DASH
    value, low, high = (
        None if est.get(k) is None else est[k] * scale for k in ("value", "low", "high")
    )
    if low is None or high is None:
        return num(value, digits)
    return f"{num(value, digits)} [{num(low, digits)}, {num(high, digits)}]"


def pvalue(p: float | None) -> str:
    """A p-value: three decimals, or scientific notation below 0.001."""
    if p is None or _missing(p):
        return DASH
    p = float(p)
    return f"{p:.1e}" if 0 < p < 0.001 else f"{p:.3f}"


def heads(pairs: Sequence[Sequence[int]] | None) -> str:
    """Heads as ``L3.H5, L7.H0`` (layer and head indices from 0)."""
    if not pairs:
        return DASH
    return ", ".join(f"L{layer}.H{head}" for layer, head in pairs)


__all__ = ["DASH", "estimate", "heads", "num", "pvalue"]

"""Argument checks scipy and statsmodels leave open (NaN and inf, seeds, levels, names)."""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from bindscope.errors import whole_number

# Values whose spread is below this fraction of their magnitude are treated as
# identical: such spread is floating-point rounding (e.g. ``a - (a - 0.3)``).
_REL_TOL = 1e-12


def is_constant(values: ArrayLike) -> bool:
    """Whether the values (any shape; not empty) are equal up to rounding (1e-12 relative)."""
    return _nearly_constant(np.asarray(values, dtype=np.float64).ravel())


def _nearly_constant(arr: NDArray[np.float64], scale: float | None = None) -> bool:
    if arr.size == 0:
        return False
    if scale is None:
        scale = float(np.max(np.abs(arr)))
    return bool(np.ptp(arr) <= _REL_TOL * scale)


def _check_finite(arr: NDArray[np.float64], name: str) -> None:
    n_nan = int(np.isnan(arr).sum())
    if n_nan:
        raise ValueError(f"{name!r} has {n_nan} NaN value(s) out of {arr.size}")
    n_inf = int(np.isinf(arr).sum())
    if n_inf:
        raise ValueError(f"{name!r} has {n_inf} infinite value(s) out of {arr.size}")


def _as_1d(values: ArrayLike, name: str, *, min_len: int = 1) -> NDArray[np.float64]:
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name!r} must be an array-like of floats: {exc}") from exc
    if arr.ndim != 1:
        raise ValueError(f"{name!r} must be one-dimensional, got shape {arr.shape}")
    _check_finite(arr, name)
    if arr.size < min_len:
        raise ValueError(f"{name!r} needs at least {min_len} value(s), got {arr.size}")
    return arr


def _against_null(
    observed: float, null: ArrayLike, *, min_len: int
) -> tuple[float, NDArray[np.float64]]:
    obs = float(observed)
    if not math.isfinite(obs):
        raise ValueError(f"'observed' must be finite, got {observed!r}")
    return obs, _as_1d(null, "null", min_len=min_len)


def _same_length(a: NDArray[np.float64], b: NDArray[np.float64], na: str, nb: str) -> None:
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(
            f"{na!r} and {nb!r} must have the same length, got {a.shape[-1]} and {b.shape[-1]}"
        )


def _two_samples(
    a: ArrayLike, b: ArrayLike, names: tuple[str, str], *, min_len: int, paired: bool
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    first = _as_1d(a, names[0], min_len=min_len)
    second = _as_1d(b, names[1], min_len=min_len)
    if paired:
        _same_length(first, second, *names)
    return first, second


def _check_count(value: int, name: str, least: int | None = None) -> int:
    count = whole_number(value, name, f"pass an int as {name!r}", error=TypeError)
    return whole_number(count, name, f"raise {name!r} to {least}", least=least, error=ValueError)


def _check_confidence(confidence: float) -> float:
    c = float(confidence)
    if not 0.0 < c < 1.0:
        raise ValueError(f"'confidence' must be in (0, 1), got {confidence!r}")
    return c


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(_check_count(seed, "seed"))


def _check_resampling(
    confidence: float, n_resamples: int, seed: int
) -> tuple[float, int, np.random.Generator]:
    # scipy's bootstrap takes n_resamples=0 and any level, and a constant sample skips it
    confidence = _check_confidence(confidence)
    n_resamples = _check_count(n_resamples, "n_resamples", least=1)
    return confidence, n_resamples, _rng(seed)

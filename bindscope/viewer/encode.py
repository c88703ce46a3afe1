"""Attention weights packed for the page: 1e-6 steps, lower triangle, varint bytes, base64."""

from __future__ import annotations

import base64

import numpy as np

SCALE = 1_000_000  # the page's weights are integers / SCALE

__all__ = ["SCALE", "encode", "quantize"]


def quantize(patterns: np.ndarray) -> np.ndarray:
    """``[heads, n, n]`` weights to their lower triangles in 1e-6 steps: ``[heads, n(n+1)/2]``."""
    n = patterns.shape[-1]
    rows, cols = np.tril_indices(n)  # row-major: query 0's keys, then query 1's, ...
    steps = np.rint(np.clip(patterns[:, rows, cols].astype(np.float64), 0.0, 1.0) * SCALE)
    return steps.astype(np.int64)


def encode(steps: np.ndarray) -> str:
    """Integers in ``[0, 2^21)`` as base64 varints (7 bits a byte, high bit: more follows)."""
    values = steps.reshape(-1).astype(np.int64)
    groups = np.stack([values & 127, (values >> 7) & 127, values >> 14], axis=1)
    length = 1 + (values >= 128) + (values >= 1 << 14)
    more = np.arange(3)[None, :] < (length[:, None] - 1)
    keep = np.arange(3)[None, :] < length[:, None]
    data = (groups | (more << 7))[keep].astype(np.uint8)
    return base64.b64encode(data.tobytes()).decode("ascii")

"""Per-head tests shared by the head scan and activation patching: options and statistics."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import spearmanr

from bindscope.errors import InputError
from bindscope.experiments.kit import limits
from bindscope.experiments.kit.options import Options, option, positive
from bindscope.experiments.kit.summary import per_model_text
from bindscope.metrics import stats
from bindscope.results import format as fmt

CORRECTIONS = {"bh": "fdr_bh", "holm": "holm"}
MIN_RESAMPLES = 9999


@dataclass(frozen=True)
class HeadTestOptions(Options):
    """Options of the per-head tests (``bindscope scan``, ``bindscope patch``)."""

    unit: str = option(
        "head", "one condition per head, or per layer (every head of it)", choices=("head", "layer")
    )
    correction: str = option(
        "bh",
        "multiple-comparison correction across heads: Benjamini-Hochberg or Holm",
        choices=tuple(CORRECTIONS),
    )
    limit: int | None = option(
        None,
        "only N items (default: all): the first N scannable prompts (scan: recognition items "
        "and prompts with a target) or the first N pairs that fit the tokenizer (patch)",
        least=1,
    )
    n_resamples: int | None = option(
        None,
        "bootstrap/permutation draws (default: enough for one head alone to pass the "
        "correction, 2 x heads / 0.05, and at least 9999)",
        type=positive,
    )


def default_resamples(n_tests: int) -> int:
    """Resamples enough for one unit alone to pass the correction over ``n_tests`` units."""
    return max(MIN_RESAMPLES, limits.resamples_for_one(n_tests))


#: Bytes per resample and item: scipy draws every resample at once, about four 8-byte numbers.
BYTES_PER_DRAW = 32


def check_resamples(n_resamples: int | None, n_items: int) -> None:
    """Refuse ``n_resamples`` the summary could not hold in memory, before any work."""
    if n_resamples is None or n_items < 1:
        return
    need = n_resamples * n_items * BYTES_PER_DRAW
    room = _memory() // 2
    if need > room:
        most = max(1, room // (n_items * BYTES_PER_DRAW))
        raise InputError(
            f"n_resamples={n_resamples} (--n-resamples {n_resamples}): the summary's "
            f"bootstrap over {n_items} items would hold about {need / 2**30:,.1f} GiB, more "
            f"than half this machine's {2 * room / 2**30:,.1f} GiB; pass at most {most:,} "
            "(or leave it out for the default)"
        )


def _memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 16 * 2**30


def finite(value: object) -> bool:
    """A record's metric that can enter a test: a number, not null, NaN or inf."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _cell_stats(a: np.ndarray, b: np.ndarray, *, seed: int, n_resamples: int) -> dict:
    diff = a - b
    if len(diff) < 2:
        value = float(diff.mean()) if len(diff) else math.nan
        return {"value": value, "low": None, "high": None, "p": None, "n": len(diff)}
    if np.allclose(diff, diff[0], rtol=0, atol=0):
        # a constant difference has no sampling variation to resample
        value = float(diff[0])
        return {"value": value, "low": value, "high": value, "p": 1.0 if value == 0 else None,
                "n": len(diff)}  # fmt: skip
    ci = stats.paired_difference(a, b, seed=seed, n_resamples=n_resamples)
    test = stats.paired_permutation(
        a, b, alternative="two-sided", seed=seed, n_resamples=n_resamples
    )
    return {"value": ci.value, "low": ci.low, "high": ci.high, "p": test.p_value, "n": ci.n}


def tested_cells(
    pairs: dict[str, tuple[np.ndarray, np.ndarray]],
    *,
    seed: int,
    n_resamples: int,
    correction: str,
    n_tests: int,
) -> dict[str, dict]:
    """Each condition's mean difference with CI and p, adjusted over ``n_tests``."""
    cells = {
        name: _cell_stats(a, b, seed=seed, n_resamples=n_resamples)
        for name, (a, b) in pairs.items()
    }
    names = [n for n, c in cells.items() if c.get("p") is not None]
    ps = [cells[n]["p"] for n in names] + [1.0] * max(0, n_tests - len(cells))
    found = stats.adjust_pvalues(ps, method=CORRECTIONS[correction]) if ps else []
    adjusted = dict(zip(names, found))
    for name, cell in cells.items():
        cell["p_adjusted"] = adjusted.get(name)
        cell["significant"] = name in adjusted and bool(adjusted[name] < limits.ALPHA)
    return cells


def effect_map(
    cells: dict[str, dict],
    heads: dict[str, list],
    n_layers: int,
    n_heads: int | tuple[int, ...],
    field: str = "value",
) -> list:
    """Nested lists ``[L, H]`` of the cells' ``field`` (``[L, H, P]``: a tuple ``n_heads``)."""
    shape = (n_layers, *(n_heads if isinstance(n_heads, tuple) else (n_heads,)))
    out = np.full(shape, None, dtype=object)
    for name, cell in cells.items():
        out[tuple(heads[name])] = cell.get(field)
    return out.tolist()


def top_cells(cells: dict[str, dict], heads: dict[str, list], k: int) -> list[dict]:
    """The ``k`` cells with the largest value, with their CIs and adjusted p."""
    ordered = sorted(
        (n for n in cells if cells[n]["value"] is not None and not math.isnan(cells[n]["value"])),
        key=lambda n: (-cells[n]["value"], heads[n]),
    )
    return [{"condition": n, "head": heads[n], **cells[n]} for n in ordered[:k]]


def map_correlation(
    x: np.ndarray, y: np.ndarray, *, seed: int, n_resamples: int = 999
) -> dict | None:
    """Spearman correlation of two ``[prompts, cells]`` maps averaged over prompts, with a CI."""
    if x.shape[0] < 2 or x.shape[1] < 3:
        return None

    def rho(rows: Any) -> float:
        a, b = x[rows].mean(0), y[rows].mean(0)
        if np.ptp(a) == 0 or np.ptp(b) == 0:
            return math.nan
        return float(spearmanr(a, b).statistic)

    n = x.shape[0]
    value = rho(np.arange(n))
    rng = np.random.default_rng(seed)
    draws = np.array([rho(rng.integers(0, n, n)) for _ in range(n_resamples)])
    draws = draws[np.isfinite(draws)]
    low, high = np.quantile(draws, [0.025, 0.975]) if len(draws) else (math.nan, math.nan)
    return {
        "value": value,
        "low": float(low),
        "high": float(high),
        "confidence": 0.95,
        "method": "spearman; bootstrap-percentile over prompts",
        "n_prompts": int(n),
        "n_cells": int(x.shape[1]),
    }


def cell_line(cell: dict) -> str:
    """One condition's line: its effect with CI and adjusted p (starred when significant)."""
    mark = "*" if cell.get("significant") else " "
    return (
        f"{cell['condition']:<10}{fmt.estimate(cell):>24}"
        f"  p_adj {fmt.pvalue(cell.get('p_adjusted'))}{mark}"
    )


def matched_lines(block: dict | None) -> list[str]:
    """The EB* top set against class-matched random sets, one line per metric."""
    if not block:
        return []
    if "skipped" in block:
        return [f"    EB* top vs class-matched sets: skipped ({block['skipped']})"]
    return [
        f"    EB* top {found['top']} ({', '.join(found['top_classes'])}) {metric}: "
        f"effect {found['top_effect']:.3f} vs {found['n_random']} class-matched sets, "
        f"p {found['p_value']:.3f} (floor {found['p_floor']:.3f})"
        for metric, found in block.items()
    ]


def agreement_lines(found: dict | None) -> list[str]:
    """``scan --method attribution``: the estimate against the verified heads."""
    if not found:
        return []
    rho = found.get("spearman")
    return [
        f"      attribution estimate vs exact on {found['n_verified']} verified heads: "
        f"Spearman {'n/a' if rho is None else f'{rho:.3f}'}, "
        f"same sign {found['sign_agreement']:.0%}"
    ]


def summary_lines(
    s: dict, *, title: str, model_lines: Callable[[str, dict, int], list[str]], top: int = 5
) -> list[str]:
    """Readable lines of a per-head test summary (``s``): ``title``, then each model's lines."""
    if not s.get("models"):  # nothing summarised: no effect, no correction to name
        return [f"{title}: no records"]
    header = f"{title}: {s.get('effect', '')}; 95% paired bootstrap CIs, {s.get('correction')} p"
    return per_model_text(s, [header], lambda label, m: model_lines(label, m, top))

"""What a summary cannot say: each experiment's summary lists its own limits.

A limit is a dict ``{"kind", "model", "message", ...numbers}``; the summaries compute them (so
the report and the terminal only read them). Kinds: ``p_resolution`` (a rank p-value over N
random sets cannot go below 1/(N+1)), ``floor`` / ``ceiling`` (a 0-1 baseline below
``FLOOR`` or above ``CEILING``: a drop has little room), ``excluded`` (prompts left out of the
numbers and why) and ``small_group`` (fewer items than the test needs).
"""

from __future__ import annotations

import math

#: The test level the p-value resolution is compared with.
ALPHA = 0.05
#: A 0-1 baseline below FLOOR or above CEILING leaves little room to move.
FLOOR, CEILING = 0.1, 0.9
#: Fewest items a paired or two-sample test runs on.
MIN_GROUP = 2


def p_resolution(model: str, n_random: int, task: str | None = None) -> dict | None:
    """The smallest rank p-value ``n_random`` random sets allow, when above ``ALPHA``."""
    bound = 1.0 / (n_random + 1)
    if bound <= ALPHA:
        return None
    where = f" ({task})" if task else ""
    return {
        "kind": "p_resolution",
        "model": model,
        "task": task,
        "n_random": n_random,
        "min_p": bound,
        "message": f"{model}{where}: with {n_random} random sets the rank p-value cannot go "
        f"below 1/{n_random + 1} = {bound:.3g}, above the test level {ALPHA}; the test cannot "
        f"reject (use {math.ceil(2 / ALPHA) - 1} or more random sets: p down to {ALPHA / 2:g})",
    }


def floor_ceiling(model: str, name: str, baseline: float | None) -> dict | None:
    """A 0-1 ``baseline`` at the floor or the ceiling, else None."""
    if baseline is None:
        return None
    if baseline < FLOOR:
        kind, room = "floor", "an ablation can hardly lower it"
    elif baseline > CEILING:
        kind, room = "ceiling", "a gain cannot show and drops are bounded by it"
    else:
        return None
    return {
        "kind": kind,
        "model": model,
        "score": name,
        "baseline": baseline,
        "message": f"{model}: {name} baseline {baseline:.3f} is at the {kind} "
        f"(< {FLOOR} or > {CEILING} on a 0-1 score): {room}",
    }


def excluded(model: str, reasons: dict[str, int], where: str) -> dict | None:
    """Prompts left out of ``where`` and why (``reasons``: reason -> count)."""
    total = sum(reasons.values())
    if not total:
        return None
    said = ", ".join(f"{n} {reason}" for reason, n in sorted(reasons.items()))
    return {
        "kind": "excluded",
        "model": model,
        "where": where,
        "n": total,
        "reasons": dict(reasons),
        "message": f"{model}: {total} prompts left out of {where} ({said}; at_position_0: the "
        "term starts on the attention sink, pass --prepend-bos to keep them)"
        if "at_position_0" in reasons
        else f"{model}: {total} prompts left out of {where} ({said})",
    }


def small_group(model: str, group: str, n: int, test: str) -> dict | None:
    """A group with fewer than ``MIN_GROUP`` items, too small for ``test``."""
    if n >= MIN_GROUP:
        return None
    return {
        "kind": "small_group",
        "model": model,
        "group": group,
        "n": n,
        "message": f"{model}: {group} has {n} item(s), fewer than the {MIN_GROUP} {test} needs; "
        "no test was run",
    }


def collect(*found: dict | None) -> list[dict]:
    """The limits found, Nones dropped."""
    return [f for f in found if f is not None]


__all__ = ["ALPHA", "CEILING", "FLOOR", "collect", "excluded", "floor_ceiling", "p_resolution"]

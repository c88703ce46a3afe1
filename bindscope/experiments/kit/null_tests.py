"""Each null's test of the top set's drop: its sets' names, exact p, support and GPD tail p."""

from __future__ import annotations

from collections.abc import Iterable

from bindscope.metrics import stats


def null_names(conditions: Iterable[str], null: str) -> list[str]:
    """The condition names of one null in draw order (``random:7`` before ``random:10``)."""
    names = [c for c in conditions if c.startswith(f"{null}:")]
    return sorted(names, key=lambda c: int(c.split(":", 1)[1]))


def null_test(
    top_drop: float, drops: list[float], settings: dict, support: int | None = None
) -> dict | None:
    """The p of the top drop against one null's drops, as the run's sampling design says.

    ``fixed``: the rank p over every drop. ``sequential`` (Besag-Clifford): stop once
    ``stop_at`` drops reach the top drop, at most ``n_random`` (or the null's ``support``,
    its distinct sets, where fewer: each was drawn once); None while undecided.
    """
    if settings.get("sampling", "fixed") == "fixed":
        p = stats.rank_p_value(top_drop, drops, alternative="greater")
        hits = sum(d >= top_drop for d in drops)
        return {"p": p, "n_drawn": len(drops), "exceedances": hits, "stopped": "fixed"}
    most = settings["n_random"] if support is None else min(settings["n_random"], support)
    found = stats.sequential_p_value(top_drop, drops, stop_at=settings["stop_at"], max_draws=most)
    return None if found is None else found.to_dict()


def null_supports(group: list[dict]) -> dict[str, dict]:
    """Each null's support as the run noted it: ``{null: {"support", "n_sets"}}``.

    Runs before the support was counted noted none: ``{}``.
    """
    return next((r["null_support"] for r in group if r.get("null_support")), {})


def enumerated(support: dict | None, n_random: int) -> bool:
    """Whether a null's sets are its whole support (fewer distinct sets than asked for)."""
    count = (support or {}).get("support")
    return count is not None and count <= n_random


#: Bootstrap resamples of the null sets behind a GPD tail p's interval.
TAIL_RESAMPLES = 199


def tail_test(
    top_drop: float, drops: list[float], test: dict, seed: int, *, enumerated: bool = False
) -> dict:
    """The GPD tail p beside the exact one, and which of them Holm uses (``p_used``).

    Fitted only where the null ran to its end (``fixed``, or sequential ``maximum``) with
    fewer than ``MIN_EXCEEDANCES`` sets at or above the top drop; a sequence that stopped on
    its h exceedances keeps its exact p, and so does a null whose sets are its whole
    support (``enumerated``: the exact p is then the permutation p, and no tail can go
    below 1 / (support + 1)).
    """
    if test["stopped"] == "reached" or enumerated:
        method = "enumerated" if enumerated else "exact"
        tail = stats.TailP(None, method, test["exceedances"], test["n_drawn"])
    else:
        tail = stats.tail_p_value(
            top_drop, drops[: test["n_drawn"]], n_boot=TAIL_RESAMPLES, seed=seed
        )
    fitted = tail.p is not None
    return {
        "tail": tail.to_dict(),
        "p_used": tail.p if fitted else test["p"],
        "holm_on": "tail" if fitted else "exact",
    }


__all__ = ["TAIL_RESAMPLES", "enumerated", "null_names", "null_supports", "null_test", "tail_test"]

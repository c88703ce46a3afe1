"""Each null's test of the top set's drop: its sets' names, exact p, support and GPD tail p."""

from __future__ import annotations

from collections.abc import Iterable

from bindscope.errors import InputError
from bindscope.experiments.kit.ablation_sets import (
    class_counts,
    draw_random_sets,
    draw_score_matched_sets,
    random_set_support,
)
from bindscope.experiments.kit.taxonomy_plan import taxonomy_means
from bindscope.metrics import stats
from bindscope.protocols import LanguageModel


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


def null_sets(
    model: LanguageModel,
    top: list[list[int]],
    nulls: list[str],
    *,
    k: int,
    n: int,
    seed: int,
    templates: list[str],
    batch_size: int,
) -> tuple[dict[str, list], dict]:
    """Each null's sets in draw order, and what the top set's records note about them.

    The notes: how close the class-matched null's match is (``null_match``), a
    layer-matched null that this top set makes impossible (``nulls_not_drawn``: a layer
    holding more top heads than heads outside them; known only once heads are ranked, so
    it is a stated limit, not an error after the ranking's work), and each null's support
    (``null_support``: the distinct sets it can draw; where fewer than ``n_random`` each
    is drawn once). ``templates`` (the ranking set's) give the class-matched null's
    taxonomy scores.
    """
    drawn: dict[str, list] = {}
    notes: dict = {}
    for null in nulls:
        if null == "classes":
            means = taxonomy_means(model, templates, seed=seed, batch_size=batch_size)
            drawn[null], closeness = draw_score_matched_sets(
                means, top, n=n, seed=seed, neighbours=2 * k
            )
            notes["null_match"] = class_counts(means, top, closeness)
            continue
        try:
            drawn[null] = draw_random_sets(
                model.n_layers, model.n_heads, top, k=k, n=n, seed=seed,
                matched_layers=null == "layers",
            )  # fmt: skip
        except InputError as exc:
            if null != "layers":
                raise
            notes["nulls_not_drawn"] = {null: str(exc)}
    notes["null_support"] = {
        null: _support(model, top, k, null, len(sets), n) for null, sets in drawn.items()
    }
    return drawn, notes


def _support(
    model: LanguageModel, top: list[list[int]], k: int, null: str, n_sets: int, n: int
) -> dict:
    """A null's support: the distinct sets it can draw, and the sets drawn.

    Counted for random and layer-matched sets; for class-matched ones known exactly where
    the draw enumerated it (fewer than ``n``), else None ("more than n").
    """
    if null == "classes":
        support = n_sets if n_sets < n else None
    else:
        support = random_set_support(
            model.n_layers, model.n_heads, top, k=k, matched_layers=null == "layers"
        )
    return {"support": support, "n_sets": n_sets}


__all__ = [
    "TAIL_RESAMPLES",
    "enumerated",
    "null_names",
    "null_sets",
    "null_supports",
    "null_test",
    "tail_test",
]

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
    """The p of the top drop against one null's drops, as the run's sampling design says."""
    if settings.get("sampling", "fixed") == "fixed":
        p = stats.rank_p_value(top_drop, drops, alternative="greater")
        hits = sum(d >= top_drop for d in drops)
        return {"p": p, "n_drawn": len(drops), "exceedances": hits, "stopped": "fixed"}
    most = settings["n_random"] if support is None else min(settings["n_random"], support)
    found = stats.sequential_p_value(top_drop, drops, stop_at=settings["stop_at"], max_draws=most)
    return None if found is None else found.to_dict()


def null_supports(group: list[dict]) -> dict[str, dict]:
    """Each null's support as the run noted it: ``{null: {"support", "n_sets"}}``."""
    return next((r["null_support"] for r in group if r.get("null_support")), {})


def enumerated(support: dict | None, n_random: int) -> bool:
    """Whether a null's sets are its whole support (fewer distinct sets than asked for)."""
    count = (support or {}).get("support")
    return count is not None and count <= n_random


#: Bootstrap resamples of the null sets behind a GPD tail p's interval.
TAIL_RESAMPLES = 199


def null_p(top_drop: float, drops: list[float], settings: dict, support: dict) -> dict:
    """One null's test: the exact p, the GPD tail p beside it, which Holm uses, the support."""
    n_random, count = settings["n_random"], support.get("support")
    test = null_test(top_drop, drops, settings, count)
    if test is None:
        test = {"p": None, "n_drawn": len(drops), "stopped": "incomplete"}
    else:
        whole = enumerated(support, n_random)
        if test["stopped"] == "reached" or whole:
            method = "enumerated" if whole else "exact"
            tail = stats.TailP(None, method, test["exceedances"], test["n_drawn"])
        else:
            used = drops[: test["n_drawn"]]
            tail = stats.tail_p_value(top_drop, used, n_boot=TAIL_RESAMPLES, seed=settings["seed"])
        fitted = tail.p is not None
        test.update(
            tail=tail.to_dict(),
            p_used=tail.p if fitted else test["p"],
            holm_on="tail" if fitted else "exact",
        )
    most = n_random if count is None else min(n_random, count)
    return {**test, "support": count, "most": most, "p_floor": 1 / (most + 1)}


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
    """Each null's sets in draw order, and what the top set's records note about them."""
    drawn: dict[str, list] = {}
    notes: dict = {}
    support: dict[str, int | None] = {}
    for null in nulls:
        if null == "classes":
            means = taxonomy_means(model, templates, seed=seed, batch_size=batch_size)
            drawn[null], closeness = draw_score_matched_sets(
                means, top, n=n, seed=seed, neighbours=2 * k
            )
            notes["null_match"] = class_counts(means, top, closeness)
            support[null] = len(drawn[null]) if len(drawn[null]) < n else None
            continue
        shape = (model.n_layers, model.n_heads, top)
        try:
            drawn[null] = draw_random_sets(
                *shape, k=k, n=n, seed=seed, matched_layers=null == "layers"
            )
        except InputError as exc:  # known only after ranking: a stated limit, not an error
            if null != "layers":
                raise
            notes["nulls_not_drawn"] = {null: str(exc)}
            continue
        support[null] = random_set_support(*shape, k=k, matched_layers=null == "layers")
    notes["null_support"] = {
        null: {"support": count, "n_sets": len(drawn[null])} for null, count in support.items()
    }
    return drawn, notes


__all__ = [
    "TAIL_RESAMPLES",
    "enumerated",
    "null_names",
    "null_p",
    "null_sets",
    "null_supports",
    "null_test",
]

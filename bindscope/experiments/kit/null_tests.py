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


def tail_test(
    top_drop: float, drops: list[float], test: dict, seed: int, *, enumerated: bool = False
) -> dict:
    """The GPD tail p beside the exact one, and which of them Holm uses (``p_used``)."""
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
    """Each null's sets in draw order, and what the top set's records note about them."""
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
        except InputError as exc:  # known only after ranking: a stated limit, not an error
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

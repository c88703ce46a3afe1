"""C5's nulls: the head-set size a model can supply, and each null's sets in draw order."""

from __future__ import annotations

from bindscope.errors import InputError
from bindscope.experiments.kit.ablation_sets import (
    class_counts,
    draw_random_sets,
    draw_score_matched_sets,
    random_set_support,
)
from bindscope.experiments.kit.taxonomy_plan import taxonomy_means
from bindscope.protocols import LanguageModel
from bindscope.results.labels import model_label


def check_k(model: LanguageModel, *, k: int, matched_classes: bool = False) -> None:
    """Refuse a head-set size the model cannot supply, before any work.

    The top set has k heads and every random set k more from outside it, so 2k heads must
    exist (the bottom set is drawn from all heads); a class-matched null draws each top
    head's match from its 2k nearest heads outside the top set, so 3k.

    Raises:
        InputError: k is above heads/2 (heads/3 with a class-matched null).
    """
    total = model.n_layers * model.n_heads
    if 2 * k > total:
        raise InputError(
            f"--k {k}: {model_label(model)} has {total} heads ({model.n_layers} layers x "
            f"{model.n_heads}), but the top set and each random set drawn outside it need "
            f"{2 * k}; pass --k {total // 2} or less"
        )
    if matched_classes and 3 * k > total:
        raise InputError(
            f"--matched-classes --k {k}: {model_label(model)} has {total} heads, but a "
            f"class-matched null picks each top head's match among its {2 * k} nearest heads "
            f"outside the top set ({3 * k} heads); pass --k {total // 3} or less"
        )


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


__all__ = ["check_k", "null_sets"]

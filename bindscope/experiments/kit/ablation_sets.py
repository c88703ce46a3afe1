"""Head sets: which heads a condition ablates or patches, and C5's random sets."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from bindscope.errors import InputError
from bindscope.metrics import taxonomy
from bindscope.protocols import LanguageModel
from bindscope.results.labels import model_label


def as_pairs(heads: Iterable[Sequence[int]]) -> tuple[tuple[int, int], ...]:
    """Head lists as read from JSON, as the ``(layer, head)`` tuples a spec takes."""
    return tuple((int(layer), int(head)) for layer, head in heads)


def conditions_of(model: LanguageModel, unit: str) -> dict[str, list[list[int]]]:
    """Condition name -> heads: ``L3.H5`` per head, or ``L3`` per layer."""
    if unit == "head":
        layers, heads = range(model.n_layers), range(model.n_heads)
        return {f"L{layer}.H{h}": [[layer, h]] for layer in layers for h in heads}
    if unit == "layer":
        return {
            f"L{layer}": [[layer, h] for h in range(model.n_heads)]
            for layer in range(model.n_layers)
        }
    raise InputError(f"unit must be 'head' or 'layer', not {unit!r}")


def _pool(n_layers: int, n_heads: int, top: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    excluded = {(int(layer), int(head)) for layer, head in top}
    return [(l, h) for l in range(n_layers) for h in range(n_heads) if (l, h) not in excluded]  # noqa: E741


def random_set_support(
    n_layers: int, n_heads: int, top: list[list[int]], *, k: int, matched_layers: bool = False
) -> int:
    """How many distinct sets ``draw_random_sets`` can draw."""
    pool = _pool(n_layers, n_heads, top)
    if not matched_layers:
        return math.comb(len(pool), k)
    wanted = Counter(int(layer) for layer, _ in top)
    return math.prod(math.comb(sum(p[0] == layer for p in pool), n) for layer, n in wanted.items())


def draw_random_sets(
    n_layers: int,
    n_heads: int,
    top: list[list[int]],
    *,
    k: int,
    n: int,
    seed: int,
    matched_layers: bool = False,
) -> list[list[list[int]]]:
    """N distinct random k-head sets from the heads outside ``top``, reproducible from ``seed``."""
    rng = np.random.default_rng(seed)
    pool = _pool(n_layers, n_heads, top)
    if len(pool) < k:
        raise InputError(
            f"only {len(pool)} heads outside the top set; cannot draw random sets of {k} "
            "(pass a smaller --k)"
        )
    if matched_layers:
        candidates = [[p for p in pool if p[0] == layer] for layer, _head in top]
        for (layer, _head), options in zip(top, candidates):
            if len(options) < (need := sum(h[0] == layer for h in top)):
                raise InputError(
                    f"--matched-layers: layer {layer} has {n_heads} heads, too few to match the "
                    f"top set's {need} heads there with as many heads outside it; pass a "
                    "smaller --k or drop --matched-layers"
                )
        support = random_set_support(n_layers, n_heads, top, k=k, matched_layers=True)
        return _draw_from_candidates(candidates, n, seed, enumerate_all=support <= n)

    def one() -> list[list[int]]:
        picks = rng.choice(len(pool), size=k, replace=False)
        return sorted([list(pool[i]) for i in picks])

    if math.comb(len(pool), k) <= n:
        every = [sorted(map(list, c)) for c in itertools.combinations(pool, k)]
        return [every[i] for i in rng.permutation(len(every))]
    return _distinct(one, n)


def _distinct(draw: Callable[[], list[list[int]]], n: int) -> list[list[list[int]]]:
    sets: list[list[list[int]]] = []
    seen: set[tuple] = set()
    while len(sets) < n:
        chosen = draw()
        key = tuple(map(tuple, chosen))
        if key not in seen:
            seen.add(key)
            sets.append(chosen)
    return sets


def class_counts(means: dict, top: list[list[int]], closeness: list[dict]) -> dict:
    """The class-matched null's note: top heads' classes, and class sizes in and outside."""
    primary = taxonomy.classify(means)["primary"]
    inside = {(l, h) for l, h in top}  # noqa: E741
    for entry in closeness:
        entry["class"] = primary[entry["head"][0]][entry["head"][1]]
    classes = {}
    for cls in sorted({e["class"] for e in closeness}):
        members = [(l, h) for l, row in enumerate(primary) for h, c in enumerate(row) if c == cls]  # noqa: E741
        in_top = sum(m in inside for m in members)
        classes[cls] = {"in_top": in_top, "outside": len(members) - in_top}
    return {"heads": closeness, "classes": classes}


#: The taxonomy scores a class-matched null matches heads on (binding left out).
MATCH_SCORES = ("sink", "previous_token", "induction", "duplicate_token")


def draw_score_matched_sets(
    scores: Mapping[str, np.ndarray],
    top: Sequence[Sequence[int]],
    *,
    n: int,
    seed: int,
    neighbours: int,
) -> tuple[list[list[list[int]]], list[dict]]:
    """``n`` head sets matched to ``top`` on graded taxonomy scores, and how close they are."""
    grid = np.stack([np.asarray(scores[name], dtype=float) for name in MATCH_SCORES], -1)
    pool = _pool(grid.shape[0], grid.shape[1], top)
    if len(pool) < neighbours or neighbours < len(top):
        raise InputError(
            f"a score-matched null needs {max(neighbours, len(top))} heads outside the top set "
            f"of {len(top)}, and {len(pool)} lie there; pass a smaller --k"
        )
    points = np.array([grid[l, h] for l, h in pool])  # noqa: E741
    candidates, closeness = [], []
    for layer, head in top:
        distance = np.linalg.norm(points - grid[layer, head], axis=1)
        order = np.argsort(distance, kind="stable")[:neighbours]
        candidates.append([pool[i] for i in order])
        closeness.append(
            {
                "head": [int(layer), int(head)],
                "scores": dict(zip(MATCH_SCORES, map(float, grid[layer, head]))),
                "distance": float(distance[order].mean()),
                "typical": float(np.median(distance)),
            }
        )
    return _draw_from_candidates(candidates, n, seed), closeness


#: Past this many distinct partial sets the class-matched support is not enumerated.
ENUMERATION_CAP = 20_000


def _candidate_sets(
    candidates: Sequence[Sequence[tuple[int, int]]],
) -> list[list[list[int]]] | None:
    partial: set[tuple] = {()}
    for options in candidates:
        partial = {
            tuple(sorted((*chosen, tuple(p)))) for chosen in partial for p in options
            if tuple(p) not in chosen
        }  # fmt: skip
        if len(partial) > ENUMERATION_CAP:
            return None
    return [[list(h) for h in chosen] for chosen in sorted(partial)]


def _draw_from_candidates(
    candidates: list[list[tuple[int, int]]], n: int, seed: int, *, enumerate_all: bool = True
) -> list[list[list[int]]]:
    rng = np.random.default_rng(seed)
    every = _candidate_sets(candidates) if enumerate_all else None
    if every is not None and len(every) <= n:
        return [every[i] for i in rng.permutation(len(every))]

    def one() -> list[list[int]]:
        chosen: list[list[int]] = []
        for options in candidates:
            left = [list(p) for p in options if list(p) not in chosen]
            chosen.append(left[rng.integers(len(left))])
        return sorted(chosen)

    return _distinct(one, n)


def check_k(model: LanguageModel, *, k: int, matched_classes: bool = False) -> None:
    """Refuse a head-set size the model cannot supply, before any work."""
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


__all__ = [
    "MATCH_SCORES",
    "as_pairs",
    "check_k",
    "class_counts",
    "conditions_of",
    "draw_random_sets",
    "draw_score_matched_sets",
    "random_set_support",
]

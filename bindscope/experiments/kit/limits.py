"""What a summary cannot say: each experiment's summary lists its own limits."""

from __future__ import annotations

import math

#: The test level the p-value resolution is compared with.
ALPHA = 0.05
#: A 0-1 baseline below FLOOR or above CEILING leaves little room to move.
FLOOR, CEILING = 0.1, 0.9
#: Fewest items a paired or two-sample test runs on.
MIN_GROUP = 2


def _limit(kind: str, model: str, message: str, **numbers: object) -> dict:
    return {"kind": kind, "model": model, **numbers, "message": message}


def p_resolution(model: str, n_random: int, task: str | None = None) -> dict | None:
    """The smallest rank p-value ``n_random`` random sets allow, when above ``ALPHA``."""
    bound = 1.0 / (n_random + 1)
    if bound <= ALPHA:
        return None
    where = f" ({task})" if task else ""
    message = (
        f"{model}{where}: with {n_random} random sets the rank p-value cannot go "
        f"below 1/{n_random + 1} = {bound:.3g}, above the test level {ALPHA}; the test cannot "
        f"reject (use {math.ceil(2 / ALPHA) - 1} or more random sets: p down to {ALPHA / 2:g})"
    )
    return _limit("p_resolution", model, message, task=task, n_random=n_random, min_p=bound)


def sign_flip_floor(n_pairs: int, n_resamples: int) -> float:
    """The smallest two-sided sign-flip permutation p over ``n_pairs`` pairs."""
    return min(1.0, 2.0 / min(2.0**n_pairs, n_resamples + 1.0))


def resamples_for_one(n_tests: int) -> int:
    """Resamples at which one unit alone can pass a correction over ``n_tests`` units."""
    return math.ceil(2 * n_tests / ALPHA)


def corrected_resolution(
    model: str,
    where: str,
    *,
    n_pairs: int,
    n_resamples: int,
    n_tests: int,
    correction: str,
    items: str = "prompts",
) -> dict | None:
    """Whether one unit (head, layer) alone can pass the correction over ``n_tests`` units."""
    floor = sign_flip_floor(n_pairs, n_resamples)
    if n_pairs < MIN_GROUP or floor * n_tests <= ALPHA:
        return None
    alone = min(1.0, floor * n_tests)
    pairs = next(n for n in range(MIN_GROUP, 64) if 2.0 / 2.0**n * n_tests <= ALPHA)
    resamples = resamples_for_one(n_tests)
    if floor > ALPHA:
        said = f"cannot go below {floor:.3g}, above the test level {ALPHA}: nothing can reject"
    else:
        said = (
            f"cannot go below {floor:.3g}; corrected ({correction}) over {n_tests} units, one "
            f"that stands out alone gets at best {alone:.3g}, above {ALPHA} (BH can still "
            "reject where many units share an effect)"
        )
    message = (
        f"{model}: {where}: with {n_pairs} {items} and {n_resamples} resamples a permutation "
        f"p {said}; a single unit needs {pairs}+ {items} and {resamples}+ resamples "
        "(--n-resamples)"
    )
    numbers = {"n_pairs": n_pairs, "n_resamples": n_resamples, "n_tests": n_tests}
    return _limit("p_resolution", model, message, where=where, **numbers, min_p=floor,
                  min_p_alone=alone)  # fmt: skip


def binomial_resolution(model: str, where: str, n: int) -> dict | None:
    """A one-sided binomial test (p = 1/2) over ``n`` items that cannot reach ``ALPHA``."""
    bound = 0.5**n
    if n < 1 or bound <= ALPHA:
        return None
    message = (
        f"{model}: {where}: with {n} terms the one-sided binomial p cannot go "
        f"below 1/2^{n} = {bound:.3g}, above the test level {ALPHA}; the test cannot reject "
        f"({math.ceil(math.log2(1 / ALPHA))} or more terms needed)"
    )
    return _limit("p_resolution", model, message, where=where, n=n, min_p=bound)


_ROOM = {
    "floor": "little room below it: a drop (an ablation's effect) can hardly show",
    "ceiling": "little room above it: a gain can hardly show, and a saturated score can hide a "
    "weakened answer",
}


def floor_ceiling(
    model: str, name: str, baseline: float | None, *, chance: float | None = None
) -> dict | None:
    """A 0-1 ``baseline`` at the floor or the ceiling, else None."""
    if baseline is None:
        return None
    level = chance or 0.0
    above = (baseline - level) / (1 - level) if level < 1 else 0.0
    kind = "floor" if above < FLOOR else "ceiling" if baseline > CEILING else None
    if kind is None:
        return None
    room = _ROOM[kind]
    bounds = f"< {FLOOR} or > {CEILING} on a 0-1 score"
    if level:
        bounds = (
            f"chance {level:.3f}; the floor is under {FLOOR:g} of the room above chance, "
            f"< {level + FLOOR * (1 - level):.3f}; the ceiling > {CEILING}"
        )
    message = f"{model}: {name} baseline {baseline:.3f} is at the {kind} ({bounds}): {room}"
    given = {} if chance is None else {"chance": chance}
    return _limit(kind, model, message, score=name, baseline=baseline, **given)


#: What a skip reason means and how to keep such prompts, in ``excluded``'s message.
EXPLAINED = {
    "at_position_0": "the term starts on the attention sink, pass --prepend-bos to keep them",
    "too_long": "the prompt exceeds the model's context window (its term was found); shorten "
    "the template (`bindscope audit` flags them)",
}


def excluded(
    model: str, reasons: dict[str, int], where: str, *, keys: list[str] | None = None
) -> dict | None:
    """Prompts left out of ``where`` and why (``reasons``: reason -> count)."""
    total = sum(reasons.values())
    if not total:
        return None
    said = ", ".join(f"{n} {reason}" for reason, n in sorted(reasons.items()))
    said += "".join(
        f"; {reason}: {why}" for reason, why in EXPLAINED.items() if reasons.get(reason)
    )
    message = f"{model}: {total} prompts left out of {where} ({said})"
    listed = {"keys": list(keys)} if keys else {}
    if keys:
        more = f" and {len(keys) - 3} more" if len(keys) > 3 else ""
        message += f"; records {', '.join(keys[:3])}{more}"
    return _limit("excluded", model, message, where=where, n=total, reasons=dict(reasons), **listed)


def small_group(model: str, group: str, n: int, test: str) -> dict | None:
    """A group with fewer than ``MIN_GROUP`` items, too small for ``test``."""
    if n >= MIN_GROUP:
        return None
    message = (
        f"{model}: {group} has {n} item(s), fewer than the {MIN_GROUP} {test} needs; "
        "no test was run"
    )
    return _limit("small_group", model, message, group=group, n=n)


def not_run(model: str, test: str, reason: str, n: int) -> dict:
    """A test the summary skipped for too few items (``reason`` says how many it needs)."""
    return _limit("small_group", model, f"{model}: {test} not run: {reason}", group=test, n=n)


def limit_lines(summary: dict) -> list[str]:
    """The summary's own limits, one terminal line each."""
    return [f"  limit ({f['kind']}): {f['message']}" for f in summary.get("limits") or []]


def collect(*found: dict | None) -> list[dict]:
    """The limits found, Nones dropped."""
    return [f for f in found if f is not None]


__all__ = [
    "ALPHA",
    "CEILING",
    "FEW_ITEMS",
    "FLOOR",
    "MARGIN_THRESHOLD",
    "MESSAGES",
    "binomial_resolution",
    "collect",
    "corrected_resolution",
    "excluded",
    "floor_ceiling",
    "limit_lines",
    "not_run",
    "note",
    "p_resolution",
    "resamples_for_one",
    "sign_flip_floor",
    "small_group",
    "term_clustering",
]


#: A choice margin (nats per choice token) under this decides an item by a tiny margin.
MARGIN_THRESHOLD = 0.1

#: Under this many terms a bootstrap over terms resamples too few units to be trusted itself.
FEW_TERMS = 10
#: Fewest items at which a percentile bootstrap CI covers the mean 90% of the time (normal
#: items: P(|t_{n-1}| < 1.96 sqrt((n-1)/n)) is 0.898 at 9, 0.904 at 10).
FEW_ITEMS = 10


def term_clustering(
    model: str, score: str, n_terms: int, n_items: int, by_terms: dict, by_items: dict
) -> dict:
    """Items that share terms: the top drop's CI over terms beside the one over prompts."""
    wide = by_terms["high"] - by_terms["low"]
    narrow = by_items["high"] - by_items["low"]
    effect = (wide / narrow) ** 2 if narrow > 0 else None
    said = f"{effect:.2f}" if effect is not None else "undefined (a degenerate CI over prompts)"
    terms, items = [by_terms["low"], by_terms["high"]], [by_items["low"], by_items["high"]]
    message = (
        f"{model}: {score}: {n_items} items come from {n_terms} terms; the top drop's 95% CI "
        f"resampling terms is [{terms[0]:.3f}, {terms[1]:.3f}] against [{items[0]:.3f}, "
        f"{items[1]:.3f}] resampling prompts (design effect {said}); read the wider one when "
        "generalising over terms"
    )
    if n_terms < FEW_TERMS:
        message += (
            f"; with {n_terms} terms the interval over terms rests on too few units to be "
            "trusted either: add terms, not items per term"
        )
    return _limit("clustered", model, message, score=score, n_terms=n_terms, n_items=n_items,
                  ci_terms=terms, ci_items=items, design_effect=effect)  # fmt: skip


#: The messages of limits a summary notes with ``note``, formatted with the model, the
#: limit's numbers and its words; a key ``kind:variant`` is a second message of one kind.
MESSAGES = {
    "few_items": "{model}: {score}: the drops' and specificity's 95% CIs rest on {n} item(s), "
    "fewer than the {minimum} a bootstrap interval needs to cover 90% of the time "
    "(docs/records.md); read them as descriptive and add items",
    "tiny_margins": "{model}: {n_small} of {n_items} recognition items have a baseline choice "
    "margin under {threshold} nats (log-prob per choice token), and {n_flip} of them flip under "
    "the top set: accuracy moves by whole items on tiny changes; the margin score (its own "
    "drop, CI and p) is the continuous reading",
    "layers": "{model}: the top set's {n_heads} heads lie in {n_in} layer(s) ({listed}) of "
    "{of}, while the random sets come from every layer: a drop may be the layers' rather than "
    "the heads'; pass --matched-layers for a layer-matched null",
    "undecided": "{model}: {score}: the {null} null stopped after {n_drawn} sets, before its "
    "sequential rule decided; rerun the same command to continue it",
    "null_not_drawn": "{model}: no {null}-matched null could be drawn for this top set: {why}",
    "small_support": "{model}: the {null} null has only {support} distinct set(s) for this top "
    "set ({n_random} asked for): each is used once, and its p cannot go below 1/{sets} = "
    "{min_p:.3g}, {said} the test level {ALPHA} before any correction",
    "random_gain": "{model}: {score}: the {null} null's sets raise the score on average (mean "
    "drop {random_mean:.3f}), so specificity (top drop minus that mean) exceeds the top set's "
    "own drop ({top_drop:.3f}) by {gain:.3f}: that part is the random sets' gain, not the top "
    "set's harm",
    "p_resolution:holm": "with at most {n_random} random sets a p cannot go below 1/{sets}, and "
    "Holm across {n_tests} models multiplies the smallest by {n_tests}: {min_p:.3g}, above "
    "{ALPHA}, so no model can pass; use --n-random {needed} or more",
}


def note(kind: str, model: str, *, words: dict | None = None, **numbers: object) -> dict:
    """A limit of ``kind`` (a ``MESSAGES`` key): its ``numbers``, then its message."""
    said = MESSAGES[kind].format(model=model, ALPHA=ALPHA, **numbers, **(words or {}))
    return _limit(kind.partition(":")[0], model, said, **numbers)

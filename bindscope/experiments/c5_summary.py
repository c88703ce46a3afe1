"""C5's summary: condition means, drops with CIs, each null's p (Holm), power, limits.

The limits are those a reviewer raises first: items clustered in terms, 0/1 scores on tiny
margins, a top set's layers against unmatched random sets.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from bindscope.experiments.kit import limits
from bindscope.experiments.kit.summary import skipped_reasons
from bindscope.metrics import stats
from bindscope.metrics.ranking import mean_bsi
from bindscope.results.labels import by_model

EXPERIMENT = "c5"
#: The records of the heads' ranking (mean BSI over the ranking set).
RANKING = "c5-ranking"
#: The scores tested: recognition accuracy, its choice log-prob margin, generation's rubric.
SCORES = ("recognition", "margin", "generation")
#: The nulls, by condition prefix: random sets from all heads outside the top set, from the
#: top set's layers, and matched on the heads' taxonomy scores.
NULLS = ("random", "layers", "classes")
#: Power is stated for this one-sided level (divided by the number of models, Holm's
#: strictest step) and this power.
POWER = 0.8


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


def chance_levels(group: list[dict]) -> dict[str, float]:
    """Each score's chance level: recognition's 1/choices averaged over its baseline items.

    Generation's rubric score and the choice margin have none.
    """
    choices = [
        len(r["metrics"]["choice_scores"])
        for r in group
        if r["task"] == "recognition" and r["condition"] == "baseline"
        and r["metrics"].get("choice_scores")
    ]  # fmt: skip
    return {"recognition": float(np.mean([1 / n for n in choices]))} if choices else {}


def score_table(group: list[dict]) -> dict[str, dict[str, dict[str, float]]]:
    """Score -> condition -> prompt key -> value, from one model's C5 records."""
    table: dict[str, dict[str, dict[str, float]]] = {}
    for r in group:
        metrics = r["metrics"]
        table.setdefault(r["task"], {}).setdefault(r["condition"], {})[r["prompt_key"]] = metrics[
            "score"
        ]
        if r["task"] == "recognition" and metrics.get("margin") is not None:
            by_prompt = table.setdefault("margin", {}).setdefault(r["condition"], {})
            by_prompt[r["prompt_key"]] = metrics["margin"]
    return table


def _complete(by_condition: dict[str, dict[str, float]]) -> list[str]:
    prompts = sorted(by_condition.get("baseline", {}))
    return [p for p in prompts if all(p in v for v in by_condition.values())]


def undecided_nulls(group: list[dict], settings: dict) -> set[str]:
    """The nulls whose sequential p is not decided yet on some score (empty when fixed)."""
    open_nulls: set[str] = set()
    for by_condition in score_table(group).values():
        complete = _complete(by_condition)
        if len(complete) < limits.MIN_GROUP or "top" not in by_condition:
            continue
        base = np.array([by_condition["baseline"][p] for p in complete])
        top_drop = float(np.mean(base - [by_condition["top"][p] for p in complete]))
        for null in NULLS:
            names = null_names(by_condition, null)
            drops = [float(np.mean(base - [by_condition[n][p] for p in complete])) for n in names]
            support = (null_supports(group).get(null) or {}).get("support")
            if names and null_test(top_drop, drops, settings, support) is None:
                open_nulls.add(null)
    return open_nulls


def summarize_c5(records: list[dict], *, n_resamples: int = 9999) -> dict:
    """Condition means, paired drops with CIs, specificity and each null's p per model."""
    evaluated = [r for r in records if r["experiment"] == EXPERIMENT]
    if not evaluated:
        return {"experiment": EXPERIMENT, "models": {}}
    settings = evaluated[0]["c5"]
    models: dict[str, dict] = {}
    for label, group in by_model(evaluated).items():
        models[label] = _summarize_model(group, records, settings, n_resamples, label)
    _across_models(models)
    noted: list[dict] = limits.collect(limits.holm_resolution(settings["n_random"], len(models)))
    for entry in models.values():
        noted += entry.pop("_limits")
    return {
        "experiment": EXPERIMENT,
        "limits": noted,
        "k": settings["k"],
        "ablation": settings["ablation"],
        "n_random": settings["n_random"],
        "sampling": settings.get("sampling", "fixed"),
        "stop_at": settings.get("stop_at"),
        "seed": settings["seed"],
        "matched_layers": settings["matched_layers"],
        "nulls": settings.get("nulls", ["random"]),
        "ranking_set": settings["ranking_set"],
        "ranking_sha256": settings.get("ranking_sha256"),
        "prompt_set": evaluated[0]["provenance"].get("prompt_set"),
        "prompt_sha256": evaluated[0]["provenance"].get("prompt_sha256"),
        "design": settings.get("design"),
        "multiple_comparisons": "holm across models, per score and null, on each null's "
        "p_used: its GPD tail p where one was fitted (holm_on 'tail'), else its exact p",
        "power": f"detectable drop at one-sided alpha {limits.ALPHA}/models, power {POWER}",
        "models": models,
    }


def _across_models(models: dict[str, dict]) -> None:
    """Holm across models per score and null; the detectable drop at Holm's strictest level."""
    alpha = limits.ALPHA / max(1, len(models))
    for score in SCORES:
        for null in NULLS:
            tests = {
                m: e["nulls"][null][score]
                for m, e in models.items()
                if (e["nulls"].get(null) or {}).get(score, {}).get("p") is not None
            }
            used = [t["p_used"] for t in tests.values()]
            adjusted = stats.adjust_pvalues(used) if tests else []
            for m, p in zip(tests, adjusted):
                tests[m]["p_holm"] = p
                if null == "random":
                    models[m].setdefault("p_holm", {})[score] = p
        for entry in models.values():
            drops = entry["random_drops"].get(score)
            items = entry["_item_drops"].get(score)
            if drops and len(drops) >= 2 and items is not None:
                entry["detectable_drop"][score] = stats.detectable_drop(
                    drops, items, alpha=alpha, power=POWER
                )
    for entry in models.values():
        del entry["_item_drops"]  # the per-item drops stay in the records


def _ranking(
    all_records: list[dict], first: dict, label: str
) -> tuple[list[dict], dict[str, int], dict | None]:
    ranked = [
        r
        for r in all_records
        if r["experiment"] == RANKING
        and r["model"] == first["model"]
        and r["revision"] == first["revision"]
    ]
    ok = [r for r in ranked if r["metrics"].get("eb_star") is not None]
    reasons = skipped_reasons(ranked)
    return ok, reasons, limits.excluded(label, reasons, "the head ranking (mean BSI)")


def _summarize_model(
    group: list[dict], all_records: list[dict], settings: dict, n_resamples: int, label: str
) -> dict:
    """One model's summary entry: its heads and nulls, then every score's tests and limits."""
    ranking, ranking_skipped, excluded = _ranking(all_records, group[0], label)
    entry = _entry(group, ranking, ranking_skipped)
    found: list[dict | None] = [excluded]
    for null, why in next(
        (r["nulls_not_drawn"] for r in group if r.get("nulls_not_drawn")), {}
    ).items():
        found.append(limits.null_not_drawn(label, null, why))
    terms = {r["prompt_key"]: r["term"] for r in group}
    table = score_table(group)
    for score, by_condition in table.items():
        found += _summarize_score(entry, score, by_condition, terms, settings, n_resamples, label)
    if "layers" not in settings.get("nulls", ["random"]) and entry["top_heads"]:
        found.append(limits.layer_concentration(label, entry["top_heads"], entry["n_layers"]))
    if "margin" in table and "top" in table["margin"]:
        found.append(_tiny_margins(entry, table["margin"], table["recognition"], label))
    found += [
        limits.small_support(label, null, support["support"], settings["n_random"])
        for null, support in entry["null_support"].items()
        if enumerated(support, settings["n_random"])
    ]
    entry["_limits"] = limits.collect(*found)
    return entry


#: An entry's fields that `_summarize_score` fills, one key per score.
_PER_SCORE = (
    "conditions", "drops", "random_drops", "specificity", "p_value", "nulls", "paired_sd",
    "n_items", "_item_drops", "detectable_drop", "per_term",
)  # fmt: skip


def _entry(group: list[dict], ranking: list[dict], ranking_skipped: dict) -> dict:
    """A model's entry before its scores: heads per condition, nulls, ranking, chance."""
    first = group[0]
    heads = {r["condition"]: r["heads"] for r in group}
    entry: dict = {
        "model": first["model"],
        "revision": first["revision"],
        "n_layers": first["provenance"].get("n_layers"),
        "top_heads": heads.get("top"),
        "bottom_heads": heads.get("bottom"),
        "random_heads": [heads[c] for c in null_names(heads, "random")],
        "null_heads": {
            null: [heads[c] for c in null_names(heads, null)]
            for null in NULLS
            if null_names(heads, null)
        },
        "class_match": next((r["null_match"] for r in group if r.get("null_match")), None),
        "null_support": null_supports(group),
        "chance": chance_levels(group),
        **{field: {} for field in _PER_SCORE},
        "n_ranking": len(ranking),
        "ranking_skipped_reasons": ranking_skipped,
    }
    if ranking:
        entry["mean_bsi"] = mean_bsi(ranking).tolist()
        entry["n_layers"], entry["n_heads"] = (len(entry["mean_bsi"]), len(entry["mean_bsi"][0]))
    return entry


def _tiny_margins(entry: dict, margin: dict, correct: dict, label: str) -> dict | None:
    """Items whose baseline choice margin is under ``MARGIN_THRESHOLD`` and that flip at top."""
    small = [p for p, m in margin["baseline"].items() if abs(m) < limits.MARGIN_THRESHOLD]
    flips = [p for p in small if correct["top"].get(p) != correct["baseline"].get(p)]
    entry["tiny_margins"] = {
        "threshold": limits.MARGIN_THRESHOLD, "n_items": len(margin["baseline"]),
        "n_small": len(small), "n_flip": len(flips),
    }  # fmt: skip
    return limits.tiny_margins(label, **entry["tiny_margins"])


def _summarize_score(
    entry: dict,
    score: str,
    by_condition: dict[str, dict[str, float]],
    terms: dict[str, str],
    settings: dict,
    n_resamples: int,
    label: str,
) -> list[dict | None]:
    """One score's means, drops, nulls and limits, written into ``entry``."""
    seed = settings["seed"]
    complete = _complete(by_condition)
    base = np.array([by_condition["baseline"][p] for p in complete])
    for name, scores in by_condition.items():
        means = entry["conditions"].setdefault(name, {})
        means[score] = float(np.mean([scores[p] for p in complete]))
        means[f"n_{score}"] = len(complete)
    found: list[dict | None] = []
    if complete and score != "margin":
        chance = entry["chance"].get(score)
        found.append(
            limits.floor_ceiling(label, f"{score} score", float(base.mean()), chance=chance)
        )
    if len(complete) < limits.MIN_GROUP:
        return [*found, limits.small_group(label, f"{score} items", len(complete), "the test")]
    found.append(limits.few_items(label, score, len(complete)))  # CIs too few to cover
    cond = {n: np.array([by_condition[n][p] for p in complete]) for n in by_condition}
    for name in ("top", "bottom"):
        if name in cond:
            entry["drops"].setdefault(name, {})[score] = stats.paired_difference(
                base, cond[name], seed=seed, n_resamples=n_resamples
            ).to_dict()
    if "top" not in cond:
        return found
    diffs = base - cond["top"]
    top_drop = float(np.mean(diffs))
    entry["_item_drops"][score] = diffs
    entry["paired_sd"][score] = float(np.std(diffs, ddof=1))
    entry["n_items"][score] = len(complete)
    found.append(_term_clustering(entry, score, diffs, [terms[p] for p in complete], seed, label))
    found += _nulls(entry, score, base, cond, top_drop, settings, n_resamples, label)
    if score == "recognition":
        used = (entry["nulls"].get("random") or {}).get(score, {}).get("n_drawn")
        names = null_names(cond, "random")[:used]  # the sets the p used, as for the means
        entry["per_term"].update(_per_term(complete, terms, cond, names))
    return found


def _nulls(
    entry: dict,
    score: str,
    base: np.ndarray,
    cond: dict[str, np.ndarray],
    top_drop: float,
    settings: dict,
    n_resamples: int,
    label: str,
) -> list[dict | None]:
    """The top set's drop against each null's drawn sets, written into ``entry``; limits."""
    seed = settings["seed"]
    found: list[dict | None] = []
    for null in NULLS:
        names = null_names(cond, null)
        if not names:
            continue
        rand = np.stack([cond[n] for n in names])
        drops = [float(np.mean(base - x)) for x in rand]
        test = _null_p(top_drop, drops, settings, entry["null_support"].get(null) or {})
        if test["stopped"] == "incomplete":
            found.append(limits.undecided(label, score, null, len(drops)))
        # p, the mean drop and specificity all read the sets p used (a sequential null's
        # sets past its decision are evaluated, counted in n_evaluated, and left out)
        used = test["n_drawn"]
        rand, drops = rand[:used], drops[:used]
        spec = stats.specificity(base, cond["top"], rand, seed=seed, n_resamples=n_resamples)
        test.update(random_mean=float(np.mean(drops)), n_evaluated=len(names))
        test["specificity"] = spec.to_dict()
        if test["random_mean"] < 0:
            found.append(limits.random_gain(label, score, null, test["random_mean"], top_drop))
        entry["nulls"].setdefault(null, {})[score] = test
        if null == "random":
            entry["random_drops"][score] = drops
            entry["drops"].setdefault("random_mean", {})[score] = float(np.mean(drops))
            entry["specificity"][score] = test["specificity"]
            entry["p_value"][score] = test["p"]
            found.append(limits.p_resolution(label, test["most"], score))
    return found


def _null_p(top_drop: float, drops: list[float], settings: dict, support: dict) -> dict:
    """One null's exact p and tail p, its support and the floor that sets on p.

    ``most``: the sets p could use (``n_random``, or the support where smaller), so p's
    floor is ``1 / (most + 1)``.
    """
    n_random = settings["n_random"]
    count = support.get("support")
    test = null_test(top_drop, drops, settings, count)
    if test is None:
        test = {"p": None, "n_drawn": len(drops), "stopped": "incomplete"}
    else:
        whole = enumerated(support, n_random)
        test.update(tail_test(top_drop, drops, test, settings["seed"], enumerated=whole))
    most = n_random if count is None else min(n_random, count)
    return {**test, "support": count, "most": most, "p_floor": 1 / (most + 1)}


def _term_clustering(
    entry: dict, score: str, diffs: np.ndarray, clusters: list[str], seed: int, label: str
) -> dict | None:
    """The top drop's CI when terms, not prompts, are resampled (items share a term)."""
    names = sorted(set(clusters))
    if len(names) == len(diffs) or len(names) < limits.MIN_GROUP:
        return None
    sums = np.array([diffs[[c == t for c in clusters]].sum() for t in names])
    counts = np.array([float(clusters.count(t)) for t in names])

    def ratio(s: np.ndarray, c: np.ndarray, axis: int = -1) -> np.ndarray:
        return s.sum(axis=axis) / c.sum(axis=axis)  # the item mean of the resampled terms

    by_terms = stats.bootstrap_statistic((sums, counts), ratio, paired=True, seed=seed).to_dict()
    entry["drops"].setdefault("top_by_terms", {})[score] = by_terms
    by_items = entry["drops"]["top"][score]
    return limits.term_clustering(label, score, len(names), len(diffs), by_terms, by_items)


def _per_term(
    complete: list[str], terms: dict[str, str], cond: dict[str, np.ndarray], names: list[str]
) -> dict[str, dict[str, float]]:
    """Recognition means per term and condition (descriptive: few prompts a term)."""
    out = {}
    rand = [cond[n] for n in names]
    for term in sorted({terms[p] for p in complete}):
        idx = [i for i, p in enumerate(complete) if terms[p] == term]
        row: dict[str, float] = {
            n: float(np.mean(cond[n][idx])) for n in ("baseline", "top", "bottom") if n in cond
        }
        if rand:
            row["random_mean"] = float(np.mean([x[idx].mean() for x in rand]))
            if "top" in row:
                row["specificity"] = row["random_mean"] - row["top"]
        out[term] = row
    return out

"""C5's summary: condition means, drops with CIs, each null's p (Holm), power, limits, text."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from bindscope.experiments.kit import limits
from bindscope.experiments.kit.null_tests import (
    enumerated,
    null_names,
    null_p,
    null_supports,
    null_test,
)
from bindscope.experiments.kit.summary import per_model_text, skipped_reasons
from bindscope.metrics import stats
from bindscope.metrics.ranking import mean_bsi
from bindscope.results.format import estimate, num, pvalue
from bindscope.results.labels import by_model

EXPERIMENT = "c5"
#: The records of the heads' ranking (mean BSI over the ranking set).
RANKING = "c5-ranking"
#: The scores tested: recognition accuracy, its choice log-prob margin, generation's rubric.
SCORES = ("recognition", "margin", "generation")
#: The nulls, by condition prefix: any heads outside the top set, its layers, its classes.
NULLS = ("random", "layers", "classes")
#: The power of the detectable drop (at one-sided ALPHA / models, Holm's strictest step).
POWER = 0.8


def nulls_of(settings: dict) -> list[str]:
    """The nulls a run's settings drew (stored only when there are several)."""
    return settings.get("nulls", ["random"])


def _chance_levels(group: list[dict]) -> dict[str, float]:
    choices = [
        len(r["metrics"]["choice_scores"])
        for r in group
        if r["task"] == "recognition" and r["condition"] == "baseline"
        and r["metrics"].get("choice_scores")
    ]  # fmt: skip
    return {"recognition": float(np.mean([1 / n for n in choices]))} if choices else {}


def _score_table(group: list[dict]) -> dict[str, dict[str, dict[str, float]]]:
    table: dict[str, dict[str, dict[str, float]]] = {}
    for r in group:
        metrics, key = r["metrics"], r["prompt_key"]
        table.setdefault(r["task"], {}).setdefault(r["condition"], {})[key] = metrics["score"]
        if r["task"] == "recognition" and metrics.get("margin") is not None:
            table.setdefault("margin", {}).setdefault(r["condition"], {})[key] = metrics["margin"]
    return table


def _arrays(by_condition: dict[str, dict[str, float]]) -> tuple[list[str], dict[str, np.ndarray]]:
    prompts = sorted(by_condition.get("baseline", {}))
    complete = [p for p in prompts if all(p in v for v in by_condition.values())]
    return complete, {n: np.array([v[p] for p in complete]) for n, v in by_condition.items()}


def _drops(cond: dict[str, np.ndarray], names: list[str]) -> list[float]:
    return [float(np.mean(cond["baseline"] - cond[n])) for n in names]


def undecided_nulls(group: list[dict], settings: dict) -> set[str]:
    """The nulls whose sequential p is not decided yet on some score (empty when fixed)."""
    open_nulls: set[str] = set()
    for by_condition in _score_table(group).values():
        complete, cond = _arrays(by_condition)
        if len(complete) < limits.MIN_GROUP or "top" not in cond:
            continue
        top_drop = float(np.mean(cond["baseline"] - cond["top"]))
        for null in NULLS:
            drops = _drops(cond, null_names(cond, null))
            support = (null_supports(group).get(null) or {}).get("support")
            if drops and null_test(top_drop, drops, settings, support) is None:
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
    noted = _holm_resolution(settings["n_random"], len(models))
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
        "nulls": nulls_of(settings),
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


def _holm_resolution(n_random: int, n_models: int) -> list[dict]:
    best = n_models / (n_random + 1)  # Holm's smallest p: the rank p floor times the models
    if n_models < 2 or best <= limits.ALPHA:
        return []
    needed = math.ceil(n_models / limits.ALPHA) - 1
    words = {"sets": n_random + 1, "needed": needed}
    numbers = {"n_random": n_random, "n_tests": n_models, "min_p": best}
    return [limits.note("p_resolution:holm", "all models", words=words, **numbers)]


def _across_models(models: dict[str, dict]) -> None:
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
        item_drops = entry.pop("_item_drops")  # the per-item drops stay in the records
        for score in SCORES:
            drops = entry["random_drops"].get(score)
            if drops and len(drops) >= 2 and score in item_drops:
                entry["detectable_drop"][score] = stats.detectable_drop(
                    drops, item_drops[score], alpha=alpha, power=POWER
                )


#: An entry's fields that `_ModelSummary.score` fills, one key per score.
_PER_SCORE = (
    "conditions", "drops", "random_drops", "specificity", "p_value", "nulls", "paired_sd",
    "n_items", "_item_drops", "detectable_drop", "per_term",
)  # fmt: skip


def _summarize_model(
    group: list[dict], all_records: list[dict], settings: dict, n_resamples: int, label: str
) -> dict:
    ranked = by_model(all_records, RANKING).get(label, [])
    skipped = skipped_reasons(ranked)
    entry = _entry(group, [r for r in ranked if r["metrics"].get("eb_star") is not None], skipped)
    model = _ModelSummary(label, entry, settings, n_resamples)
    found = [limits.excluded(label, skipped, "the head ranking (mean BSI)")]
    not_drawn: dict = next((r["nulls_not_drawn"] for r in group if r.get("nulls_not_drawn")), {})
    found += [
        limits.note("null_not_drawn", label, null=null, words={"why": why})
        for null, why in not_drawn.items()
    ]
    terms = {r["prompt_key"]: r["term"] for r in group}
    table = _score_table(group)
    for score, by_condition in table.items():
        found += model.score(score, by_condition, terms)
    if "layers" not in nulls_of(settings) and entry["top_heads"]:
        found.append(_layer_concentration(label, entry["top_heads"], entry["n_layers"]))
    if "margin" in table and "top" in table["margin"]:
        found.append(model.tiny_margins(table["margin"], table["recognition"]))
    found += [
        _small_support(label, null, support["support"], settings["n_random"])
        for null, support in entry["null_support"].items()
        if enumerated(support, settings["n_random"])
    ]
    entry["_limits"] = limits.collect(*found)
    return entry


def _layer_concentration(label: str, top: list, n_layers: int | None) -> dict:
    layers = sorted({int(h[0]) for h in top})
    listed = ", ".join(map(str, layers))
    words = {"n_heads": len(top), "n_in": len(layers), "listed": listed, "of": n_layers or "?"}
    return limits.note("layers", label, words=words, layers=layers, n_layers=n_layers)


def _small_support(label: str, null: str, support: int, n_random: int) -> dict:
    floor = 1 / (support + 1)
    words = {"sets": support + 1, "said": "above" if floor > limits.ALPHA else "within"}
    numbers = {"support": support, "n_random": n_random, "min_p": floor}
    return limits.note("small_support", label, words=words, null=null, **numbers)


def _entry(group: list[dict], ranking: list[dict], ranking_skipped: dict) -> dict:
    first = group[0]
    heads = {r["condition"]: r["heads"] for r in group}
    null_heads = {null: [heads[c] for c in null_names(heads, null)] for null in NULLS}
    entry: dict = {
        "model": first["model"],
        "revision": first["revision"],
        "n_layers": first["provenance"].get("n_layers"),
        "top_heads": heads.get("top"),
        "bottom_heads": heads.get("bottom"),
        "random_heads": null_heads["random"],
        "null_heads": {null: sets for null, sets in null_heads.items() if sets},
        "class_match": next((r["null_match"] for r in group if r.get("null_match")), None),
        "null_support": null_supports(group),
        "chance": _chance_levels(group),
        **{field: {} for field in _PER_SCORE},
        "n_ranking": len(ranking),
        "ranking_skipped_reasons": ranking_skipped,
    }
    if ranking:
        entry["mean_bsi"] = mean_bsi(ranking).tolist()
        entry["n_layers"], entry["n_heads"] = (len(entry["mean_bsi"]), len(entry["mean_bsi"][0]))
    return entry


@dataclass(frozen=True)
class _ModelSummary:
    label: str
    entry: dict  # the model's summary, filled score by score
    settings: dict
    n_resamples: int

    def tiny_margins(self, margin: dict, correct: dict) -> dict | None:
        small = [p for p, m in margin["baseline"].items() if abs(m) < limits.MARGIN_THRESHOLD]
        flips = [p for p in small if correct["top"].get(p) != correct["baseline"].get(p)]
        self.entry["tiny_margins"] = {
            "threshold": limits.MARGIN_THRESHOLD, "n_items": len(margin["baseline"]),
            "n_small": len(small), "n_flip": len(flips),
        }  # fmt: skip
        return limits.note("tiny_margins", self.label, **self.entry["tiny_margins"])

    def score(
        self, score: str, by_condition: dict[str, dict[str, float]], terms: dict[str, str]
    ) -> list[dict | None]:
        entry, label, seed = self.entry, self.label, self.settings["seed"]
        complete, cond = _arrays(by_condition)
        base = cond.get("baseline", np.empty(0))
        for name, scores in cond.items():
            means = entry["conditions"].setdefault(name, {})
            means[score] = float(np.mean(scores))
            means[f"n_{score}"] = len(complete)
        found: list[dict | None] = []
        if complete and score != "margin":
            chance = entry["chance"].get(score)
            found.append(
                limits.floor_ceiling(label, f"{score} score", float(base.mean()), chance=chance)
            )
        if len(complete) < limits.MIN_GROUP:
            return [*found, limits.small_group(label, f"{score} items", len(complete), "the test")]
        if len(complete) < limits.FEW_ITEMS:  # CIs on too few items to cover
            n, least = len(complete), limits.FEW_ITEMS
            found.append(limits.note("few_items", label, score=score, n=n, minimum=least))
        for name in ("top", "bottom"):
            if name in cond:
                entry["drops"].setdefault(name, {})[score] = stats.paired_difference(
                    base, cond[name], seed=seed, n_resamples=self.n_resamples
                ).to_dict()
        if "top" not in cond:
            return found
        diffs = base - cond["top"]
        top_drop = float(np.mean(diffs))
        entry["_item_drops"][score] = diffs
        entry["paired_sd"][score] = float(np.std(diffs, ddof=1))
        entry["n_items"][score] = len(complete)
        found.append(self.term_clustering(score, diffs, [terms[p] for p in complete]))
        found += self.nulls(score, base, cond, top_drop)
        if score == "recognition":
            used = (entry["nulls"].get("random") or {}).get(score, {}).get("n_drawn")
            names = null_names(cond, "random")[:used]  # the sets the p used, as for the means
            entry["per_term"].update(_per_term(complete, terms, cond, names))
        return found

    def nulls(
        self, score: str, base: np.ndarray, cond: dict[str, np.ndarray], top_drop: float
    ) -> list[dict | None]:
        entry, label, settings = self.entry, self.label, self.settings
        found: list[dict | None] = []
        for null in NULLS:
            names = null_names(cond, null)
            if not names:
                continue
            drops = _drops(cond, names)
            test = null_p(top_drop, drops, settings, entry["null_support"].get(null) or {})
            if test["stopped"] == "incomplete":
                found.append(
                    limits.note("undecided", label, score=score, null=null, n_drawn=len(drops))
                )
            # p, the mean drop and specificity read only the sets p used
            used = test["n_drawn"]
            rand, drops = np.stack([cond[n] for n in names[:used]]), drops[:used]
            spec = stats.specificity(
                base, cond["top"], rand, seed=settings["seed"], n_resamples=self.n_resamples
            )
            test.update(random_mean=float(np.mean(drops)), n_evaluated=len(names))
            test["specificity"] = spec.to_dict()
            if (mean := test["random_mean"]) < 0:
                numbers = {"score": score, "null": null, "random_mean": mean, "top_drop": top_drop}
                found.append(limits.note("random_gain", label, words={"gain": -mean}, **numbers))
            entry["nulls"].setdefault(null, {})[score] = test
            if null == "random":
                entry["random_drops"][score] = drops
                entry["drops"].setdefault("random_mean", {})[score] = float(np.mean(drops))
                entry["specificity"][score] = test["specificity"]
                entry["p_value"][score] = test["p"]
                found.append(limits.p_resolution(label, test["most"], score))
        return found

    def term_clustering(self, score: str, diffs: np.ndarray, clusters: list[str]) -> dict | None:
        names = sorted(set(clusters))
        if len(names) == len(diffs) or len(names) < limits.MIN_GROUP:
            return None
        sums = np.array([diffs[[c == t for c in clusters]].sum() for t in names])
        counts = np.array([float(clusters.count(t)) for t in names])

        def ratio(s: np.ndarray, c: np.ndarray, axis: int = -1) -> np.ndarray:
            return s.sum(axis=axis) / c.sum(axis=axis)  # the item mean of the resampled terms

        seed, drops = self.settings["seed"], self.entry["drops"]
        ci = stats.bootstrap_statistic((sums, counts), ratio, paired=True, seed=seed).to_dict()
        drops.setdefault("top_by_terms", {})[score] = ci
        by_items = drops["top"][score]
        return limits.term_clustering(self.label, score, len(names), len(diffs), ci, by_items)


def _per_term(
    complete: list[str], terms: dict[str, str], cond: dict[str, np.ndarray], names: list[str]
) -> dict[str, dict[str, float]]:
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


def text(s: dict) -> list[str]:
    """The C5 summary as terminal lines."""
    sets = (
        f"random sets drawn sequentially (stop at {s.get('stop_at')} exceedances, at most "
        f"{s['n_random']})"
        if s.get("sampling", "fixed") == "sequential"
        else f"{s['n_random']} random sets"
    )
    header = [
        f"C5 head ablation: k={s['k']}, {sets}, {s['ablation']} ablation "
        f"(drops are baseline minus ablated; 95% paired bootstrap CIs)"
    ]
    if s.get("design"):
        header.append(f"  design: {s['design']}")
    return per_model_text(s, header, _model_lines)


def _model_lines(label: str, m: dict) -> Iterator[str]:
    yield f"  {label}: top {m['top_heads']}  bottom {m['bottom_heads']}"
    header = f"    {'task':<12}{'baseline':>9}{'top':>8}{'bottom':>8}{'random':>8}"
    yield header + "   top drop               specificity            p      p_holm"
    for task in SCORES:
        cond = m["conditions"]
        if "baseline" not in cond or task not in cond["baseline"]:
            continue
        drop = m["drops"].get("random_mean", {}).get(task)  # over the sets p used
        rand = None if drop is None else cond["baseline"][task] - drop
        yield (
            f"    {task:<12}{num(cond['baseline'][task]):>9}"
            f"{num(cond.get('top', {}).get(task)):>8}{num(cond.get('bottom', {}).get(task)):>8}"
            f"{num(rand):>8}   "
            f"{estimate(m['drops'].get('top', {}).get(task)):<23}"
            f"{estimate(m['specificity'].get(task)):<23}"
            f"{pvalue(m['p_value'].get(task)):<7}{pvalue(m.get('p_holm', {}).get(task))}"
        )
    for score, level in (m.get("chance") or {}).items():
        yield f"    chance level, {score}: {num(level)} (1/choices averaged over the items)"
    for null, by_score in (m.get("nulls") or {}).items():
        for score, t in by_score.items():
            power = (m.get("detectable_drop") or {}).get(score) if null == "random" else None
            yield (
                f"    {null} null, {score}: p {pvalue(t.get('p'))}{_tail_words(t)} (Holm "
                f"{pvalue(t.get('p_holm'))} on the {t.get('holm_on', 'exact')} p) after "
                f"{t['n_drawn']} sets ({t['stopped']}; {_support_words(t)})"
                + (f"; detectable drop {num(power)}" if power is not None else "")
            )
    match = m.get("class_match") or {}
    for head in match.get("heads", []):
        counts = (match.get("classes") or {}).get(head["class"], {})
        yield (
            f"    class match L{head['head'][0]}.H{head['head'][1]} ({head['class']}): mean "
            f"distance {num(head['distance'])} (typical {num(head['typical'])}); "
            f"{counts.get('outside')} {head['class']} head(s) outside the top set"
        )


def _support_words(test: dict) -> str:
    support = test.get("support")
    said = f"support {support} distinct sets" if support is not None else "support not counted"
    return f"{said}, p floor {pvalue(test.get('p_floor'))}"


def _tail_words(test: dict) -> str:
    tail = test.get("tail") or {}
    if tail.get("p") is not None:
        return (
            f", tail p {pvalue(tail['p'])} [{pvalue(tail['low'])}, {pvalue(tail['high'])}] "
            f"(GPD on {tail['n_tail']} of {tail['n_null']})"
        )
    why = {"no-fit": "no GPD fit passed", "too-few-sets": "too few sets for a tail fit"}
    return f", tail p not used: {why[tail['method']]}" if tail.get("method") in why else ""

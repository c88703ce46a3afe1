"""C5's summary: condition means, paired drops with CIs, specificity, rank p and Holm per model."""

from __future__ import annotations

import numpy as np

from bindscope.experiments import limits
from bindscope.experiments.summary import skipped_reasons
from bindscope.metrics import stats
from bindscope.metrics.ranking import mean_bsi
from bindscope.results.labels import by_model

EXPERIMENT = "c5"
#: The records of the heads' ranking (mean BSI over the ranking set).
RANKING = "c5-ranking"


def summarize_c5(records: list[dict], *, n_resamples: int = 9999) -> dict:
    """Condition means, paired drops with CIs, specificity and permutation p per model."""
    evaluated = [r for r in records if r["experiment"] == EXPERIMENT]
    if not evaluated:
        return {"experiment": EXPERIMENT, "models": {}}
    settings = evaluated[0]["c5"]
    models: dict[str, dict] = {}
    seed = settings["seed"]
    for label, group in by_model(evaluated).items():
        models[label] = _summarize_model(group, records, seed, n_resamples, label)
    for task in ("recognition", "generation"):
        labels = [m for m in models if models[m]["p_value"].get(task) is not None]
        adjusted = (
            stats.adjust_pvalues([models[m]["p_value"][task] for m in labels], method="holm")
            if labels
            else []
        )
        for m, p in zip(labels, adjusted):
            models[m].setdefault("p_holm", {})[task] = p
    noted: list[dict] = []
    for entry in models.values():
        noted += entry.pop("_limits")
    return {
        "experiment": EXPERIMENT,
        "limits": noted,
        "k": settings["k"],
        "ablation": settings["ablation"],
        "n_random": settings["n_random"],
        "seed": seed,
        "matched_layers": settings["matched_layers"],
        "ranking_set": settings["ranking_set"],
        "design": settings.get("design"),
        "multiple_comparisons": "holm across models, per task",
        "models": models,
    }


def _summarize_model(
    group: list[dict], all_records: list[dict], seed: int, n_resamples: int, label: str
) -> dict:
    first = group[0]
    heads = {r["condition"]: r["heads"] for r in group}
    random_names = sorted(c for c in heads if c.startswith("random:"))
    ranked = [
        r
        for r in all_records
        if r["experiment"] == RANKING
        and r["model"] == first["model"]
        and r["revision"] == first["revision"]
    ]
    ranking = [r for r in ranked if r["metrics"].get("eb_star") is not None]
    ranking_skipped = skipped_reasons(ranked)
    found: list[dict | None] = [
        limits.excluded(label, ranking_skipped, "the head ranking (mean BSI)")
    ]
    entry = {
        "model": first["model"],
        "revision": first["revision"],
        "n_layers": first["provenance"].get("n_layers"),
        "top_heads": heads.get("top"),
        "bottom_heads": heads.get("bottom"),
        "random_heads": [heads[c] for c in random_names],
        "conditions": {},
        "drops": {},
        "random_drops": {},
        "specificity": {},
        "p_value": {},
        "per_term": {},
        "n_ranking": len(ranking),
        "ranking_skipped_reasons": ranking_skipped,
    }
    if ranking:
        entry["mean_bsi"] = mean_bsi(ranking).tolist()
        entry["n_layers"], entry["n_heads"] = (len(entry["mean_bsi"]), len(entry["mean_bsi"][0]))
    table: dict[str, dict[str, dict[str, float]]] = {}  # task -> condition -> prompt -> score
    terms: dict[str, str] = {}
    for r in group:
        table.setdefault(r["task"], {}).setdefault(r["condition"], {})[r["prompt_key"]] = r[
            "metrics"
        ]["score"]
        terms[r["prompt_key"]] = r["term"]
    for task, by_condition in table.items():
        prompts = sorted(by_condition.get("baseline", {}))
        complete = [p for p in prompts if all(p in v for v in by_condition.values())]
        base = np.array([by_condition["baseline"][p] for p in complete])
        for name, scores in by_condition.items():
            entry["conditions"].setdefault(name, {})[task] = float(
                np.mean([scores[p] for p in complete])
            )
            entry["conditions"][name][f"n_{task}"] = len(complete)
        if complete:
            found.append(limits.floor_ceiling(label, f"{task} score", float(base.mean())))
        found.append(limits.p_resolution(label, len(random_names), task))
        if len(complete) < limits.MIN_GROUP:
            found.append(limits.small_group(label, f"{task} items", len(complete), "the test"))
            continue
        cond = {n: np.array([by_condition[n][p] for p in complete]) for n in by_condition}
        for name in ("top", "bottom"):
            if name in cond:
                entry["drops"].setdefault(name, {})[task] = stats.paired_difference(
                    base, cond[name], seed=seed, n_resamples=n_resamples
                ).to_dict()
        rand = [cond[n] for n in random_names if n in cond]
        if rand and "top" in cond:
            random_drops = [float(np.mean(base - x)) for x in rand]
            entry["random_drops"][task] = random_drops
            entry["drops"].setdefault("random_mean", {})[task] = float(np.mean(random_drops))
            entry["specificity"][task] = stats.specificity(
                base, cond["top"], np.stack(rand), seed=seed, n_resamples=n_resamples
            ).to_dict()
            top_drop = float(np.mean(base - cond["top"]))
            entry["p_value"][task] = stats.rank_p_value(
                top_drop, random_drops, alternative="greater"
            )
        if task == "recognition":
            entry["per_term"].update(_per_term(complete, terms, cond, rand))
    entry["_limits"] = limits.collect(*found)
    return entry


def _per_term(
    complete: list[str], terms: dict[str, str], cond: dict[str, np.ndarray], rand: list
) -> dict[str, dict[str, float]]:
    """Recognition means per term and condition (descriptive: few prompts a term)."""
    out = {}
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

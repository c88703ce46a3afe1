"""The head scan's summary: effect maps, top conditions, BSI correlation, matched sets."""

from __future__ import annotations

import math

import numpy as np

from bindscope.experiments.kit import attribution_method, limits, per_head_tests
from bindscope.metrics.ranking import rank_heads
from bindscope.metrics.taxonomy import draw_class_matched_sets
from bindscope.results.labels import by_model

EXPERIMENT = "scan"
BSI = "scan-bsi"
METRICS = ("logprob", "accuracy")


def matched_comparison(
    effect: list[list], bsi: np.ndarray, primary: list[list[str]], *, k: int, n: int, seed: int
) -> dict:
    """The EB* top-``k`` heads' mean effect against ``n`` class-matched random head sets."""
    values = np.array(effect, dtype=float)  # None: nan
    top = rank_heads(bsi, k)[0]
    sets = draw_class_matched_sets(primary, top, n=n, seed=seed)
    top_effect = float(np.mean([values[h[0], h[1]] for h in top]))
    random_effects = [float(np.mean([values[h[0], h[1]] for h in s])) for s in sets]
    beaten = sum(r >= top_effect for r in random_effects)
    return {
        "top": top,
        "top_classes": [primary[h[0]][h[1]] for h in top],
        "top_effect": top_effect,
        "random_effects": random_effects,
        "random_sets": sets,
        "n_random": n,
        "p_value": (1 + beaten) / (n + 1),
        "p_floor": 1 / (n + 1),
    }


def summarize_scan(
    records: list[dict],
    *,
    correction: str = "bh",
    n_resamples: int | None = None,
    top: int = 10,
    classes: dict | None = None,
) -> dict:
    """Effect maps with CIs and adjusted p per model, top conditions, BSI correlation."""
    evaluated = [r for r in records if r["experiment"] == EXPERIMENT]
    if not evaluated:
        return {"experiment": EXPERIMENT, "models": {}}
    settings = evaluated[0]["scan"]
    bsi, estimates = by_model(records, BSI), by_model(records, attribution_method.ESTIMATE)
    models, found = {}, []
    for label, group in by_model(evaluated).items():
        mine = {"bsi": bsi.get(label, []), "estimates": estimates.get(label, [])}
        entry = _summarize_model(group, settings, correction, n_resamples, top, **mine)
        _add_matched(entry, settings, (classes or {}).get(label))
        found += _scan_limits(label, entry, correction=correction)
        models[label] = entry
    return {
        "experiment": EXPERIMENT,
        "limits": found,
        "ablation": settings["ablation"],
        "unit": settings["unit"],
        "method": settings.get("method", "exact"),
        "verify": settings.get("verify"),
        "seed": settings["seed"],
        "correction": correction,
        "n_resamples": n_resamples,
        "effect": "clean - ablated, mean over prompts (positive: the condition hurts)",
        "models": models,
    }


def _add_matched(entry: dict, settings: dict, primary: list | None) -> None:
    mean_bsi = entry.pop("_mean_bsi", None)
    if not (settings.get("matched_classes") and primary and mean_bsi is not None):
        return
    options = {"k": settings["k"], "n": settings["matched_classes"], "seed": settings["seed"]}
    try:
        entry["binding_top_vs_matched"] = {
            metric: matched_comparison(found["effect"], mean_bsi, primary, **options)
            for metric, found in entry["metrics"].items()
        }
    except ValueError as exc:  # a top head's class has no other head to draw
        entry["binding_top_vs_matched"] = {"skipped": str(exc)}


def _scan_limits(label: str, entry: dict, *, correction: str) -> list[dict]:
    found = [limits.small_group(label, "the scanned prompts", entry["n_prompts"], "a test")]
    for metric, m in entry["metrics"].items():
        n_tests = entry.get("n_tests") or sum(v is not None for row in m["effect"] for v in row)
        found.append(
            limits.corrected_resolution(
                label,
                f"scan {metric}",
                n_pairs=m["n_prompts"],
                n_resamples=entry["n_resamples"],
                n_tests=n_tests,
                correction=correction,
            )
        )
        if metric == "accuracy":
            found.append(limits.floor_ceiling(label, "clean accuracy", m["clean_mean"]))
    skipped = entry.get("prompts_skipped") or {}
    found.append(limits.excluded(label, skipped, "the scan (it cannot score them)"))
    for metric, bad in entry.get("unusable", {}).items():
        reasons = {f"with a null or non-finite {metric}": len(bad["prompts"])}
        found.append(limits.excluded(label, reasons, f"scan {metric}", keys=bad["keys"]))
    for metric, found_matched in (entry.get("binding_top_vs_matched") or {}).items():
        if isinstance(found_matched, dict) and "n_random" in found_matched:
            where = f"binding top vs class-matched sets, {metric}"
            found.append(limits.p_resolution(label, found_matched["n_random"], where))
    return limits.collect(*found)


def _tables(group: list[dict]) -> tuple[dict[str, dict[str, dict]], dict[str, list], dict]:
    table: dict[str, dict[str, dict]] = {}  # condition -> prompt -> metrics
    heads: dict[str, list] = {}
    keys: dict[tuple[str, str], str] = {}  # (condition, prompt) -> record key
    for r in group:
        table.setdefault(r["condition"], {})[r["prompt_key"]] = r["metrics"]
        keys[r["condition"], r["prompt_key"]] = r["key"]
        if r["condition"] != "clean":
            h = r["heads"]
            heads[r["condition"]] = h[0] if len(h) == 1 else [h[0][0], 0]
    return table, heads, keys


def _summarize_model(
    group: list[dict],
    settings: dict,
    correction: str,
    n_resamples: int | None,
    top: int,
    bsi: list[dict],
    estimates: list[dict],
) -> dict:
    first = group[0]
    seed = settings["seed"]
    n_layers, n_heads = first["provenance"]["n_layers"], first["provenance"]["n_heads"]
    table, heads, keys = _tables(group)
    clean = table.pop("clean", {})
    names = sorted(table, key=lambda n: heads[n])
    complete = sorted(p for p in clean if all(p in table[n] for n in names))
    width = n_heads if settings["unit"] == "head" else 1
    # attribution: the verified heads were chosen among all, so tests count all heads
    attribution = settings.get("method") == "attribution"
    n_tests = n_layers * n_heads if attribution else len(names)
    n_resamples = n_resamples or per_head_tests.default_resamples(n_tests)
    entry = _entry(first, n_resamples, len(complete))
    if attribution:
        entry["n_tests"] = n_tests
    tests = {"seed": seed, "n_resamples": n_resamples, "correction": correction, "n_tests": n_tests}
    for metric in METRICS:
        field = "logprob" if metric == "logprob" else "score"
        prompts, unusable = _metric_prompts(complete, clean, table, names, keys, field)
        if unusable:
            entry["unusable"][metric] = unusable
        if not prompts:
            continue
        base, pairs = _paired(clean, table, names, prompts, field)
        cells = per_head_tests.tested_cells(pairs, **tests)
        shown = len(cells) if attribution else top
        entry["metrics"][metric] = _metric_summary(base, cells, heads, (n_layers, width), shown)
    if attribution:  # the estimate map and its agreement with the verified heads
        attribution_method.add_estimates(entry, estimates, complete)
    if settings["unit"] == "head" and "logprob" in entry["metrics"]:
        left_out = entry["unusable"].get("logprob", {}).get("prompts", [])
        usable = {p: clean[p] for p in clean if p not in left_out}
        if attribution:  # every head's estimate: the exact effects cover the verified only
            effects = _estimated_effects(estimates, n_layers, n_heads)
        else:
            effects = _exact_effects(table, usable, names, heads)
        _add_bsi_correlation(entry, bsi, effects, usable, seed)
    if not entry["unusable"]:
        del entry["unusable"]
    return entry


def _paired(
    clean: dict, table: dict, names: list[str], prompts: list[str], field: str
) -> tuple[np.ndarray, dict[str, tuple[np.ndarray, np.ndarray]]]:
    base = np.array([clean[p][field] for p in prompts], dtype=float)
    ablated = {n: np.array([table[n][p][field] for p in prompts], dtype=float) for n in names}
    return base, {n: (base, values) for n, values in ablated.items()}


def _add_bsi_correlation(
    entry: dict, records: list[dict], effects: Effects, usable: dict, seed: int
) -> None:
    ok = [r for r in records if r["metrics"].get("eb_star") is not None]
    bsi = {r["prompt_key"]: r["metrics"]["bsi"] for r in ok}
    entry["bsi_vs_effect"] = _bsi_correlation(bsi, effects, usable, seed)
    if bsi:
        entry["_mean_bsi"] = np.nanmean(np.array(list(bsi.values()), dtype=float), 0)


def _entry(first: dict, n_resamples: int, n_prompts: int) -> dict:
    provenance = first["provenance"]
    return {
        "model": first["model"],
        "revision": first["revision"],
        "n_layers": provenance["n_layers"],
        "n_heads": provenance["n_heads"],
        "n_resamples": n_resamples,
        "n_prompts": n_prompts,
        "prompts_skipped": provenance.get("prompts_skipped", {}),
        "metrics": {},
        "unusable": {},
    }


def _metric_prompts(
    complete: list[str],
    clean: dict,
    table: dict,
    names: list[str],
    keys: dict[tuple[str, str], str],
    field: str,
) -> tuple[list[str], dict | None]:
    present = [p for p in complete if field in clean[p]]
    rows = [("clean", clean), *((n, table[n]) for n in names)]
    bad = [  # (prompt, record key) of each record without a finite ``field``
        (p, keys[condition, p])
        for p in present
        for condition, values in rows
        if not per_head_tests.finite(values[p].get(field))
    ]
    left_out = sorted({p for p, _ in bad})
    prompts = [p for p in present if p not in left_out]
    if not bad:
        return prompts, None
    return prompts, {"prompts": left_out, "keys": sorted(key for _, key in bad)}


def _metric_summary(
    base: np.ndarray,
    cells: dict[str, dict],
    heads: dict[str, list],
    shape: tuple[int, int],
    top: int,
) -> dict:
    maps = {"effect": "value", "low": "low", "high": "high", "p": "p", "p_adjusted": "p_adjusted"}
    return {
        "clean_mean": float(base.mean()),
        "n_prompts": len(base),
        **{
            name: per_head_tests.effect_map(cells, heads, *shape, field)
            for name, field in maps.items()
        },
        "significant": [list(heads[n]) for n in cells if cells[n]["significant"]],
        "top": per_head_tests.top_cells(cells, heads, top),
    }


#: Per prompt: the heads measured and each one's effect (clean - ablated log-prob).
Effects = tuple[list[list[int]], dict[str, list[float]], str]


def _exact_effects(table: dict, clean: dict, names: list[str], heads: dict[str, list]) -> Effects:
    order = [list(heads[n]) for n in names]
    found = {
        p: [clean[p]["logprob"] - table[n][p]["logprob"] for n in names]
        for p in clean
        if all(p in table[n] for n in names)
    }
    return order, found, "exact"


def _estimated_effects(estimates: list[dict], n_layers: int, n_heads: int) -> Effects:
    order = [[layer, head] for layer in range(n_layers) for head in range(n_heads)]
    found = {r["prompt_key"]: np.ravel(r["metrics"]["estimate"]).tolist() for r in estimates}
    return order, found, "attribution estimate"


def _bsi_correlation(bsi: dict, effects: Effects, clean: dict, seed: int) -> dict | None:
    order, per_prompt, kind = effects
    prompts = sorted(p for p in clean if p in bsi and p in per_prompt)
    if len(prompts) < 2:
        return None
    x = np.array([[bsi[p][l][h] for l, h in order] for p in prompts], dtype=float)  # noqa: E741
    y = np.array([per_prompt[p] for p in prompts], dtype=float)
    if not np.isfinite(x).all() or not np.isfinite(y).all():
        return None
    found = per_head_tests.map_correlation(x, y, seed=seed)
    if found is not None:
        found["effect"] = kind
        if not math.isfinite(found["value"]):
            found["value"] = None
    return found

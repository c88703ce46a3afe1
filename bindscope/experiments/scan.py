"""Head scan: ablate every head (or layer) alone and measure what behaviour loses.

Method. Each condition zero- or mean-ablates one head (``unit="head"``) or every head of
one layer (``unit="layer"``). A recognition item scores the correct choice's mean
log-probability per token and whether the arg-max choice is correct; a prompt with a
``target`` field scores the target's mean log-probability. The effect of a condition is
the paired drop ``clean - ablated`` per prompt; its mean gets a paired bootstrap 95% CI
and a sign-flip permutation p-value, adjusted across all conditions (Benjamini-Hochberg,
or Holm). With ``unit="head"`` the scan also measures each head's mean BSI on the same
prompts and reports the Spearman correlation of the BSI map with the effect map, with a
bootstrap CI over prompts: does binding predict importance head by head?

All conditions of a prompt share one clean pass (`bindscope.runners.scan`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from bindscope.errors import InputError
from bindscope.experiments import head_stats
from bindscope.experiments.common import (
    as_pairs,
    base_record,
    binding_metrics,
    model_label,
    prompt_set,
    provenance,
    record_key,
    run_chunks,
    summarize_tests,
)
from bindscope.interventions import head_means
from bindscope.results.labels import by_model
from bindscope.results.records import RecordWriter
from bindscope.results.settings import check_settings
from bindscope.runners.binding import binding
from bindscope.runners.scan import ScoredSequence, condition_scores

EXPERIMENT = "scan"
BSI = "scan-bsi"
METRICS = ("logprob", "accuracy")


def conditions_of(model, unit: str) -> dict[str, list[list[int]]]:
    """Condition name -> ablated heads: ``L3.H5`` per head, or ``L3`` per layer."""
    if unit == "head":
        layers, heads = range(model.n_layers), range(model.n_heads)
        return {f"L{layer}.H{h}": [[layer, h]] for layer in layers for h in heads}
    if unit == "layer":
        return {f"L{l}": [[l, h] for h in range(model.n_heads)] for l in range(model.n_layers)}  # noqa: E741
    raise InputError(f"unit must be 'head' or 'layer', not {unit!r}")


def scored(model, record) -> tuple[list[ScoredSequence], int | None]:
    """The sequences a record is scored on, and the index of the correct one (or None)."""
    prompt = model.tokenize(record.template)
    if record.task == "recognition":
        tok = model.tokenizer
        seqs = [
            ScoredSequence(prompt + tok(" " + c, add_special_tokens=False)["input_ids"],
                           len(tok(" " + c, add_special_tokens=False)["input_ids"]))
            for c in record.choices
        ]  # fmt: skip
        return seqs, record.answer_idx
    target = record.extra.get("target")
    ids = model.tokenizer(target, add_special_tokens=False)["input_ids"]
    return [ScoredSequence(prompt + ids, len(ids))], None


def scannable(pset) -> list:
    """Recognition records and records with a ``target`` (text appended after the prompt)."""
    return [r for r in pset.records if r.task == "recognition" or r.extra.get("target")]


def run(
    models,
    *,
    prompts="canonical",
    out: str | Path,
    ablation: str = "zero",
    unit: str = "head",
    correction: str = "bh",
    seed: int = 0,
    limit: int | None = None,
    batch_size: int = 16,
    n_resamples: int = 9999,
    force: bool = False,
    progress: bool = True,
) -> dict:
    """Scan every head (or layer) of each model; write records and a summary.

    Args:
        models: One ``Model`` or a list.
        prompts: Prompt set: recognition items and any records with a ``target`` field.
        ablation: ``zero`` or ``mean`` (means over the scanned prompts).
        unit: ``head`` (one condition per head) or ``layer`` (one per layer).
        correction: ``bh`` (Benjamini-Hochberg) or ``holm``, across conditions.
        seed: Seed of the bootstrap and permutation tests.
        limit: Scan only the first ``limit`` scannable prompts (quick looks).
        batch_size: Sequences per clean pass.
        n_resamples: Bootstrap and permutation resamples per condition.
        out: Results folder; records go to ``OUT/<experiment>/records.jsonl``.
        force: Start afresh even where the folder's settings differ (else refused).
        progress: Show a progress bar.
    """
    if ablation not in ("zero", "mean"):
        raise InputError(f"ablation must be 'zero' or 'mean', not {ablation!r}")
    if correction not in head_stats.CORRECTIONS:
        raise InputError(f"correction must be 'bh' or 'holm', not {correction!r}")
    models = models if isinstance(models, (list, tuple)) else [models]
    pset = prompt_set(prompts)
    items = scannable(pset)[:limit]
    if not items:
        raise InputError(
            f"{pset.name}: no recognition record and no record with a 'target' field to scan"
        )
    folder = Path(out) / EXPERIMENT
    settings = {
        "ablation": ablation,
        "unit": unit,
        "seed": seed,
        "limit": limit,
        "prompt_sha256": pset.sha256,
    }
    check_settings(folder, settings, models=models, force=force)
    with RecordWriter(folder / "records.jsonl", force=force) as writer:
        for model in models:
            _run_model(model, pset, items, writer, settings, batch_size, progress)
    return summarize(folder, correction=correction, n_resamples=n_resamples)


def _run_model(model, pset, items, writer, settings, batch_size, progress) -> None:
    prov = provenance(
        model, prompt_set=pset, seed=settings["seed"], scan=settings,
        n_layers=model.n_layers, n_heads=model.n_heads,
    )  # fmt: skip
    conditions = conditions_of(model, settings["unit"])
    names = list(conditions)
    label = model_label(model)
    means = None
    if settings["ablation"] == "mean":
        heads = [h for hs in conditions.values() for h in hs]
        means = head_means(model, [r.template for r in items], heads, batch_size=batch_size)

    def key(rec, name):
        return record_key(EXPERIMENT, model.name, model.revision, rec.key, name)

    def work(chunk):
        sequences, owners = [], []
        for i, rec in enumerate(chunk):
            seqs, _ = scored(model, rec)
            sequences += seqs
            owners += [i] * len(seqs)
        clean, scores = condition_scores(
            model,
            sequences,
            [as_pairs(conditions[n]) for n in names],
            means=means,
            batch_size=batch_size,
        )
        owner_of = np.array(owners)
        out = []
        for i, rec in enumerate(chunk):
            _, answer = scored(model, rec)
            columns = np.flatnonzero(owner_of == i)
            for name, values in [("clean", clean), *zip(names, scores)]:
                if key(rec, name) in writer:
                    continue
                mine = [float(v) for v in values[columns]]
                metrics: dict[str, object] = {
                    "logprob": mine[0] if answer is None else mine[answer]
                }
                if answer is not None:
                    prediction = max(range(len(mine)), key=lambda j: (mine[j], -j))
                    metrics.update(
                        choice_scores=mine, prediction=prediction, score=int(prediction == answer)
                    )
                heads = conditions.get(name, [])
                out.append(
                    base_record(
                        EXPERIMENT,
                        model,
                        rec,
                        name,
                        metrics,
                        prov,
                        heads=heads,
                        ablation=settings["ablation"],
                        scan=settings,
                    )
                )
        return out

    run_chunks(
        items,
        writer=writer,
        key=lambda rec: key(rec, names[-1]),  # a prompt's last record is written last
        work=work,
        chunk_size=batch_size,
        desc=f"scan {label}",
        progress=progress,
    )
    if settings["unit"] != "head":
        return
    bsi_key = lambda r: record_key(BSI, model.name, model.revision, r.key, "clean")  # noqa: E731

    def bsi_work(chunk):
        results = binding(model, chunk, batch_size=batch_size, on_missing="skip")
        return [
            base_record(BSI, model, rec, "clean", binding_metrics(res, model), prov)
            for rec, res in zip(chunk, results)
        ]

    run_chunks(
        items,
        writer=writer,
        key=bsi_key,
        work=bsi_work,
        chunk_size=batch_size * 4,
        desc=f"scan BSI {label}",
        progress=progress,
    )


def summarize_scan(
    records: list[dict], *, correction: str = "bh", n_resamples: int = 9999, top: int = 10
) -> dict:
    """Effect maps with CIs and adjusted p per model, top conditions, BSI correlation."""
    evaluated = [r for r in records if r["experiment"] == EXPERIMENT]
    if not evaluated:
        return {"experiment": EXPERIMENT, "models": {}}
    settings = evaluated[0]["scan"]
    groups = by_model(evaluated)
    bsi = [r for r in records if r["experiment"] == BSI]
    models = {
        label: _summarize_model(group, bsi, settings, correction, n_resamples, top)
        for label, group in groups.items()
    }
    return {
        "experiment": EXPERIMENT,
        "ablation": settings["ablation"],
        "unit": settings["unit"],
        "seed": settings["seed"],
        "correction": correction,
        "n_resamples": n_resamples,
        "effect": "clean - ablated, mean over prompts (positive: the condition hurts)",
        "models": models,
    }


def _summarize_model(group, bsi_records, settings, correction, n_resamples, top) -> dict:
    first = group[0]
    seed = settings["seed"]
    n_layers, n_heads = first["provenance"]["n_layers"], first["provenance"]["n_heads"]
    table: dict[str, dict[str, dict]] = {}  # condition -> prompt -> metrics
    heads: dict[str, list] = {}
    for r in group:
        table.setdefault(r["condition"], {})[r["prompt_key"]] = r["metrics"]
        if r["condition"] != "clean":
            h = r["heads"]
            heads[r["condition"]] = h[0] if len(h) == 1 else [h[0][0], 0]
    clean = table.pop("clean", {})
    names = sorted(table, key=lambda n: heads[n])
    complete = sorted(p for p in clean if all(p in table[n] for n in names))
    width = n_heads if settings["unit"] == "head" else 1
    entry = {
        "model": first["model"],
        "revision": first["revision"],
        "n_layers": n_layers,
        "n_heads": n_heads,
        "n_prompts": len(complete),
        "metrics": {},
    }
    for metric in METRICS:
        field = "logprob" if metric == "logprob" else "score"
        prompts = [p for p in complete if clean[p].get(field) is not None]
        if not prompts:
            continue
        base = np.array([clean[p][field] for p in prompts], dtype=float)
        cells = {}
        for name in names:
            ablated = np.array([table[name][p][field] for p in prompts], dtype=float)
            cells[name] = head_stats.cell_stats(
                base, ablated, seed=seed, n_resamples=n_resamples, alternative="two-sided"
            )
        head_stats.adjust(cells, correction=correction)
        entry["metrics"][metric] = {
            "clean_mean": float(base.mean()),
            "n_prompts": len(prompts),
            "effect": head_stats.effect_map(cells, heads, n_layers, width),
            "low": _map(cells, heads, n_layers, width, "low"),
            "high": _map(cells, heads, n_layers, width, "high"),
            "p": _map(cells, heads, n_layers, width, "p"),
            "p_adjusted": _map(cells, heads, n_layers, width, "p_adjusted"),
            "significant": [list(heads[n]) for n in names if cells[n]["significant"]],
            "top": head_stats.top_cells(cells, heads, top),
        }
    if settings["unit"] == "head" and "logprob" in entry["metrics"]:
        entry["bsi_vs_effect"] = _bsi_correlation(
            first, bsi_records, table, clean, names, heads, n_heads, seed
        )
    return entry


def _map(cells, heads, n_layers, width, field):
    out = [[None] * width for _ in range(n_layers)]
    for name, cell in cells.items():
        layer, head = heads[name]
        out[layer][head] = cell.get(field)
    return out


def _bsi_correlation(first, bsi_records, table, clean, names, heads, n_heads, seed):
    """Spearman of the mean-BSI map with the log-prob effect map over prompts with both."""
    bsi = {
        r["prompt_key"]: r["metrics"]["bsi"]
        for r in bsi_records
        if r["model"] == first["model"]
        and r["revision"] == first["revision"]
        and r["metrics"].get("eb_star") is not None
    }
    prompts = sorted(p for p in clean if p in bsi and all(p in table[n] for n in names))
    if len(prompts) < 2:
        return None
    order = [heads[n] for n in names]
    x = np.array([[bsi[p][l][h] for l, h in order] for p in prompts], dtype=float)  # noqa: E741
    y = np.array(
        [[clean[p]["logprob"] - table[n][p]["logprob"] for n in names] for p in prompts],
        dtype=float,
    )
    if not np.isfinite(x).all():
        return None
    found = head_stats.map_correlation(x, y, seed=seed)
    if found is not None and not math.isfinite(found["value"]):
        found["value"] = None
    return found


def summarize(
    folder: str | Path, *, correction: str | None = None, n_resamples: int | None = None
) -> dict:
    """Summarise ``folder/records.jsonl`` into ``folder/summary.json``.

    ``correction`` and ``n_resamples`` default to those of the summary already there (so
    ``bindscope summarize`` keeps a run's ``--correction``), else ``bh`` and 9999.
    """
    return summarize_tests(folder, summarize_scan, correction=correction, n_resamples=n_resamples)


__all__ = ["conditions_of", "run", "summarize", "summarize_scan"]

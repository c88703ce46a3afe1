"""EB* for every prompt of a set: ``bindscope binding``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bindscope.experiments import limits
from bindscope.experiments.common import (
    base_record,
    binding_metrics,
    mean_estimate,
    prompt_set,
    provenance,
    record_key,
    run_chunks,
    skipped_reasons,
    summarize_folder,
)
from bindscope.metrics.ranking import mean_bsi, rank_heads
from bindscope.prompts.context import check_fit
from bindscope.results.labels import by_model
from bindscope.results.records import RecordWriter
from bindscope.runners.binding import binding

EXPERIMENT = "binding"


def run(
    model,
    *,
    prompts="canonical",
    out: str | Path,
    batch_size: int = 32,
    force: bool = False,
    on_missing: str = "skip",
    seed: int = 0,
    progress: bool = True,
    experiment: str = EXPERIMENT,
) -> dict:
    """Measure EB* per prompt, write records and a summary; reruns skip finished prompts.

    ``seed`` seeds the summary's bootstrap intervals and is stored in every record.
    """
    pset = prompt_set(prompts)
    if on_missing == "error":  # with "skip", binding() skips them with the reason
        check_fit(model, pset, prompt_only=True)
    folder = Path(out) / experiment
    settings = {"prompt_sha256": pset.sha256, "on_missing": on_missing, "seed": seed}
    prov = provenance(model, prompt_set=pset, seed=seed, settings=settings)
    records = folder / "records.jsonl"
    with RecordWriter(records, force=force, settings=settings, models=[model]) as writer:

        def work(chunk):
            results = binding(model, chunk, batch_size=batch_size, on_missing=on_missing)
            return [
                base_record(experiment, model, rec, "clean", binding_metrics(res, model), prov)
                for rec, res in zip(chunk, results)
            ]

        run_chunks(
            pset.records,
            writer=writer,
            key=lambda r: record_key(experiment, model.name, model.revision, r.key, "clean"),
            work=work,
            chunk_size=batch_size * 4,
            desc=experiment,
            progress=progress,
        )
    return summarize(folder)


def summarize_binding(records: list[dict], *, k: int = 4, seed: int | None = None) -> dict:
    """Per-model EB* means with CIs, mean per-head BSI and the top-k heads.

    Every record is counted once: in ``n`` when it has an EB*, else in ``n_skipped`` with its
    reason in ``skipped_reasons`` (a term not found, a single-token span). ``seed`` defaults to
    the one the records were made with.
    """
    models: dict[str, dict] = {}
    for label, group in by_model(records).items():
        ok = [r for r in group if r["metrics"].get("eb_star") is not None]
        first = group[0]["metrics"]
        if seed is None:
            seed = group[0]["provenance"].get("seed") or 0
        reasons = skipped_reasons(group)
        entry = {
            "model": group[0]["model"],
            "revision": group[0]["revision"],
            "n_layers": first.get("n_layers"),
            "n_heads": first.get("n_heads"),
            "n": len(ok),
            "n_skipped": len(group) - len(ok),
            "skipped_reasons": reasons,
        }
        if ok:
            eb = [r["metrics"]["eb_star"] for r in ok]
            entry["eb_star"] = mean_estimate(eb, seed=seed)
            entry["eb_star_norm"] = mean_estimate(
                [r["metrics"]["eb_star_norm"] for r in ok], seed=seed
            )
            heads_bsi = mean_bsi(ok)
            entry["mean_bsi"] = heads_bsi.tolist()
            entry["top_heads"] = rank_heads(heads_bsi, k)[0]
            per_term: dict[str, list[float]] = {}
            for r in ok:
                per_term.setdefault(r["term"], []).append(r["metrics"]["eb_star"])
            entry["per_term"] = {
                t: {"eb_star": float(np.mean(v)), "n": len(v)} for t, v in sorted(per_term.items())
            }
        models[label] = entry
    return models


def summarize(folder: str | Path) -> dict:
    """Rebuild ``folder/summary.json`` from ``folder/records.jsonl``."""
    return summarize_folder(folder, _summary)


def _summary(records: list[dict]) -> dict:
    """The binding summary of a list of records, with its limits."""
    models = summarize_binding(records)
    return {
        "experiment": records[0]["experiment"] if records else EXPERIMENT,
        "models": models,
        "limits": limits.collect(
            *(limits.excluded(label, m["skipped_reasons"], "EB*") for label, m in models.items())
        ),
    }


__all__ = ["run", "summarize"]

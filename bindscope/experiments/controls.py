"""Discriminant validity (``bindscope controls``): do real terms bind more than controls?

EB* is measured on every control item and on the real terms' generation prompts (control
items are generation stems too, so the comparison is stem-for-stem). Per control group:
the mean EB* with a CI, Cohen's d (real minus control, pooled SD) with a bootstrap CI, a
two-sample permutation test, and Holm's correction across groups. The unit is the prompt.

Span length confounds the comparison (EB* needs a 2+ token span, and longer spans have more
pairs to average), so every group is also compared with the real prompts restricted to the
span lengths both sides share, each side keeping only those lengths.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bindscope.experiments import limits
from bindscope.experiments.common import (
    BINDING_FROM,
    base_record,
    binding_metrics,
    mean_estimate,
    prompt_set,
    provenance,
    record_key,
    run_chunks,
    skipped_reasons,
    stored_binding,
    summarize_folder,
)
from bindscope.metrics import stats
from bindscope.prompts.context import check_fit
from bindscope.prompts.records import PromptSet
from bindscope.results.labels import by_model
from bindscope.results.records import RecordWriter
from bindscope.runners.binding import binding

EXPERIMENT = "controls"
REAL = "real"


def run(
    model,
    *,
    controls="controls",
    real="canonical",
    out: str | Path,
    batch_size: int = 32,
    seed: int = 0,
    force: bool = False,
    progress: bool = True,
) -> dict:
    """EB* for every control item and every real generation prompt, then the comparison."""
    cset = prompt_set(controls)
    rset = prompt_set(real)
    real_records = [r for r in rset if r.task == "generation" and r.control_group is None]
    items = [r for r in cset if r.control_group] + real_records
    check_fit(model, items)
    combined = PromptSet(f"{cset.name}+{rset.name}", tuple(items), cset.sha256 + rset.sha256)
    folder = Path(out) / EXPERIMENT
    settings = {"controls_sha256": cset.sha256, "real_sha256": rset.sha256, "seed": seed}
    prov = provenance(model, prompt_set=combined, seed=seed, settings=settings)

    stored = stored_binding(model, out, rset)  # real terms: computed once per folder
    reused = {**prov, "binding_from": BINDING_FROM}

    def work(chunk):
        fresh = [r for r in chunk if r.control_group or r.key not in stored]
        results = binding(model, fresh, batch_size=batch_size, on_missing="skip")
        computed = {r.key: res for r, res in zip(fresh, results)}
        return [
            base_record(
                EXPERIMENT,
                model,
                r,
                "clean",
                binding_metrics(computed[r.key], model) if r.key in computed else stored[r.key],
                prov if r.key in computed else reused,
                control_family=r.extra.get("control_family"),
            )
            for r in chunk
        ]

    records = folder / "records.jsonl"
    with RecordWriter(records, force=force, settings=settings, models=[model]) as writer:
        run_chunks(
            items,
            writer=writer,
            key=lambda r: record_key(EXPERIMENT, model.name, model.revision, r.key, "clean"),
            work=work,
            chunk_size=batch_size * 4,
            desc=f"controls {model.name}",
            progress=progress,
        )
    return summarize(folder)


def _d(real, group, seed, n_resamples):
    """Cohen's d with CI, or None when it is undefined on these data."""
    try:
        return stats.cohens_d_ci(real, group, seed=seed, n_resamples=n_resamples).to_dict()
    except ValueError:
        return None


def compare(real: np.ndarray, group: np.ndarray, seed: int, n_resamples: int) -> dict:
    """Cohen's d (real - group) with a CI and a two-sided permutation test."""
    if len(real) < 2 or len(group) < 2:
        return {"n": len(group), "cohens_d": None, "test": None}
    return {
        "n": len(group),
        "cohens_d": _d(real, group, seed, n_resamples),
        "test": stats.two_sample_permutation(
            real, group, seed=seed, n_resamples=n_resamples
        ).to_dict(),
    }


def summarize_controls(records: list[dict], *, n_resamples: int = 9999) -> dict:
    """Real terms against each control group per model, with the summary's limits."""
    models = {}
    found: list[dict] = []
    for label, group in by_model(records, EXPERIMENT).items():
        seed = group[0]["provenance"].get("seed") or 0
        ok = [r for r in group if r["metrics"].get("eb_star") is not None]
        real = [r for r in ok if r["control_group"] is None]
        real_eb = np.array([r["metrics"]["eb_star"] for r in real])
        real_len = np.array([r["metrics"]["n_span"] for r in real])
        entry: dict = {
            "real": {
                "n": len(real),
                "eb_star": mean_estimate(real_eb, seed=seed) if len(real) else None,
                "n_span_mean": float(real_len.mean()) if len(real) else None,
            },
            "n_skipped": len(group) - len(ok),
            "skipped_reasons": skipped_reasons(group),
            "groups": {},
        }
        names = sorted({r["control_group"] for r in ok if r["control_group"]})
        for name in names:
            items = [r for r in ok if r["control_group"] == name]
            eb = np.array([r["metrics"]["eb_star"] for r in items])
            lengths = np.array([r["metrics"]["n_span"] for r in items])
            row = {
                "family": items[0].get("control_family"),
                "n": len(items),
                "n_terms": len({r["term"] for r in items}),
                "n_span_mean": float(lengths.mean()),
                "eb_star": mean_estimate(eb, seed=seed),
                **{k: v for k, v in compare(real_eb, eb, seed, n_resamples).items() if k != "n"},
            }
            shared = sorted(set(lengths.tolist()) & set(real_len.tolist()))
            keep_g = np.isin(lengths, shared)
            keep_r = np.isin(real_len, shared)
            matched = compare(real_eb[keep_r], eb[keep_g], seed, n_resamples)
            matched.update(n_real=int(keep_r.sum()), span_lengths=shared)
            row["matched"] = matched
            entry["groups"][name] = row
        for part in ("plain", "matched"):
            rows = [
                entry["groups"][n] if part == "plain" else entry["groups"][n]["matched"]
                for n in names
            ]
            tested = [row for row in rows if row.get("test")]
            adjusted = (
                stats.adjust_pvalues([r["test"]["p_value"] for r in tested]) if tested else []
            )
            for row, p in zip(tested, adjusted):
                row["p_holm"] = p
            for row in rows:
                row.setdefault("p_holm", None)
        models[label] = entry
        found += limits.collect(
            limits.excluded(label, entry["skipped_reasons"], "EB* (real terms and controls)"),
            limits.small_group(label, "real terms", len(real), "the two-sample test"),
            *(
                limits.small_group(label, f"control group {n}", entry["groups"][n]["n"], "the test")
                for n in names
            ),
        )
    return {
        "limits": found,
        "experiment": EXPERIMENT,
        "effect": "cohens_d = (real - control) / pooled SD; unit: prompt",
        "multiple_comparisons": "holm across groups, separately for all and span-matched",
        "models": models,
    }


def summarize(folder: str | Path) -> dict:
    """Rebuild ``folder/summary.json`` from ``folder/records.jsonl``."""
    return summarize_folder(folder, summarize_controls)


__all__ = ["compare", "run", "summarize"]

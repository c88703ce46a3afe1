"""Discriminant validity (``bindscope controls``): do real terms bind more than controls?"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bindscope.experiments.kit import limits
from bindscope.experiments.kit.binding_reuse import reuse_or_bind, stored_binding
from bindscope.experiments.kit.chunks import prompt_set
from bindscope.experiments.kit.experiment import Common, Experiment, ModelRun, Plan
from bindscope.experiments.kit.options import Options, option
from bindscope.experiments.kit.summary import (
    folder_summary,
    mean_estimate,
    per_model_view,
    skipped_reasons,
)
from bindscope.metrics import stats
from bindscope.prompts.context import check_fit
from bindscope.prompts.prompt_sets import PromptRecord, PromptSet
from bindscope.protocols import LanguageModel
from bindscope.results.format import DASH, estimate, num, pvalue
from bindscope.results.labels import by_model
from bindscope.results.schema import binding_kind

EXPERIMENT = "controls"


@dataclass(frozen=True)
class ControlsOptions(Options):
    """The options of ``bindscope controls``."""

    controls: str | Path | PromptSet = option(
        "controls", "control groups' prompt set: a built-in name or a .jsonl path", prompts=True
    )
    real: str | Path | PromptSet = option(
        "canonical", "real terms' prompt set: a built-in name or a .jsonl path", prompts=True
    )


def _plan(models: list[LanguageModel], opts: ControlsOptions, common: Common) -> Plan:
    cset = prompt_set(opts.controls)
    rset = prompt_set(opts.real)
    real_records = [r for r in rset if r.task == "generation" and r.control_group is None]
    items = [r for r in cset if r.control_group] + real_records
    for model in models:
        check_fit(model, items)
    combined = PromptSet(f"{cset.name}+{rset.name}", tuple(items), cset.sha256 + rset.sha256)

    def each(run: ModelRun) -> None:
        model, size = run.model, common.batch_size
        stored = stored_binding(model, common.out, rset)  # real terms: computed once per folder

        def work(chunk: list[PromptRecord]) -> list[dict]:
            found = reuse_or_bind(
                run, chunk, batch_size=size, stored=stored, fresh=lambda r: bool(r.control_group)
            )
            return [
                run.record(r, "clean", m, prov=prov, control_family=r.extra.get("control_family"))
                for r, m, prov in found
            ]

        run.chunks(items, work, chunk_size=size * 4, desc=f"controls {model.name}")

    settings = {"controls_sha256": cset.sha256, "real_sha256": rset.sha256, "seed": common.seed}
    return Plan(settings, each, prompt_set=combined)


def compare(real: np.ndarray, group: np.ndarray, seed: int, n_resamples: int) -> dict:
    """Cohen's d (real - group) with a CI, or None where undefined; a two-sided permutation test."""
    if len(real) < 2 or len(group) < 2:
        return {"n": len(group), "cohens_d": None, "test": None}
    try:
        d = stats.cohens_d_ci(real, group, seed=seed, n_resamples=n_resamples).to_dict()
    except ValueError:  # undefined on these data
        d = None
    test = stats.two_sample_permutation(real, group, seed=seed, n_resamples=n_resamples)
    return {"n": len(group), "cohens_d": d, "test": test.to_dict()}


def summarize_controls(records: list[dict], *, n_resamples: int = 9999) -> dict:
    """Real terms against each control group per model, with the summary's limits."""
    models, found = {}, []
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
            entry["groups"][name] = _group_row(items, real_eb, real_len, seed, n_resamples)
        _holm(entry["groups"], names)
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


def _group_row(
    items: list[dict], real_eb: np.ndarray, real_len: np.ndarray, seed: int, n_resamples: int
) -> dict:
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
    return row


def _holm(groups: dict[str, dict], names: list[str]) -> None:
    for part in ("plain", "matched"):
        rows = [groups[n] if part == "plain" else groups[n]["matched"] for n in names]
        tested = [row for row in rows if row.get("test")]
        adjusted = stats.adjust_pvalues([r["test"]["p_value"] for r in tested]) if tested else []
        for row, p in zip(tested, adjusted):
            row["p_holm"] = p
        for row in rows:
            row.setdefault("p_holm", None)


summarize = folder_summary(EXPERIMENT, summarize_controls)


def _model_lines(label: str, m: dict) -> Iterator[str]:
    real = m["real"]
    yield (
        f"  {label}: real terms EB* {estimate(real['eb_star'])} n={real['n']} "
        f"span {num(real['n_span_mean'], 1)} tokens"
    )
    yield (
        f"    {'group':<20}{'fam':<5}{'n':>4}{'span':>6}  {'EB*':<24}{'d':<24}{'p_holm':<8}"
        "matched d (n)"
    )
    for g, row in m["groups"].items():
        mt = row["matched"]
        yield (
            f"    {g:<20}{row.get('family') or DASH:<5}{row['n']:>4}"
            f"{num(row['n_span_mean'], 1):>6}  {estimate(row['eb_star']):<24}"
            f"{estimate(row.get('cohens_d'), digits=2):<24}{pvalue(row.get('p_holm')):<8}"
            f"{estimate(mt.get('cohens_d'), digits=2)} ({mt['n']})"
        )


TITLE = "Discriminant validity: EB* real terms vs control groups (d = real - control)"
DEFINITION = Experiment(
    EXPERIMENT, "controls", "discriminant validity: real terms vs control groups",
    ControlsOptions, summarize, per_model_view(TITLE, _model_lines),
    records=(binding_kind(EXPERIMENT),), plan=_plan,
)  # fmt: skip
run = DEFINITION.run

__all__ = ["DEFINITION", "ControlsOptions", "compare", "run", "summarize"]

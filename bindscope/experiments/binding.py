"""EB* for every prompt of a set: ``bindscope binding``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bindscope.experiments.kit import limits
from bindscope.experiments.kit.binding_reuse import BINDING, reuse_or_bind
from bindscope.experiments.kit.chunks import prompt_set
from bindscope.experiments.kit.experiment import Common, Experiment, ModelRun, Plan
from bindscope.experiments.kit.options import Options, option, prompts_option
from bindscope.experiments.kit.summary import (
    folder_summary,
    mean_estimate,
    per_model_view,
    skipped_reasons,
)
from bindscope.metrics.ranking import mean_bsi, rank_heads
from bindscope.prompts.context import check_fit
from bindscope.prompts.prompt_sets import PromptRecord, PromptSet
from bindscope.protocols import LanguageModel
from bindscope.results.format import estimate, heads
from bindscope.results.labels import by_model
from bindscope.results.schema import binding_kind

EXPERIMENT = BINDING


@dataclass(frozen=True)
class BindingOptions(Options):
    """The options of ``bindscope binding``."""

    prompts: str | Path | PromptSet = prompts_option()
    on_missing: str = option(
        "skip",
        "a term the tokenizer cannot place in its prompt: skip it with the reason, or stop",
        choices=("skip", "error"),
    )


def _plan(models: list[LanguageModel], opts: BindingOptions, common: Common) -> Plan:
    pset = prompt_set(opts.prompts)
    if opts.on_missing == "error":  # with "skip", binding() skips them with the reason
        for model in models:
            check_fit(model, pset, prompt_only=True)

    def each(run: ModelRun) -> None:
        size = common.batch_size

        def work(chunk: list[PromptRecord]) -> list[dict]:
            found = reuse_or_bind(run, chunk, batch_size=size, on_missing=opts.on_missing)
            return [run.record(rec, "clean", metrics) for rec, metrics, _ in found]

        run.chunks(pset.records, work, chunk_size=size * 4, desc=EXPERIMENT)

    settings = {"prompt_sha256": pset.sha256, "on_missing": opts.on_missing, "seed": common.seed}
    return Plan(settings, each, prompt_set=pset)


def summarize_binding(records: list[dict], *, k: int = 4, seed: int | None = None) -> dict:
    """Per-model EB* means with CIs, mean per-head BSI and the top-k heads."""
    models: dict[str, dict] = {}
    for label, group in by_model(records).items():
        ok = [r for r in group if r["metrics"].get("eb_star") is not None]
        first = group[0]["metrics"]
        if seed is None:
            seed = group[0]["provenance"].get("seed") or 0
        entry = {
            "model": group[0]["model"],
            "revision": group[0]["revision"],
            "n_layers": first.get("n_layers"),
            "n_heads": first.get("n_heads"),
            "n": len(ok),
            "n_skipped": len(group) - len(ok),
            "skipped_reasons": skipped_reasons(group),
        }
        if ok:
            for field in ("eb_star", "eb_star_norm"):
                entry[field] = mean_estimate([r["metrics"][field] for r in ok], seed=seed)
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


def _summary(records: list[dict]) -> dict:
    models = summarize_binding(records)
    return {
        "experiment": EXPERIMENT,
        "models": models,
        "limits": limits.collect(
            *(limits.excluded(label, m["skipped_reasons"], "EB*") for label, m in models.items())
        ),
    }


summarize = folder_summary(EXPERIMENT, _summary)


def _model_lines(label: str, m: dict) -> Iterator[str]:
    yield (
        f"  {label}: EB* {estimate(m.get('eb_star'))}  "
        f"EB*/ceiling {estimate(m.get('eb_star_norm'))}"
        f"  n={m['n']} skipped={m['n_skipped']}  top heads {heads(m.get('top_heads'))}"
    )


DEFINITION = Experiment(
    EXPERIMENT, "binding", "EB* per prompt; records + summary", BindingOptions, summarize,
    per_model_view("EB* (mean over prompts, 95% bootstrap CI)", _model_lines),
    records=(binding_kind(EXPERIMENT),), plan=_plan, show_records=True,
    # --on-missing skip: a term absent from its template is skipped with the reason
    check_terms=lambda options: options.on_missing == "error",
)  # fmt: skip
run = DEFINITION.run

__all__ = ["DEFINITION", "BindingOptions", "run", "summarize", "summarize_binding"]

"""Head taxonomy (``bindscope heads``): what kind of head each head is."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bindscope.experiments.kit.chunks import prompt_set
from bindscope.experiments.kit.experiment import Common, Experiment, Plan
from bindscope.experiments.kit.options import prompts_option
from bindscope.experiments.kit.summary import per_model_text
from bindscope.experiments.kit.taxonomy_plan import (
    TaxonomyOptions,
    check_taxonomy_fit,
    taxonomy_plan,
)
from bindscope.experiments.kit.taxonomy_summary import TAXONOMY, summarize
from bindscope.prompts.prompt_sets import PromptSet
from bindscope.protocols import LanguageModel
from bindscope.results.format import heads as head_list
from bindscope.results.schema import BINDING_METRICS, TASKS, RecordKind

#: What a record of the templates, and one of the repeated random sequences, hold.
TEXT_METRICS = ("sink", "previous_token", "spread", "position_0_is_bos", "n_tokens")
REPEATED_METRICS = ("induction", "duplicate_token", "tokens", "length", "start", "n_layers")


@dataclass(frozen=True)
class HeadsOptions(TaxonomyOptions):
    """The options of ``bindscope heads``."""

    prompts: str | Path | PromptSet = prompts_option()


def _plan(models: list[LanguageModel], opts: HeadsOptions, common: Common) -> Plan:
    for model in models:
        check_taxonomy_fit(model, opts)
    return taxonomy_plan(prompt_set(opts.prompts), opts, common)


def _model_lines(label: str, m: dict) -> Iterator[str]:
    classes = m.get("classes") or {}
    counts = ", ".join(f"{c} {n}" for c, n in (classes.get("counts") or {}).items())
    yield f"  {label}: {counts}  (position 0 is BOS: {m.get('position_0_is_bos')})"
    top = m.get("binding_top") or []
    if top:
        overlap = m.get("binding_top_overlap") or {}
        yield (
            f"    binding top-{len(top)} {head_list(top)}: {overlap.get('sink', 0)} sink, "
            f"{overlap.get('previous_token', 0)} previous-token, "
            f"{overlap.get('induction', 0)} induction"
        )


def text(s: dict) -> list[str]:
    """The head taxonomy summary as terminal lines."""
    title = "Head taxonomy (heads per class: mean score at or above its threshold)"
    out = per_model_text(s, [title], _model_lines)
    for model, e in (s.get("emergence") or {}).items():
        first = ", ".join(
            f"{c} at {(f or {}).get('revision') or 'never'}" for c, f in e["first"].items()
        )
        out.append(f"  {model}: first crossing: {first}")
        lead = e.get("induction_lead_tokens")
        if lead is not None:
            out.append(f"    induction leads sink formation by {lead:,} tokens")
    return out


def _metrics(record: dict) -> tuple[str, ...]:
    return REPEATED_METRICS if record["condition"] == "repeated" else BINDING_METRICS + TEXT_METRICS


def _tasks(record: dict) -> tuple[str, ...]:
    return ("induction",) if record["condition"] == "repeated" else TASKS


EXPERIMENT = TAXONOMY

DEFINITION = Experiment(
    EXPERIMENT, "heads", "head taxonomy: sink, previous-token, induction, binding", HeadsOptions,
    summarize, text, plan=_plan, show_records=True,
    records=(RecordKind(EXPERIMENT, ("clean", "repeated"), metrics=_metrics, tasks=_tasks),),
)  # fmt: skip
run = DEFINITION.run

__all__ = ["DEFINITION", "HeadsOptions", "run", "summarize", "text"]

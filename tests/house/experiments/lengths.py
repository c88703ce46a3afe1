"""A worked example of a new experiment: each prompt's length in tokens, per model.

The whole experiment is this module (and its figure section, ``../figures/lengths.py``):
options, plan, summary, terminal text and record kind. ``tests/test_house.py`` puts it
beside the package's experiments and runs it through ``bindscope lengths``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bindscope.experiments.kit.chunks import prompt_set
from bindscope.experiments.kit.experiment import Common, Experiment, ModelRun, Plan
from bindscope.experiments.kit.options import Options, option
from bindscope.experiments.kit.summary import summarize_folder
from bindscope.prompts.prompt_sets import PromptRecord, PromptSet
from bindscope.protocols import LanguageModel
from bindscope.results.labels import by_model
from bindscope.results.schema import RecordKind

EXPERIMENT = "lengths"


@dataclass(frozen=True)
class LengthsOptions(Options):
    """Its one option: the prompt set (``--prompts``)."""

    prompts: str | Path | PromptSet = option("canonical", "a prompt set", prompts=True)


def _plan(models: list[LanguageModel], opts: LengthsOptions, common: Common) -> Plan:
    pset = prompt_set(opts.prompts)

    def each(run: ModelRun) -> None:
        def work(chunk: list[PromptRecord]) -> list[dict]:
            return [
                run.record(r, "clean", {"n_tokens": len(run.model.tokenize(r.template))})
                for r in chunk
            ]

        run.chunks(pset.records, work, chunk_size=common.batch_size, desc=EXPERIMENT)

    return Plan({"prompt_sha256": pset.sha256}, each, prompt_set=pset)


def summary(records: list[dict]) -> dict:
    """Mean and longest prompt length per model."""
    models = {}
    for label, group in by_model(records, EXPERIMENT).items():
        n = np.array([r["metrics"]["n_tokens"] for r in group])
        models[label] = {"n": len(n), "mean_tokens": float(n.mean()), "longest": int(n.max())}
    return {"experiment": EXPERIMENT, "models": models, "limits": []}


def summarize(folder: str | Path) -> dict:
    """Rebuild ``folder/summary.json`` from the records."""
    return summarize_folder(folder, summary, name=EXPERIMENT)


def text(s: dict) -> list[str]:
    """The summary on the terminal."""
    return [
        f"  {label}: {m['mean_tokens']:.1f} tokens on average" for label, m in s["models"].items()
    ]


DEFINITION = Experiment(
    EXPERIMENT, "lengths", "prompt lengths in tokens", LengthsOptions, summarize, text,
    records=(RecordKind(EXPERIMENT, metrics=lambda record: ("n_tokens",)),), plan=_plan,
)  # fmt: skip
run = DEFINITION.run

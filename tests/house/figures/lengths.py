"""The worked example's figure section: one bar per model, and a table."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from bindscope.figures import markdown as md
from bindscope.figures.sections import Section
from bindscope.figures.style import new_figure
from bindscope.results.summaries import ExperimentResults

TITLE = "Prompt lengths"
HOW_TO_READ = "Each prompt's template in tokens, averaged per model."
SIZES = {"lengths": (6.0, 4.0)}


def plots(exp: ExperimentResults) -> Iterator[tuple[str, Any]]:
    """One figure of every model's mean length."""

    def build() -> tuple[Any, str]:
        fig, ax = new_figure(SIZES["lengths"])
        labels = list(exp.models)
        ax.bar(range(len(labels)), [exp.models[m]["mean_tokens"] for m in labels])
        ax.set_xticks(range(len(labels)), labels)
        return fig, "Mean prompt length in tokens per model."

    yield "lengths", build


def tables(exp: ExperimentResults) -> list[str]:
    """A row per model."""
    rows = [
        [label, m["n"], md.num(m["mean_tokens"]), m["longest"]] for label, m in exp.models.items()
    ]
    return md.table(["model", "prompts", "mean tokens", "longest"], rows)


SECTION = Section("lengths", TITLE, HOW_TO_READ, SIZES, plots, tables, order=9)

"""What a figure module gives the report: one ``Section`` per experiment."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from bindscope.results.summaries import ExperimentResults


@dataclass(frozen=True)
class Section:
    """One experiment's part of the figures and the report.

    Each figure module ends with ``SECTION = Section(...)``; ``bindscope.figures.sections``
    finds them, so a new experiment's figures need no other list.

    Attributes:
        experiment: The experiment (its folder ``RESULTS/<experiment>``).
        title: The report's heading.
        how_to_read: The paragraph under the heading (``markdown.prose(experiment)``, the
            Markdown file ``figures/prose/<experiment>.md``).
        sizes: Inches per figure kind (a figure's file stem starts with its kind).
        plots: ``(file stem, builder)`` pairs; a builder returns ``(figure, caption)``.
        tables: The report's Markdown lines.
        order: The place in the report (what is measured, whether it is valid, whether it is
            causal, how it develops).
    """

    experiment: str
    title: str
    how_to_read: str
    sizes: Mapping[str, tuple[float, float]]
    plots: Callable[[ExperimentResults], Iterator[tuple[str, Any]]]
    tables: Callable[[ExperimentResults], list[str]]
    order: int


__all__ = ["Section"]

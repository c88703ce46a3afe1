"""What a figure module gives the report: one ``Section`` per experiment."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from bindscope.results.summaries import ExperimentResults


@dataclass(frozen=True)
class Section:
    """One experiment's part of the figures and the report (``SECTION`` of a figure module).

    ``sizes`` are inches per figure kind (a file stem starts with its kind); ``plots`` yields
    ``(file stem, builder)`` pairs, a builder returning ``(figure, caption)``.
    """

    experiment: str
    title: str
    how_to_read: str
    sizes: Mapping[str, tuple[float, float]]
    plots: Callable[[ExperimentResults], Iterator[tuple[str, Any]]]
    tables: Callable[[ExperimentResults], list[str]]
    order: int


__all__ = ["Section"]

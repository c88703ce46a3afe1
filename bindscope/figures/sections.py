"""What a figure module gives the report (``SECTION = Section(...)``), and every one found."""

from __future__ import annotations

import functools
import importlib
import pkgutil
import sys
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


@functools.cache
def sections() -> dict[str, Section]:
    """Every section by experiment, in report order."""
    names = (info.name for info in pkgutil.iter_modules(sys.modules[__package__].__path__))
    modules = (importlib.import_module(f"{__package__}.{name}") for name in names)
    found = [s for m in modules if isinstance(s := getattr(m, "SECTION", None), Section)]
    return {s.experiment: s for s in sorted(found, key=lambda s: (s.order, s.experiment))}


def sizes() -> dict[str, tuple[float, float]]:
    """Inches of every figure kind of every section."""
    return {kind: size for s in sections().values() for kind, size in s.sizes.items()}


__all__ = ["Section", "sections", "sizes"]

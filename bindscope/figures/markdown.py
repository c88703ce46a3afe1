"""Markdown for the report: tables, numbers (``bindscope.results.format``), ``figures/prose``."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib import resources
from typing import Any, TypeVar

from bindscope.results.format import DASH, estimate, heads, num, pvalue

E = TypeVar("E")  # a model's summary entry
R = TypeVar("R")  # a table row


def cell(text: object) -> str:
    """A table cell: pipes escaped, on one line."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def dig(entry: Mapping | None, *keys: object) -> Any:
    """``entry[k1][k2]...``, None where a level is missing or empty."""
    for key in keys:
        entry = (entry or {}).get(key)
    return entry


def nums(entry: Mapping, *keys: str) -> list[str]:
    """The ``keys`` of a summary entry as number cells (a dash where one is missing)."""
    return [num(entry.get(key)) for key in keys]


def table(header: Sequence[str], rows: Sequence[Sequence], *, left: int = 1) -> list[str]:
    """A GitHub Markdown table: the first ``left`` columns left-aligned, the rest right."""
    align = [":---"] * left + ["---:"] * (len(header) - left)
    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


def model_rows(models: Mapping[str, E], rows: Callable[[str, E], Iterable[R]]) -> list[R]:
    """The rows of a table over models, in model order: each model's ``rows(label, entry)``."""
    return [row for label, entry in models.items() for row in rows(label, entry)]


def model_table(
    models: Mapping[str, Mapping], columns: Sequence[tuple], *, left: int = 1
) -> list[str]:
    """A row per model: its label, then per ``(header, format, *keys)`` column a cell."""
    # a cell is format(dig(entry, *keys)); no keys: format(entry)
    rows = [
        [label, *(fmt(dig(entry, *keys)) for _, fmt, *keys in columns)]
        for label, entry in models.items()
    ]
    return table(["model", *(header for header, *_ in columns)], rows, left=left)


@functools.cache
def prose(name: str) -> str:
    """The one paragraph of ``figures/prose/<name>.md``, its lines joined as the report shows it."""
    path = resources.files("bindscope.figures") / "prose" / f"{name}.md"
    if not path.is_file():
        raise FileNotFoundError(
            f"no paragraph {path}: write bindscope/figures/prose/{name}.md, and keep "
            '"prose/*.md" in pyproject\'s [tool.setuptools.package-data]'
        )
    lines = [line.strip() for line in path.read_text("utf-8").strip().splitlines()]
    if not lines or "" in lines:
        raise ValueError(f"{path} must hold exactly one paragraph (no blank lines, not empty)")
    return " ".join(lines)


__all__ = [
    "DASH",
    "cell",
    "dig",
    "estimate",
    "heads",
    "model_rows",
    "model_table",
    "num",
    "nums",
    "prose",
    "pvalue",
    "table",
]

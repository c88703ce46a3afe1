"""Markdown for the report: tables and the paragraphs kept as files in ``figures/prose``.

Numbers are read as ``bindscope.results.format`` writes them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib import resources
from typing import TypeVar

from bindscope.results.format import DASH, estimate, heads, num, pvalue

E = TypeVar("E")  # a model's summary entry
R = TypeVar("R")  # a table row


def cell(text: object) -> str:
    """A table cell: pipes escaped, on one line."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def nums(entry: Mapping, *keys: str) -> list[str]:
    """The ``keys`` of a summary entry as number cells (a dash where one is missing)."""
    return [num(entry.get(key)) for key in keys]


def table(header: Sequence[str], rows: Sequence[Sequence], *, left: int = 1) -> list[str]:
    """A GitHub-flavoured Markdown table.

    The first ``left`` columns (text) are left-aligned, the rest (numbers) right-aligned.
    """
    align = [":---"] * left + ["---:"] * (len(header) - left)
    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


def model_rows(models: Mapping[str, E], rows: Callable[[str, E], Iterable[R]]) -> list[R]:
    """The rows of a table over models, in model order.

    ``rows(label, entry)`` gives each model's rows: one, several, or none when the model has
    nothing for this table.
    """
    return [row for label, entry in models.items() for row in rows(label, entry)]


@functools.cache
def prose(name: str) -> str:
    """The paragraph in ``figures/prose/<name>.md`` on one line, as the report writes it.

    The file is one Markdown paragraph, wrapped for editing; its lines are joined by spaces.

    Raises:
        FileNotFoundError: No such file (a new section needs its paragraph; an installed
            package lacking it was built without its package data).
        ValueError: The file is empty or holds more than one paragraph.
    """
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
    "estimate",
    "heads",
    "model_rows",
    "num",
    "nums",
    "prose",
    "pvalue",
    "table",
]

"""Markdown tables for the report (numbers read as ``bindscope.results.format`` writes them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bindscope.results.format import DASH, estimate, heads, num, pvalue


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


__all__ = ["DASH", "cell", "estimate", "heads", "num", "nums", "pvalue", "table"]

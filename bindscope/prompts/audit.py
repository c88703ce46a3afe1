"""Span audit: where each prompt's term sits under a model's tokenizer (``bindscope audit``)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bindscope.errors import SpanNotFoundError
from bindscope.prompts.context import length_problem
from bindscope.prompts.prompt_sets import PromptRecord
from bindscope.prompts.spans import locate
from bindscope.protocols import LanguageModel


def audit(model: LanguageModel, records: Iterable[PromptRecord]) -> list[dict]:
    """One row per record: span tokens, length and flags (``not_found`` when absent)."""
    rows = []
    for rec in records:
        row: dict[str, Any] = {k: getattr(rec, k) for k in ("key", "term", "task", "source")}
        try:
            span = locate(model, rec.template, rec.term, prompt_id=rec.key)
        except SpanNotFoundError as exc:
            row.update(span=[], span_tokens=[], n_span=0, flags=["not_found"], reason=str(exc))
        else:
            row.update(
                span=list(span.indices),
                span_tokens=list(span.tokens),
                n_span=len(span.indices),
                flags=list(span.flags),
            )
        too_long = length_problem(model, rec)
        if too_long:
            row["flags"].append("too_long")
            row["reason"] = "; ".join(filter(None, [row.get("reason"), too_long]))
        rows.append(row)
    return rows


def write_audit(rows: list[dict], path: str | Path) -> Path:
    """Write the audit rows as JSON Lines."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    return path


def format_audit(rows: list[dict]) -> list[str]:
    """Aligned text lines for the terminal, problem rows first flagged with ``!``."""
    lines = []
    for r in rows:
        bad = {"not_found", "single_token", "at_position_0", "too_long"} & set(r["flags"])
        mark = "!" if bad else " "
        tokens = " ".join(r["span_tokens"]) or "-"
        flags = ",".join(r["flags"]) or "-"
        lines.append(f"{mark} {r['key']:<40} n={r['n_span']:<2} {flags:<28} {tokens}")
    return lines

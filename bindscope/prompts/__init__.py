"""Prompt records, validation and term spans."""

from __future__ import annotations

from bindscope.errors import SpanNotFoundError
from bindscope.prompts.prompt_sets import PromptRecord, PromptSet, load, load_json
from bindscope.prompts.spans import Span, find_term_chars, locate

__all__ = [
    "PromptRecord",
    "PromptSet",
    "Span",
    "SpanNotFoundError",
    "find_term_chars",
    "load",
    "load_json",
    "locate",
]

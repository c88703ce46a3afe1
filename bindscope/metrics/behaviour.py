"""Behaviour on a term: recognition (choice log-probs) and generation (greedy + rubric)."""

from __future__ import annotations

import functools
import re
from dataclasses import asdict, dataclass

from bindscope.errors import InputError
from bindscope.prompts.prompt_sets import load_json


@dataclass(frozen=True)
class RecognitionResult:
    """Choice scores for one recognition record."""

    key: str
    scores: tuple[float, ...]
    prediction: int
    correct: int

    def to_dict(self) -> dict:
        """JSON-ready dict (the record fields)."""
        return {
            "key": self.key,
            "choice_scores": list(self.scores),
            "prediction": self.prediction,
            "score": self.correct,
        }


@dataclass(frozen=True)
class GenerationResult:
    """A greedy continuation and its rubric score."""

    key: str
    text: str
    score: float
    hits: tuple[str, ...]
    contradictions: tuple[str, ...]

    def to_dict(self) -> dict:
        """JSON-ready dict (the record fields)."""
        return {
            **asdict(self),
            "hits": list(self.hits),
            "contradictions": list(self.contradictions),
        }


@functools.lru_cache(maxsize=1)
def default_rubric() -> dict:
    """The package's keyword rubric (``data/rubrics.json``)."""
    return load_json("rubrics.json")


@functools.lru_cache(maxsize=4096)
def _word(phrase: str) -> re.Pattern:
    return re.compile(r"(?<!\w)" + r"\s+".join(map(re.escape, phrase.split())) + r"(?!\w)")


def rubric_score(text: str, term: str, rubric: dict | None = None) -> GenerationResult:
    """Score a continuation with the term's keyword rubric."""
    rubric = rubric or default_rubric()
    entry = rubric["terms"].get(term)
    if entry is None:
        raise InputError(
            f"no rubric for term {term!r}; add it to the rubric file (keywords and "
            "contradictions) or pass rubric= with an entry for it"
        )
    lowered = text.lower()
    hits = tuple(k for k in entry["keywords"] if _word(k.lower()).search(lowered))
    bad = tuple(k for k in entry.get("contradictions", []) if _word(k.lower()).search(lowered))
    threshold = rubric.get("threshold", 3)
    score = max(0.0, min(1.0, len(hits) / threshold) - 0.2 * len(bad))
    return GenerationResult("", text, score, hits, bad)

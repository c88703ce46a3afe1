"""Pair files: clean/corrupted prompt pairs, the input of ``bindscope patch``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bindscope.errors import PromptFileError
from bindscope.prompts.prompt_sets import normal_term, one_spelling, read_prompt_file

ANSWER_FIELDS = ("target", "clean_answer", "corrupted_answer")


@dataclass(frozen=True)
class Pair:
    """One clean/corrupted pair (see ``docs/records.md``, "Pair files")."""

    pair_id: str
    term: str  # "" when the pair has none (an IOI pair); only labels the records
    clean: str
    corrupted: str
    target: str | None = None
    clean_answer: str | None = None
    corrupted_answer: str | None = None
    control_group: str | None = None

    @property
    def key(self) -> str:
        """``term/pair_id`` (``pair_id`` without a term), unique in a pair file."""
        return f"{self.term}/{self.pair_id}" if self.term else self.pair_id

    @property
    def prompt_id(self) -> str:
        """The pair's id (what a prompt's id is to other records)."""
        return self.pair_id

    @property
    def task(self) -> str:
        """``recognition`` for a target pair, ``generation`` for an answer pair."""
        return "recognition" if self.target is not None else "generation"


def load_pairs(path_or_name: str | Path = "pairs") -> tuple[list[Pair], str, str]:
    """Read a pair file (``pairs`` is the built-in set); returns pairs, name and SHA-256."""
    return read_prompt_file(
        path_or_name,
        _pair,
        prompts=("clean", "corrupted"),
        continuations=ANSWER_FIELDS,
        kind="pair",
        builtins=("pairs",),
    )


def _pair(row: dict, where: str, spellings: dict[str, tuple[str, str]]) -> Pair:
    _check_pair(row, where)
    spelled = str(row.get("term") or "")
    term = one_spelling(spellings, spelled, where) if normal_term(spelled) else ""
    optional = [row.get(k) for k in (*ANSWER_FIELDS, "control_group")]
    return Pair(str(row["pair_id"]), term, row["clean"], row["corrupted"], *optional)


def _check_pair(row: dict, where: str) -> None:
    missing = [k for k in ("pair_id", "clean", "corrupted") if k not in row]
    if missing:
        raise PromptFileError(f"{where}: missing field(s) {missing}")
    wrong = [
        k for k in ("clean", "corrupted", *ANSWER_FIELDS)
        if k in row and (not isinstance(row[k], str) or not row[k].strip())
    ]  # fmt: skip
    if wrong:
        raise PromptFileError(f"{where}: field(s) {wrong} must be non-empty strings")
    has_answers = "clean_answer" in row and "corrupted_answer" in row
    if not row.get("target") and not has_answers:
        raise PromptFileError(
            f"{where}: give a 'target' text, or both 'clean_answer' and 'corrupted_answer'"
        )
    if row.get("target") and ("clean_answer" in row or "corrupted_answer" in row):
        raise PromptFileError(
            f"{where}: both 'target' and 'clean_answer'/'corrupted_answer'; a pair has one "
            "metric: keep 'target' (its mean log-prob) or the two answers (their logit "
            "difference)"
        )


__all__ = ["ANSWER_FIELDS", "Pair", "load_pairs"]

"""Pair files: clean/corrupted prompt pairs, the input of ``bindscope patch``.

JSON Lines, one pair per line (``docs/records.md``, "Pair files"); the built-in ``pairs``
set replaces the term of each canonical recognition item with a control term. A pair's
``target`` or answers follow its prompts after one space, like a prompt file's choices
(`bindscope.prompts.continuations`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from bindscope.errors import PromptFileError
from bindscope.prompts.continuations import whitespace_problems
from bindscope.prompts.datafiles import data_path
from bindscope.prompts.prompt_sets import refuse_whitespace

#: A pair's continuations: each follows its prompt after one space (docs/records.md).
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
    """Read a pair file (``pairs`` is the built-in set); returns pairs, name and SHA-256.

    Raises:
        PromptFileError: A line is not JSON or lacks a field (file and line named).
    """
    path = data_path("pairs.jsonl") if str(path_or_name) == "pairs" else Path(path_or_name)
    if not path.is_file():
        raise PromptFileError(f"{path}: no such pair file; pass 'pairs' or a .jsonl path")
    pairs, seen, spaced = [], set(), []
    for number, line in enumerate(path.read_text("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PromptFileError(f"{where}: not valid JSON ({exc.msg})") from None
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
        texts = [row.get(k) for k in ("clean", "corrupted", *ANSWER_FIELDS, "control_group")]
        pair = Pair(str(row["pair_id"]), str(row.get("term") or ""), *texts)  # Pair's order
        spaced += whitespace_problems(
            where, row, prompts=("clean", "corrupted"), continuations=ANSWER_FIELDS
        )
        if pair.key in seen:
            raise PromptFileError(f"{where}: pair {pair.key} appears twice")
        seen.add(pair.key)
        pairs.append(pair)
    if not pairs:
        raise PromptFileError(f"{path}: no pairs (the file holds no JSON line); docs/records.md")
    refuse_whitespace(path, spaced)
    return pairs, path.stem, hashlib.sha256(path.read_bytes()).hexdigest()


__all__ = ["ANSWER_FIELDS", "Pair", "load_pairs"]

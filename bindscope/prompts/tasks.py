"""Two circuit tasks with clean/corrupted pairs, generated (no download)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from bindscope.errors import InputError, whole_number

__all__ = ["TASKS", "TaskPair", "answer_ids", "greater_than_pairs", "ioi_pairs", "task_pairs"]

NAMES = (
    *("Mary", "John", "Anna", "Paul", "Sarah", "James", "Laura", "Mark", "Emma", "David"),
    *("Alice", "Peter", "Kate", "Tom", "Lucy", "Jack", "Sophie", "Daniel", "Rachel", "Michael"),
)
PLACES = ("store", "park", "school", "market", "office", "station", "beach", "garden")
OBJECTS = ("a drink", "a book", "a ring", "a bag", "a letter", "a flower", "an apple")
EVENTS = ("war", "trip", "project", "drought", "festival", "reign", "strike", "survey")


@dataclass(frozen=True)
class TaskPair:
    """A clean text, its corrupted twin (the cue removed), and the answers the metric compares."""

    key: str
    clean: str
    corrupted: str
    correct: str
    wrong: str
    task: str

    # the fields every result line takes from what it ran (RecordFields)
    @property
    def prompt_id(self) -> str:
        """The pair's key."""
        return self.key

    @property
    def term(self) -> str:
        """The answer the clean text asks for."""
        return self.correct.strip()

    @property
    def control_group(self) -> None:
        """Pairs have no control group."""
        return None


def ioi_pairs(n: int, *, seed: int = 0) -> list[TaskPair]:
    """``n`` IOI pairs: A and B meet, B gives something to (A); corrupted: A, B, C."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b, c = rng.sample(NAMES, 3)
        place, thing = rng.choice(PLACES), rng.choice(OBJECTS)
        start = f"When {a} and {b} went to the {place},"
        clean, corrupted = f"{start} {b} gave {thing} to", f"{start} {c} gave {thing} to"
        out.append(TaskPair(f"ioi-{i:04d}", clean, corrupted, f" {a}", f" {b}", "ioi"))
    return out


def greater_than_pairs(n: int, *, seed: int = 0) -> list[TaskPair]:
    """``n`` greater-than pairs: from the year 1XYZ to the year 1X..; corrupted: 1X01."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        century, tens, unit = rng.randint(11, 19), rng.randint(2, 7), rng.randint(1, 9)
        event = rng.choice(EVENTS)
        clean = f"The {event} lasted from the year {century}{tens}{unit} to the year {century}"
        corrupted = f"The {event} lasted from the year {century}01 to the year {century}"
        out.append(
            TaskPair(f"gt-{i:04d}", clean, corrupted, str(tens + 1), str(tens - 1), "greater-than")
        )
    return out


TASKS: dict[str, Callable[..., list[TaskPair]]] = {
    "ioi": ioi_pairs,
    "greater-than": greater_than_pairs,
}


def task_pairs(task: str, n: int, tokenizer: Any, *, seed: int = 0) -> list[TaskPair]:
    """``n`` pairs of ``task`` (of ``20 n`` draws) of equal lengths, answers' first tokens apart."""
    if task not in TASKS:
        raise InputError(f"unknown task {task!r}; the tasks are {', '.join(TASKS)}")
    whole_number(n, "n", "pass the number of pairs, e.g. n=20", least=1)
    drawn = TASKS[task](20 * n, seed=seed)
    kept = [p for p in drawn if _fits(p, tokenizer)][:n]
    if len(kept) < n:
        raise InputError(
            f"only {len(kept)} of {len(drawn)} {task} pairs tokenize to equal lengths with "
            f"answers that start apart under this tokenizer; ask for at most {len(kept)} pairs"
        )
    return [replace(p, key=f"{p.task}-{i:04d}") for i, p in enumerate(kept)]


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def answer_ids(pair: TaskPair, tokenizer: Any) -> tuple[int, int]:
    """The first token of the correct and of the wrong answer (what the metric compares)."""
    return _ids(tokenizer, pair.correct)[0], _ids(tokenizer, pair.wrong)[0]


def _fits(pair: TaskPair, tokenizer: Any) -> bool:
    if len(_ids(tokenizer, pair.clean)) != len(_ids(tokenizer, pair.corrupted)):
        return False
    correct, wrong = _ids(tokenizer, pair.correct), _ids(tokenizer, pair.wrong)
    return bool(correct) and bool(wrong) and correct[0] != wrong[0]

"""The circuit task generators: pairs that differ only in the cue, equal token lengths."""

from __future__ import annotations

import pytest

from bindscope.errors import InputError
from bindscope.prompts.tasks import answer_ids, greater_than_pairs, ioi_pairs, task_pairs


def test_ioi_pairs_name_the_indirect_object():
    for pair in ioi_pairs(50, seed=1):
        a, b = pair.correct.strip(), pair.wrong.strip()
        start, end = pair.clean.split(",")
        assert start == f"When {a} and {b} went to the {start.split()[-1]}"
        assert end.split()[0] == b  # the subject gives: the answer is the other name
        assert pair.corrupted.split(",")[0] == start
        third = pair.corrupted.split(",")[1].split()[0]
        assert third not in (a, b)  # ABC: nothing says which of A and B


def test_greater_than_pairs_compare_the_tens_digit():
    for pair in greater_than_pairs(50, seed=2):
        year = pair.clean.split("year ")[1].split()[0]
        assert int(pair.correct) == int(year[2]) + 1 and int(pair.wrong) == int(year[2]) - 1
        assert pair.corrupted.split("year ")[1].startswith(year[:2] + "01")
        assert pair.clean.endswith(year[:2]) and pair.corrupted.endswith(year[:2])


def _tokenizer(split):
    def tokenizer(text: str, add_special_tokens: bool = True) -> dict:
        assert not add_special_tokens  # a BOS token would start every answer alike
        return {"input_ids": split(text)}

    return tokenizer


def tokenize(text: str) -> list[int]:  # one token a word, digits one a character
    return [sum(map(ord, t)) for w in text.split() for t in (w if w.isdigit() else [w])]


def test_task_pairs_keep_equal_lengths():
    pairs = task_pairs("ioi", 5, _tokenizer(tokenize), seed=0)
    assert [p.key for p in pairs] == [f"ioi-{i:04d}" for i in range(5)]
    assert all(len(tokenize(p.clean)) == len(tokenize(p.corrupted)) for p in pairs)
    assert all(answer_ids(p, _tokenizer(tokenize))[0] == tokenize(p.correct)[0] for p in pairs)
    with pytest.raises(InputError, match="unknown task"):
        task_pairs("sorting", 5, _tokenizer(tokenize))
    with pytest.raises(InputError, match="tokenize to equal lengths"):
        task_pairs("ioi", 3, _tokenizer(lambda text: [0] * len(text)))  # answers start alike

"""Random head sets matched to the top set's classes (C5 ``matched_classes``)."""

from __future__ import annotations

import pytest

from bindscope.experiments import c5
from bindscope.experiments.head_taxonomy import primary_classes
from bindscope.experiments.registry import validate_file
from bindscope.metrics.heads import draw_class_matched_sets
from bindscope.prompts import load

PRIMARY = [
    ["sink", "other", "other", "sink"],
    ["previous_token", "other", "sink", "previous_token"],
]


def test_class_matched_sets_copy_the_top_sets_classes():
    top = [[0, 0], [1, 0], [0, 1]]  # a sink, a previous-token and an "other" head
    sets = draw_class_matched_sets(PRIMARY, top, n=20, seed=3)
    assert sets == draw_class_matched_sets(PRIMARY, top, n=20, seed=3)
    assert sets != draw_class_matched_sets(PRIMARY, top, n=20, seed=4)
    for heads in sets:
        assert sorted(PRIMARY[l][h] for l, h in heads) == ["other", "previous_token", "sink"]  # noqa: E741
        assert not {tuple(h) for h in heads} & {tuple(h) for h in top}
    with pytest.raises(ValueError, match="previous_token head"):
        draw_class_matched_sets(PRIMARY, [[1, 0], [1, 3]], n=1, seed=0)  # no third one


def test_c5_matched_classes_runs_and_matches(tiny_llama, tiny_prompts, tiny_c5, tmp_path):
    summary = tiny_c5(matched_classes=True)
    m = next(iter(summary["models"].values()))
    primary = primary_classes(tiny_llama, [r.template for r in load(tiny_prompts).records])
    wanted = sorted(primary[l][h] for l, h in m["top_heads"])  # noqa: E741
    for heads in m["random_heads"]:
        assert sorted(primary[l][h] for l, h in heads) == wanted  # noqa: E741
    validate_file(tmp_path / "c5" / "records.jsonl")
    with pytest.raises(ValueError, match="not both"):
        c5.run(tiny_llama, prompts=tiny_prompts, out=tmp_path / "x", matched_layers=True,
               matched_classes=True)  # fmt: skip

"""Random head sets matched to the top set's classes (C5 ``matched_classes``)."""

from __future__ import annotations

import numpy as np
import pytest

from bindscope.errors import InputError
from bindscope.experiments import c5
from bindscope.experiments.kit.ablation_sets import draw_score_matched_sets
from bindscope.experiments.kit.registry import validate_file
from bindscope.experiments.kit.taxonomy_plan import primary_classes, taxonomy_means
from bindscope.metrics import taxonomy
from bindscope.metrics.taxonomy import draw_class_matched_sets
from bindscope.prompts import load
from bindscope.results.records import read_records

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


def _scores(previous_token):
    """Taxonomy scores of a 2 x 4 model: only previous-token scores vary."""
    zeros = np.zeros((2, 4))
    prev = np.asarray(previous_token, dtype=float)
    return {"sink": zeros, "previous_token": prev, "induction": zeros, "duplicate_token": zeros}


def test_score_matched_sets_use_the_nearest_heads_and_never_run_dry():
    # SmolLM2's case: 5 heads over the previous-token threshold (0.4), 4 of them in the top
    # set; a thresholded class has 1 head left for 4, the graded match takes the nearest.
    prev = [[0.9, 0.8, 0.7, 0.6], [0.5, 0.1, 0.05, 0.0]]
    top = [[0, 0], [0, 1], [0, 2], [0, 3]]
    scores = _scores(prev)
    assert taxonomy.classify(scores)["primary_counts"]["previous_token"] == 5
    with pytest.raises(ValueError, match="previous_token head"):
        draw_class_matched_sets(taxonomy.classify(scores)["primary"], top, n=1, seed=0)
    sets, closeness = draw_score_matched_sets(scores, top, n=30, seed=2, neighbours=4)
    # with 4 candidates per head and 4 heads outside, every set is the 4 outside heads
    assert all(s == [[1, 0], [1, 1], [1, 2], [1, 3]] for s in sets)
    # L0.H3 (0.6): candidates at 0.1, 0.5, 0.55, 0.6 -> mean 0.4375; median over outside 0.525
    last = closeness[3]
    assert last["head"] == [0, 3] and last["distance"] == pytest.approx(0.4375)
    assert last["typical"] == pytest.approx(0.525)
    # fewer neighbours: each top head's match is among its own nearest heads
    sets, _ = draw_score_matched_sets(scores, [[0, 0], [1, 3]], n=40, seed=5, neighbours=2)
    for chosen in sets:
        assert [0, 1] in chosen or [0, 2] in chosen  # L0.H0's two nearest: 0.8, 0.7
    longer, _ = draw_score_matched_sets(scores, [[0, 0], [1, 3]], n=60, seed=5, neighbours=2)
    assert longer[:40] == sets  # a longer draw extends a shorter one (sequential resume)
    with pytest.raises(InputError, match="smaller --k"):
        draw_score_matched_sets(scores, top, n=1, seed=0, neighbours=5)


def test_c5_matched_classes_runs_and_matches(tiny_llama, tiny_prompts, tiny_c5, tmp_path):
    summary = tiny_c5(matched_classes=True)
    m = next(iter(summary["models"].values()))
    templates = [r.template for r in load(tiny_prompts).records]
    scores = taxonomy_means(tiny_llama, templates, seed=0)
    _, closeness = draw_score_matched_sets(scores, m["top_heads"], n=1, seed=0, neighbours=4)
    assert [c["distance"] for c in m["class_match"]["heads"]] == pytest.approx(
        [c["distance"] for c in closeness]
    )
    for heads in m["null_heads"]["classes"]:
        assert not {tuple(h) for h in heads} & {tuple(h) for h in m["top_heads"]}
    # its own p and set count, beside the unmatched null's
    assert m["nulls"]["classes"]["recognition"]["n_drawn"] == 3
    assert set(m["null_heads"]) == {"random", "classes"}
    primary = primary_classes(tiny_llama, templates)
    for cls, counts in m["class_match"]["classes"].items():
        members = [(l, h) for l, row in enumerate(primary) for h, c in enumerate(row) if c == cls]  # noqa: E741
        assert counts["in_top"] + counts["outside"] == len(members)
    validate_file(tmp_path / "c5" / "records.jsonl")


def test_class_matched_null_too_big_is_refused_before_any_model_work(
    tiny_llama, tiny_prompts, tmp_path
):
    # 3 x 4 = 12 heads: k = 5 needs the top set and 2k = 10 candidates outside it
    with pytest.raises(InputError, match="--k 4 or less"):
        c5.run(tiny_llama, prompts=tiny_prompts, out=tmp_path, k=5, matched_classes=True)
    assert not (tmp_path / "c5").exists()


def test_the_nulls_records_follow_the_nulls_order_in_every_process(tiny_c5, tmp_path):
    # the conditions went through a set once, so their records' order changed with the
    # interpreter's hash seed: the same run wrote different files in different processes
    tiny_c5(matched_layers=True, matched_classes=True, n_random=6, stop_at=2)
    order = []
    for r in read_records(tmp_path / "c5" / "records.jsonl"):
        null = r["condition"].split(":")[0]
        if ":" in r["condition"] and null not in order:
            order.append(null)
    assert order == [null for null in c5.NULLS if null in order]
    assert len(order) == 3

"""C5's residual-start recognition equals the batched full-pass evaluation to rounding."""

from __future__ import annotations

import numpy as np
import pytest

from bindscope.errors import InputError
from bindscope.experiments import c5
from bindscope.prompts import load
from bindscope.results.records import read_records
from tests.experiments import prompts_tiny
from tests.tolerance import logit_bound


def _scores(out):
    return {
        r["key"]: r["metrics"]
        for r in read_records(out / "c5" / "records.jsonl")
        if r["experiment"] == "c5" and r["task"] == "recognition"
    }


def test_residual_start_equals_the_batched_evaluation(tiny, tiny_prompts, tmp_path):
    _residual_equals_batched(tiny, tiny_prompts, tmp_path, "zero")


def test_residual_start_equals_the_batched_evaluation_with_means(
    tiny_layout, tiny_prompts, tmp_path
):
    """Mean ablation differs from zero only in the value written (one family per layout)."""
    _residual_equals_batched(tiny_layout, tiny_prompts, tmp_path, "mean")


def _residual_equals_batched(tiny, tiny_prompts, tmp_path, ablation):
    options = {
        "prompts": tiny_prompts,
        "k": 2,
        "n_random": 3,
        "ablation": ablation,
        "rubric": prompts_tiny.RUBRIC,
        "progress": False,
        "batch_size": 3,  # several batches and passes, conditions cut across them
    }
    c5.run(tiny, out=tmp_path / "batched", strategy="batched", **options)
    c5.run(tiny, out=tmp_path / "residual", strategy="residual", **options)
    batched, residual = _scores(tmp_path / "batched"), _scores(tmp_path / "residual")
    (first, *_) = read_records(tmp_path / "residual" / "c5" / "records.jsonl")
    assert first["provenance"]["c5_strategy"] == "residual"
    assert first["provenance"]["c5_choices"] == "packed"  # every built-in family packs
    assert batched.keys() == residual.keys() and batched
    texts = [r.template + " " + c for r in load(tiny_prompts) for c in r.choices or ()]
    # A mean choice log-prob is a log-softmax of logits: each moves by at most twice the
    # logits' largest rounding error (the logit and the log-sum-exp).
    bound = 2 * logit_bound(tiny, texts)
    diffs, moved = [], []
    for key, ref in batched.items():
        got = residual[key]
        diffs.append(np.abs(np.subtract(got["choice_scores"], ref["choice_scores"])).max())
        ranked = sorted(ref["choice_scores"], reverse=True)
        if len(ranked) < 2 or ranked[0] - ranked[1] > 2 * bound:  # no near-tie: same answer
            assert got["prediction"] == ref["prediction"], key
        baseline = batched[key.rsplit("|", 1)[0] + "|baseline"]["choice_scores"]
        moved.append(np.abs(np.subtract(ref["choice_scores"], baseline)).max())
    assert max(diffs) <= bound, (max(diffs), bound)
    # negative control: the ablations move the scores by far more than the bound
    assert max(moved) > 100 * bound


def test_unknown_strategy_is_refused(tiny_llama, tiny_prompts, tmp_path):
    with pytest.raises(InputError, match="strategy"):
        c5.run(tiny_llama, prompts=tiny_prompts, out=tmp_path, strategy="fast", progress=False)


def test_c5_runs_the_layers_below_a_set_once_per_batch(tiny_llama, tiny_prompts, tmp_path):
    """C5's residual strategy runs a set's rows from its lowest ablated layer: the layers
    below it see fewer rows than the last layer, which every row reaches."""
    rows = [0] * tiny_llama.n_layers

    def counter(layer: int):
        def count(module, args, output):
            rows[layer] += args[0].shape[0]

        return count

    mlps = [layer.mlp for layer in tiny_llama.hf.model.layers]
    handles = [mlp.register_forward_hook(counter(i)) for i, mlp in enumerate(mlps)]
    try:
        c5.run(
            tiny_llama, prompts=tiny_prompts, out=tmp_path, k=2, n_random=3,
            rubric=prompts_tiny.RUBRIC, progress=False, strategy="residual",
        )  # fmt: skip
    finally:
        for handle in handles:
            handle.remove()
    (first, *_) = read_records(tmp_path / "c5" / "records.jsonl")
    assert first["provenance"]["c5_strategy"] == "residual"
    starts = {
        min(layer for layer, _ in r["heads"])
        for r in read_records(tmp_path / "c5" / "records.jsonl")
        if r["experiment"] == "c5" and r["heads"]
    }
    assert max(starts) > 0  # some set starts above layer 0
    assert rows[0] < rows[-1], rows

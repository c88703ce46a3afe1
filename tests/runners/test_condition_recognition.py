"""Head sets started at their lowest ablated layer score what the full forward scores.

The reference is ``recognition(..., strategy="full")``: every prompt + choice sequence run
from the embeddings with the set ablated. The negative control breaks the start on purpose
(the clean run keeps each layer's input, one layer low) and must miss the same bound by
orders of magnitude.
"""

from __future__ import annotations

import pytest
import torch

from bindscope.errors import InputError, InterventionOrderError
from bindscope.interventions import Mean, head_means, ops
from bindscope.runners.behaviour import recognition
from bindscope.runners.condition_recognition import condition_recognition
from tests.experiments.conftest import tiny_llama  # noqa: F401 (fixture)
from tests.metrics.test_behaviour import REC
from tests.tolerance import logit_bound

# lowest layers 0, 1, 1, 2, 2 on the 3-layer models: every start, one and two sets per start
CONDITIONS = [[(0, 1), (2, 2)], [(1, 0), (2, 3)], [(1, 2)], [(2, 1)], [(2, 0), (2, 2)]]


def _max_diff(got, ref) -> float:
    return max(abs(a - b) for x, y in zip(got, ref) for a, b in zip(x.scores, y.scores))


def _bound(model) -> float:
    """A mean choice log-prob is a log-softmax of logits: each moves by at most twice the
    logits' largest rounding error (the logit and the log-sum-exp)."""
    texts = [r.template + " " + c for r in REC for c in r.choices or ()]
    return 2 * logit_bound(model, texts)


def _inputs_kept(model, n_layers, into):
    """The fault: the clean run keeps each layer's input, not its output (one layer low)."""
    layers = model.nnsight.model.layers
    for i in range(n_layers):
        into.append(layers[i].input)
    return into


def _one_layer_late(start_at):
    """The fault: a pass skips its set's lowest layer too (fed the stream below it)."""

    def late(model, start, residual):
        start_at(model, start + 1 if start else 0, residual)

    return late


def test_started_sets_equal_the_full_forward(tiny, monkeypatch):
    """Every family: clean and each set within the float32 bound of the full forward;
    keeping the wrong layer misses it by > 100x, and starting one layer late is refused."""
    # batch_size 2: REC's 4- and 2-choice items run apart, and each start needs several passes
    clean, found = condition_recognition(tiny, REC, CONDITIONS, batch_size=2)
    bound = _bound(tiny)
    refs = [recognition(tiny, REC, ablate=heads, strategy="full") for heads in CONDITIONS]
    assert _max_diff(clean, recognition(tiny, REC, strategy="full")) <= bound
    for heads, got, ref in zip(CONDITIONS, found, refs):
        assert _max_diff(got, ref) <= bound, (tiny.family, heads, _max_diff(got, ref), bound)
        assert [r.key for r in got] == [r.key for r in REC]
    with monkeypatch.context() as patched:
        patched.setattr(ops, "keep_outputs", _inputs_kept)
        _, wrong = condition_recognition(tiny, REC, CONDITIONS, batch_size=2)
    for heads, got, ref in zip(CONDITIONS, wrong, refs):
        if min(layer for layer, _ in heads) > 0:  # a set at layer 0 starts from nothing kept
            assert _max_diff(got, ref) > 100 * bound, (tiny.family, heads)
    # one layer late would skip the layer the set ablates: the engine refuses, never drops it
    with monkeypatch.context() as patched:
        patched.setattr(ops, "start_at", _one_layer_late(ops.start_at))
        with pytest.raises(InterventionOrderError):
            condition_recognition(tiny, REC, CONDITIONS[1:], batch_size=2)


def test_mean_ablated_sets_equal_the_full_forward(tiny_llama):  # noqa: F811
    heads = sorted({tuple(h) for c in CONDITIONS for h in c})
    means = head_means(tiny_llama, [r.template for r in REC], heads)
    _, found = condition_recognition(tiny_llama, REC, CONDITIONS, means=means, batch_size=3)
    for c, got in zip(CONDITIONS, found):
        ref = recognition(tiny_llama, REC, intervene=Mean(c, means), strategy="full")
        assert _max_diff(got, ref) <= _bound(tiny_llama)


def test_layers_below_a_sets_start_run_only_in_the_clean_passes(tiny_llama):  # noqa: F811
    """Rows through each layer's MLP: a set adds rows to its lowest layer and those above,
    none to the layers below (they ran once, in the clean passes)."""
    rows = [0] * tiny_llama.n_layers

    def counter(layer: int):
        def count(module, args, output):
            rows[layer] += args[0].shape[0]

        return count

    def counted(conditions) -> list[int]:
        rows[:] = [0] * tiny_llama.n_layers
        condition_recognition(tiny_llama, REC, conditions, batch_size=2)
        return list(rows)

    mlps = [layer.mlp for layer in tiny_llama.hf.model.layers]
    handles = [mlp.register_forward_hook(counter(i)) for i, mlp in enumerate(mlps)]
    try:
        clean = counted([])
        for heads in CONDITIONS:
            added = [a - c for a, c in zip(counted([heads]), clean)]
            start = min(layer for layer, _ in heads)
            assert added[-1] > 0
            assert added == [added[-1] if layer >= start else 0 for layer in range(3)], heads
    finally:
        for handle in handles:
            handle.remove()


def test_a_set_without_heads_or_a_generation_record_is_refused(tiny_llama):  # noqa: F811
    with pytest.raises(InputError, match="condition #1 ablates no head"):
        condition_recognition(tiny_llama, REC, [[(0, 0)], []])
    generation = REC[0].__class__("g", "alt text", "generation", "Alt text is", max_tokens=2)
    with pytest.raises(InputError, match=r"condition_recognition\(\) got a generation record"):
        condition_recognition(tiny_llama, [generation], [[(0, 0)]])


def test_no_condition_scores_the_records_clean(tiny_llama):  # noqa: F811
    clean, found = condition_recognition(tiny_llama, REC, [])
    assert found == []
    assert _max_diff(clean, recognition(tiny_llama, REC)) <= _bound(tiny_llama)
    assert torch.isfinite(torch.tensor([s for r in clean for s in r.scores])).all()

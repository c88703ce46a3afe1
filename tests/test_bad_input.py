"""Bad input to the model API raises a BindscopeError naming what, where and the fix."""

from __future__ import annotations

import numpy as np
import pytest

from bindscope.errors import BindscopeError, HeadSpecError, InputError, InterventionOrderError
from bindscope.interventions import capture_probs, mean_ablate, ops, run_layers
from tests.conftest import build_tiny


@pytest.fixture(scope="module")
def model(byte_tokenizer):
    return build_tiny("llama", byte_tokenizer)


@pytest.mark.parametrize(
    ("heads", "needle"),
    [
        ([(0.5, 1.7)], "0.5 is a float, not an integer"),
        ([(True, False)], "True is a bool, not an integer"),
        ([("a", "b")], "'a' is a str, not an integer"),
        ([(np.bool_(True), 0)], "is a bool, not an integer"),
        ([(1.0, 0)], "1.0 is a float"),
    ],
)
def test_only_integers_are_heads(model, heads, needle):
    with pytest.raises(HeadSpecError) as err:
        model.logits(["Alt text"], ablate=heads)
    assert needle in str(err.value) and "head (" in str(err.value)


def test_numpy_integers_are_heads(model):
    assert model.check_heads([(np.int64(1), np.int32(2))]) == ((1, 2),)


@pytest.mark.parametrize("batch_size", [0, -1, 1.5])
def test_batch_size_must_be_positive(model, batch_size):
    with pytest.raises(InputError, match=r"batch_size="):
        model.logits(["Alt text", "A skip link"], batch_size=batch_size)
    with pytest.raises(InputError, match=r"batch_size="):
        model.generate(["Alt text"], max_new_tokens=1, batch_size=batch_size)


@pytest.mark.parametrize("size", [0, -2, 2.5, True])
def test_generation_batch_size_must_be_positive(model, tmp_path, size):
    from bindscope.experiments import c5, sweep

    with pytest.raises(
        InputError, match=r"generation_batch_size=.*e\.g\. generation_batch_size=64"
    ):
        c5.run(model, out=tmp_path, generation_batch_size=size, progress=False)
    with pytest.raises(InputError, match=r"generation_batch_size="):
        sweep.run("unused", ["step1"], out=tmp_path, generation_batch_size=size, progress=False)
    assert not any(tmp_path.iterdir())  # refused before anything is written


@pytest.mark.parametrize("texts", [[123], [None], ["ok", 4.5], 7])
def test_texts_must_be_strings(model, texts):
    with pytest.raises(InputError, match=r"text #\d is|pass a list of strings"):
        model.logits(texts)


def test_attention_probs_layers(model):
    with pytest.raises(HeadSpecError, match=r"layers=\[\] selects no layer"):
        model.attention_probs(["Alt text"], layers=[])
    with pytest.raises(HeadSpecError) as err:
        model.attention_probs(["Alt text"], layers=[99])
    assert "layer=99 is not a whole number in 0..2" in str(err.value)
    assert "head (" not in str(err.value)
    with pytest.raises(HeadSpecError, match=r"layer=1\.0 is not a whole number"):
        model.attention_probs(["Alt text"], layers=[1.0])


def test_per_row_longer_than_the_batch(model):
    batch = model.encode(["Alt text is", "A skip link"])
    with (
        pytest.raises(InputError, match="per_row gives 3 head lists but the batch"),
        model.nnsight.trace(**batch.inputs),
    ):
        run_layers(model, plan=ops.head_plan(model, per_row=[[(0, 1)], [], [(1, 1)]]))
    from bindscope.interventions import head_means

    means = head_means(model, ["Alt text is"], [(0, 1)])
    with (
        pytest.raises(InputError, match="per_row gives 1 head lists"),
        model.nnsight.trace(**batch.inputs),
    ):
        mean_ablate(model, means=means, per_row=[[(0, 1)]])


def test_ablating_after_a_later_capture_names_the_call_and_the_rule(model):
    batch = model.encode(["Alt text is good"])
    with (
        pytest.raises(InterventionOrderError) as err,
        model.eager(),
        model.nnsight.trace(**batch.inputs),
    ):
        capture_probs(model, [2])
        run_layers(model, plan=ops.head_plan(model, [(0, 1)]))
    message = str(err.value)
    assert "an ablation (run_layers(plan=...) / mean_ablate) of layer 0 came after" in message
    assert "earlier layers before later ones" in message
    assert "run_layers(model, capture=..., plan=...)" in message
    assert isinstance(err.value, BindscopeError)


def test_capturing_after_a_later_ablation_names_the_capture(model):
    batch = model.encode(["Alt text is good"])
    with (
        pytest.raises(InterventionOrderError, match=r"a capture \(capture_probs\) of layer 0"),
        model.eager(),
        model.nnsight.trace(**batch.inputs),
    ):
        run_layers(model, plan=ops.head_plan(model, [(2, 1)]))
        capture_probs(model, [0])


@pytest.mark.parametrize("bad", [10**9, -1, 704])
def test_token_ids_outside_the_vocabulary(model, bad):
    size = model.hf.get_input_embeddings().num_embeddings
    with pytest.raises(InputError, match=rf"text #1 holds token id\(s\) \[{bad}\] outside"):
        model.logits([[1, 2, 3], [1, 2, bad]])
    with pytest.raises(InputError, match=f"0 to {size - 1}"):
        model.logits([[bad]])
    with pytest.raises(InputError, match="outside the vocabulary"):
        model.attention_probs([[1, bad]])


def test_text_longer_than_the_context_window(model):
    window = model.context_length
    words = " ".join(["text"] * (window + 10))
    n = len(model.tokenize(words))
    with pytest.raises(BindscopeError, match=rf"text #1 is {n} tokens.*window of {window}"):
        model.logits(["Alt text", words])
    with pytest.raises(BindscopeError, match="text #0 is"):
        model.attention_probs([words])
    model.logits([" ".join(["text"] * (window // 4))])  # a text within the window runs

"""Bad input to the model API raises a BindscopeError naming what, where and the fix."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from bindscope.errors import (
    BindscopeError,
    HeadSpecError,
    InputError,
    InterventionError,
    InterventionOrderError,
)
from bindscope.interventions import Knockout, Zero, capture_probs, mean_ablate, ops, run_layers
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


_GOOD = "The cat sat on the mat"


def _id_takers(model, bad):
    """Every call that takes a text or a token-id list outside ``model.logits``' own check."""
    from bindscope import runners
    from bindscope.interventions import Patch, PathPatch

    metric, edge = runners.TargetLogprob(1), [("a0.h0", "logits")]
    good = model.tokenize(_GOOD)
    return {
        "to_str_tokens": lambda: model.to_str_tokens(bad),
        "edge_attribution clean": lambda: runners.edge_attribution(model, [bad], [good], metric),
        "edge_attribution corrupted": lambda: runners.edge_attribution(
            model, [good], [bad], metric
        ),
        "path_patching": lambda: runners.path_patching(model, [bad], [good], metric, edge),
        "path_patching_each": lambda: runners.path_patching_each(
            model, [good], [bad], metric, edge
        ),
        "Patch source": lambda: model.logits([good], intervene=Patch([(0, 0)], source=[bad])),
        "PathPatch source": lambda: model.logits([good], intervene=PathPatch(edge, [bad])),
    }


# A float or bool id was cut to an integer (1.5 ran as token 1), and an array ran as a list
# (each its own kind of silent): every text is a string or a list of whole numbers.
@pytest.mark.parametrize(
    "make_bad",
    [
        lambda ids: [t + 0.5 for t in ids],
        lambda ids: [True] * len(ids),
        np.array,
        lambda ids: 5,
        lambda ids: None,
        lambda ids: [ids],
    ],
    ids=["float ids", "bool ids", "numpy row", "an int", "None", "nested"],
)
def test_token_id_lists_are_checked_wherever_a_text_goes(model, make_bad):
    bad = make_bad(model.tokenize(_GOOD))
    for call, run in _id_takers(model, bad).items():
        with pytest.raises(InputError, match=r"each text must be a string") as err:
            run()
        assert repr(bad)[:20] in str(err.value), call


# A string was read as a list of one-character texts, and None or an int raised a TypeError.
@pytest.mark.parametrize("texts", ["The cat sat", None, 5, []])
def test_runners_take_a_list_of_texts(model, texts):
    from bindscope import runners

    metric, zero = runners.TargetLogprob(1), Zero([(0, 0)])
    calls = [
        ("clean text", lambda: runners.edge_attribution(model, texts, [_GOOD], metric)),
        ("corrupted text", lambda: runners.edge_attribution(model, [_GOOD], texts, metric)),
        ("text", lambda: runners.text_scores(model, texts)),
        ("text", lambda: runners.head_contributions(model, texts)),
        ("text", lambda: runners.head_attribution(model, texts, [1])),
        ("text", lambda: runners.head_attribution_patching(model, texts, metric, intervene=zero)),
    ]
    for name, run in calls:
        with pytest.raises(InputError, match=rf"(list of |^){name}s( is|, e\.g\.)"):
            run()


def test_sources_and_references_are_texts(model):
    from bindscope.interventions import Patch, PathPatch, Resample

    with pytest.raises(InterventionError, match=r"Patch: source=None is not a text"):
        Patch([(0, 0)], source=None)
    with pytest.raises(InterventionError, match=r"PathPatch: source=3 is not a text"):
        PathPatch([("a0.h0", "logits")], 3)
    with pytest.raises(InputError, match=r"Resample reference #1 is array"):
        Resample([(0, 0)], [_GOOD, np.array([1, 2])])
    # one string is one text, as for Patch's source (it was a reference of its characters)
    assert Resample([(0, 0)], _GOOD).reference == (_GOOD,)


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


# Each of these raised a TypeError (a dict of layer -> head, a site that is not a name) or
# took any value as a flag (per_token="no" returned per-token losses).
@pytest.mark.parametrize(
    ("run", "error", "needle"),
    [
        (lambda m: m.logits(["Alt text"], ablate={1: 0}), HeadSpecError, "1 maps to 0, not a list"),
        (lambda m: m.logits(["Alt text"], intervene=Zero({0: 1})), HeadSpecError, "0 maps to 1"),
        (lambda m: m.capture(["Alt text"], sites=None), InterventionError, "sites=None is not a"),
        (lambda m: m.capture(["Alt text"], sites=3), InterventionError, "sites=3 is not a site"),
        (lambda m: m.loss(["Alt text"], per_token="no"), InputError, "per_token='no' is not True"),
    ],
    ids=["ablate dict", "Zero dict", "sites None", "sites int", "per_token str"],
)
def test_options_of_the_wrong_kind_are_named(model, run, error, needle):
    with pytest.raises(error, match=re.escape(needle)):
        run(model)


def test_a_layer_to_heads_dict_ablates_its_pairs(model):
    as_dict = model.logits(["Alt text"], ablate={0: [1], 1: [0, 1]})
    as_pairs = model.logits(["Alt text"], ablate=[(0, 1), (1, 0), (1, 1)])
    assert torch.equal(as_dict[0], as_pairs[0])
    assert not torch.equal(as_dict[0], model.logits(["Alt text"])[0])


# Each raised a TypeError or ValueError from deep inside (or, for a bool, a seed of -1 and a
# count of 0, ran as something else): a spec's or a runner's option of the wrong kind.
@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda: Zero(1.5), "heads=1.5 is not a list of (layer, head) pairs"),
        (lambda: Zero("resid_post", layers=1.5), "layers=1.5 is not a layer index"),
        (lambda: Zero([(0, 0)], positions=True), "positions=True is not a token position"),
        (lambda: Knockout([(0, 0)], None), "edges=None is not a list of (query, key) pairs"),
    ],
    ids=["heads", "layers", "positions", "edges"],
)
def test_spec_options_of_the_wrong_kind_are_named(make, needle):
    with pytest.raises(InterventionError, match=re.escape(needle)):
        make()


_OTHER = "The dog sat on the rug"


def _one_pair_scores(model):
    from bindscope import runners

    return runners.edge_attribution(model, [_GOOD], [_OTHER], runners.TargetLogprob(1))


def _faithfulness(model, runners, **options):
    metric = runners.TargetLogprob(1)
    pairs = [_GOOD, _OTHER], [_OTHER, _GOOD]
    scores = runners.edge_attribution(model, *pairs, metric)
    return runners.faithfulness(model, *pairs, metric, scores, [("a0.h0", "logits")], **options)


@pytest.mark.parametrize(
    ("run", "needle"),
    [
        (lambda m, r: r.stability(_one_pair_scores(m), 2, n_resamples=0), "n_resamples=0"),
        (lambda m, r: r.stability(_one_pair_scores(m), 2, seed=1.5), "seed=1.5"),
        (lambda m, r: r.repeated_scores(m, n=0), "n=0 is not a whole number >= 1"),
        (lambda m, r: r.repeated_scores(m, length=None), "length=None is not a whole number"),
        (lambda m, r: r.repeated_scores(m, seed=True), "seed=True is not a whole number"),
        (
            lambda m, r: r.head_attribution_patching(
                m, [_GOOD], r.TargetLogprob(1), intervene=Zero([(0, 0)]), grad_drop=1
            ),
            "grad_drop=1 is not True or False",
        ),
        (
            lambda m, r: r.patching_sweep(m, _GOOD, _GOOD, sites=None, metric=float),
            "sites=None is not a site name",
        ),
        (
            lambda m, r: r.faithfulness(
                m, [_GOOD], [_OTHER], r.TargetLogprob(1),
                _one_pair_scores(m), [("a0.h0", "logits")],
            ),
            "the scores hold 1; score at least 2",
        ),
        (lambda m, r: _faithfulness(m, r, n_random=-1), "n_random=-1 is not a whole number"),
        (lambda m, r: _faithfulness(m, r, seed=True), "seed=True is not a whole number"),
        (lambda m, r: _faithfulness(m, r, n_resamples=0), "n_resamples=0 is not a whole"),
    ],
    ids=["stability n_resamples", "stability seed", "repeated n", "repeated length",
         "repeated seed", "grad_drop", "sweep sites", "faithfulness one pair",
         "faithfulness n_random", "faithfulness seed", "faithfulness n_resamples"],
)  # fmt: skip
def test_runner_options_of_the_wrong_kind_are_named(model, run, needle):
    from bindscope import runners

    with pytest.raises(BindscopeError, match=re.escape(needle)):
        run(model, runners)


def test_an_intervention_that_changes_nothing_is_refused(model):
    from bindscope import runners

    with pytest.raises(InterventionError, match=r"positions=\[\] is not a token position"):
        Zero("resid_post", layers=[0], positions=[])
    with pytest.raises(InputError, match="attribution patching needs intervene="):
        runners.head_attribution_patching(model, [_GOOD], runners.TargetLogprob(1), intervene=[])
    # a generator of positions is read once, not emptied by the check
    assert Zero("resid_post", layers=[0], positions=(p for p in [1, 2])).positions == (1, 2)

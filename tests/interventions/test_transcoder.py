"""Transcoder features as a site, on every family: each spec equals a plain torch hook pair on the
HF model (one reads the MLP's input, one edits its output) doing the transcoder's arithmetic by
hand (no nnsight, no bindscope code).

Tiny random transcoders from the MLP's input (``mlp_in``; OLMo 2, with no norm before its MLP,
``resid_mid``) to ``mlp_out``: ReLU with a skip connection, and JumpReLU. Bounds:
`reference_patching.logit_atol`, as for SAEs; the same edit one layer off misses it by orders of
magnitude, and so does no edit.
"""

from __future__ import annotations

import contextlib
import itertools
import json

import pytest
import torch

from bindscope.errors import DictionaryError
from bindscope.interventions import Mean, Patch, Resample, Steer, Zero
from bindscope.interventions.dictionary import (
    Dictionary,
    capture_features,
    feature_means,
    load_dictionary,
)
from bindscope.interventions.trace.features import TraceDictionary
from tests.conftest import PROMPTS
from tests.interventions.test_dictionary import _check as check
from tests.interventions.test_dictionary import _edited_cfg, _replacing, hand_encode
from tests.interventions.test_dictionary import _hf_logits as hf_logits
from tests.interventions.test_specs import variants
from tests.reference_patching import logit_atol
from tests.reference_sites import greedy_reference, hooked, site_reference

MARGIN = 100
F = 24  # latents
LAYER = 1


@pytest.fixture
def llama(byte_tokenizer, sp_tokenizer):
    from tests.conftest import _tiny

    return _tiny("llama", byte_tokenizer, sp_tokenizer)


def source_of(model) -> str:
    """The site a transcoder of ``model`` reads: the MLP's input."""
    return "mlp_in" if "mlp_in" in model.sites else "resid_mid"


def random_transcoder(model, architecture: str, *, skip: bool, layer: int = LAYER) -> Dictionary:
    """A random transcoder scaled to the MLP's input and output on the test prompts."""
    g = torch.Generator().manual_seed(11 + len(architecture) + skip)
    source = source_of(model)
    x = torch.cat([site_reference(model, model.tokenize(t), source, layer) for t in PROMPTS])
    y = torch.cat([site_reference(model, model.tokenize(t), "mlp_out", layer) for t in PROMPTS])
    d = x.shape[1]
    W_enc = torch.randn(d, F, generator=g) / float(x.norm(dim=1).mean())
    b_enc = 0.1 * torch.randn(F, generator=g)
    W_dec = torch.randn(F, d, generator=g) * float(y.std())
    b_dec = y.mean(0) + 0.1 * torch.randn(d, generator=g) * float(y.std())
    threshold = wide_gap(x @ W_enc + b_enc) if architecture == "jumprelu" else None
    weights = TraceDictionary(W_enc, b_enc, W_dec, b_dec, threshold, None, False, source)
    W_skip = (
        torch.randn(d, d, generator=g) * float(y.std() / x.norm(dim=1).mean()) if skip else None
    )
    return Dictionary("mlp_out", layer, weights, architecture, W_skip=W_skip)


def wide_gap(pre: torch.Tensor) -> torch.Tensor:
    """Per latent, the middle of the widest gap between its activations ``pre [n, F]`` around
    the 0.6 quantile: texts sharing a prefix repeat values, and a threshold at one of them
    would flip with rounding."""
    v = pre.sort(0).values
    lo, hi = int(0.5 * len(v)), int(0.7 * len(v))
    i = (v[lo + 1 : hi + 1] - v[lo:hi]).argmax(0) + lo
    latents = torch.arange(v.shape[1])
    return (v[i, latents] + v[i + 1, latents]) / 2


def _transcoders(model):
    return [
        random_transcoder(model, "relu", skip=True),
        random_transcoder(model, "jumprelu", skip=False),
    ]


def decode(tc: Dictionary, f: torch.Tensor, x_in: torch.Tensor) -> torch.Tensor:
    """The transcoder's prediction of ``mlp_out`` from features ``f`` and input ``x_in``."""
    w = tc.weights
    skip = 0 if tc.W_skip is None else x_in @ tc.W_skip.T
    return f @ w.W_dec + w.b_dec + skip


@contextlib.contextmanager
def transcoder_hook(model, tc: Dictionary, edit, at: int):
    """Hooks on the HF model: read the MLP's input, then ``mlp_out -> edit(mlp_out, x_in)``."""
    seen: list[torch.Tensor] = []

    def at_output(y):
        return edit(y, seen[-1]).to(y.dtype)

    with (
        hooked(model.hf, model.family, tc.weights.source, at, into=seen),
        hooked(model.hf, model.family, "mlp_out", at, edit=at_output),
    ):
        yield


def _check(model, tc, ids, got, edit):
    return check(model, tc, ids, got, edit, hook=transcoder_hook)


def feature_edit(tc: Dictionary, new_features):
    """``mlp_out -> mlp_out + (new f - f) W_dec``: the error term kept."""

    def edit(y, x_in):
        f = hand_encode(tc, x_in[0].float())
        return y + ((new_features(f) - f) @ tc.weights.W_dec)[None]

    return edit


def test_no_edit_keeps_the_error_term_and_equals_the_plain_run(tiny):
    ids = tiny.tokenize(PROMPTS[2])
    plain = tiny.logits([ids])[0]
    atol = logit_atol(plain, tiny.n_layers)
    for tc in _transcoders(tiny):
        x_in = site_reference(tiny, ids, tc.weights.source, LAYER)
        assert bool((hand_encode(tc, x_in) > 0).any())
        every = tc.features(range(F))
        for spec in (Steer(every, scale=0.0), Patch(every, source=[ids])):
            got = tiny.logits([ids], intervene=spec)[0]
            torch.testing.assert_close(got, plain, rtol=0, atol=atol)
        zeroed = tiny.logits([ids], intervene=Zero(every))[0]
        assert float((zeroed - plain).abs().max()) > MARGIN * atol


def test_zero_on_every_latent_is_the_error_term_plus_the_decoder_bias_and_skip(tiny):
    ids = tiny.tokenize(PROMPTS[2])
    for tc in _transcoders(tiny):

        def edit(y, x_in, tc=tc):
            x = x_in[0].float()
            skip = 0 if tc.W_skip is None else x @ tc.W_skip.T
            return (y - decode(tc, hand_encode(tc, x), x)) + tc.weights.b_dec + skip

        got = tiny.logits([ids], intervene=Zero(tc.features(range(F))))[0]
        error, atol, missed = _check(tiny, tc, ids, got, edit)
        print(
            f"{tiny.family} {tc.architecture}: {error:.1e} <= {atol:.1e}; wrong layer {missed:.1e}"
        )


def test_steer_adds_the_decoder_rows_times_the_scale_at_the_mlp_output(tiny):
    ids = tiny.tokenize(PROMPTS[2])
    for tc, positions in itertools.product(_transcoders(tiny), (None, [3, 5])):
        spec = Steer(tc.features([2, 9]), scale=3.0, positions=positions)
        cols = slice(None) if positions is None else positions
        row = 3.0 * tc.weights.W_dec[[2, 9]].sum(0)

        def edit(y, x_in, cols=cols, row=row):
            out = y.clone()
            out[0, cols] += row
            return out

        _check(tiny, tc, ids, tiny.logits([ids], intervene=spec)[0], edit)


def test_mean_patch_and_resample_encode_the_mlp_input(tiny):
    target, source = variants(tiny, 2)
    chosen = [1, 4, 7, 11]
    tc = _transcoders(tiny)[0]
    means = feature_means(tiny, PROMPTS, tc)
    inputs = [site_reference(tiny, tiny.tokenize(t), tc.weights.source, LAYER) for t in PROMPTS]
    hand = torch.cat([hand_encode(tc, x) for x in inputs]).mean(0)
    torch.testing.assert_close(means, hand, rtol=1e-5, atol=1e-6 * float(hand.abs().max()))
    got = tiny.logits([target], intervene=Mean(tc.features(chosen), means=means))[0]
    _check(tiny, tc, target, got, feature_edit(tc, _replacing(chosen, means)))
    donor = hand_encode(tc, site_reference(tiny, source, tc.weights.source, LAYER))
    got = tiny.logits([target], intervene=Patch(tc.features(chosen), source=[source]))[0]
    _check(tiny, tc, target, got, feature_edit(tc, _replacing(chosen, donor)))
    resampled = Resample(tc.features(chosen), reference=[source, target])
    again = tiny.logits([target], intervene=resampled)[0]
    torch.testing.assert_close(again, got, rtol=0, atol=logit_atol(got, tiny.n_layers))


def test_captured_features_and_steered_capture_and_generation(tiny):
    tc = _transcoders(tiny)[1]
    for text, got in zip(PROMPTS, capture_features(tiny, PROMPTS[:2], tc)):
        ref = hand_encode(tc, site_reference(tiny, tiny.tokenize(text), tc.weights.source, LAYER))
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5 * float(ref.abs().max()))
    steer = Steer(tc.features([0, 5]), scale=4.0)
    row = 4.0 * (tc.weights.W_dec[0] + tc.weights.W_dec[5])
    steered = tiny.capture(PROMPTS[:1], ["mlp_out"], [LAYER], intervene=steer)[0]["mlp_out"][1]
    plain = site_reference(tiny, tiny.tokenize(PROMPTS[0]), "mlp_out", LAYER)
    torch.testing.assert_close(steered, plain + row, rtol=0, atol=1e-5 * float(plain.abs().max()))
    for text, ids in zip(
        PROMPTS, tiny.generate_ids(PROMPTS[:2], max_new_tokens=5, intervene=steer)
    ):
        context = transcoder_hook(tiny, tc, lambda y, x_in: y + row, LAYER)
        assert ids == greedy_reference(tiny, tiny.tokenize(text), 5, context)


@pytest.mark.parametrize("architecture,skip", [("relu", True), ("jumprelu", False)])
def test_saelens_transcoder_round_trip_is_equal(llama, tmp_path, architecture, skip):
    tc = random_transcoder(llama, architecture, skip=skip)
    folder = tc.save(tmp_path / "tc")
    cfg = json.loads((folder / "cfg.json").read_text())
    expected = (
        "skip_transcoder"
        if skip
        else f"{'jumprelu_' if architecture == 'jumprelu' else ''}transcoder"
    )
    assert cfg["architecture"] == expected and cfg["hook_name_out"] == "blocks.1.hook_mlp_out"
    assert cfg["hook_name"] == "blocks.1.ln2.hook_normalized" and cfg["d_out"] == tc.d_out
    back = load_dictionary(folder, llama)
    assert (back.site, back.layer, back.weights.source) == ("mlp_out", 1, "mlp_in")
    for name in ("W_enc", "b_enc", "W_dec", "b_dec", "threshold"):
        a, b = getattr(tc.weights, name), getattr(back.weights, name)
        assert (a is None and b is None) or torch.equal(a, b), name
    assert (tc.W_skip is None and back.W_skip is None) or torch.equal(tc.W_skip, back.W_skip)
    spec = Zero(back.features([0, 3]))
    assert torch.equal(
        llama.logits(PROMPTS[:1], intervene=spec)[0],
        llama.logits(PROMPTS[:1], intervene=Zero(tc.features([0, 3])))[0],
    )


@pytest.mark.parametrize(
    "change,words",
    [
        ({"hook_name_out": "blocks.2.hook_mlp_out"}, ["cfg.json", "layer 1", "layer 2"]),
        ({"hook_name_out": "blocks.1.hook_resid_pre"}, ["tc", "resid_pre", "computes first"]),
        ({"hook_name_out": "blocks.1.ln1.hook_normalized"}, ["hook_name_out", "ln1"]),
        ({"hook_name": "blocks.9.ln2.hook_normalized"}, ["hook_name_out", "layer 9"]),
        ({"d_out": 7}, ["sae_weights.safetensors", "d_out=7"]),
        ({"hook_name_out": None}, ["cfg.json", "hook_name_out"]),
    ],
)
def test_a_wrong_transcoder_is_refused_by_name(llama, tmp_path, change, words):
    folder = random_transcoder(llama, "relu", skip=True).save(tmp_path / "tc")
    _edited_cfg(folder, **change)
    with pytest.raises(DictionaryError) as caught:
        load_dictionary(folder, llama)
    assert all(w in str(caught.value) for w in words), str(caught.value)


def _with(tc: Dictionary, **changes) -> TraceDictionary:
    """``tc``'s weights with some changed."""
    names = ("W_enc", "b_enc", "W_dec", "b_dec", "threshold", "k", "input_bias", "source")
    return TraceDictionary(**{n: changes.get(n, getattr(tc.weights, n)) for n in names})


def test_a_transcoder_of_another_width_or_a_missing_site_is_refused(tiny):
    tc = _transcoders(tiny)[0]
    narrow = Dictionary("mlp_out", 1, _with(tc, W_enc=tc.weights.W_enc[:-1]), path="narrow")
    with pytest.raises(DictionaryError, match=r"narrow.*d_in="):
        tiny.logits(PROMPTS[:1], intervene=Zero(narrow.features(0)))
    for lacking in {"mlp_in", "resid_mid"} - set(tiny.sites):  # OLMo 2: mlp_in; NeoX: resid_mid
        other = Dictionary("mlp_out", 1, _with(tc, source=lacking), path="lacking")
        with pytest.raises(
            DictionaryError, match=rf"'{lacking}' \(field hook_name\).*{tiny.family}"
        ):
            capture_features(tiny, PROMPTS[:1], other)


def test_the_scan_ablates_transcoder_conditions_like_the_hand_edit(tiny):
    from bindscope.runners.scan import ScoredSequence, condition_scores

    tc = _transcoders(tiny)[0]
    sequences = [ScoredSequence(tiny.tokenize(t), 2) for t in PROMPTS if len(tiny.tokenize(t)) > 4]
    conditions = [tc.features([3]), tc.features([1, 6, 9])]
    _, scores = condition_scores(tiny, sequences, conditions)
    for c, condition in enumerate(conditions):
        edit = feature_edit(tc, _replacing(list(condition.indices), torch.zeros(F)))
        for s, seq in enumerate(sequences):
            ids = list(seq.ids)
            logits = hf_logits(tiny, ids, tc, edit, hook=transcoder_hook).double()
            logprobs = logits.log_softmax(-1)[len(ids) - 3 : -1]  # predicting the last two
            ref = float(logprobs[torch.arange(2), ids[-2:]].mean())
            bound = 2 * logit_atol(logits, tiny.n_layers)  # a log-prob: two logits' noise
            assert abs(scores[c, s] - ref) <= bound, (tiny.family, c, s)

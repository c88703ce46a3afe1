"""Dictionary features as a site, on every family: each spec on features equals a plain torch
hook doing the dictionary's arithmetic by hand on the HF model (no nnsight, no bindscope code).

Tiny random dictionaries (ReLU at resid_post, JumpReLU at mlp_out, TopK at head_out). Bounds:
`reference_patching.logit_atol` (float32 noise of logits computed two ways, the largest logit as
scale); the same edit one layer off misses it by orders of magnitude, and so does no edit.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bindscope.errors import DictionaryError, InterventionError
from bindscope.interventions import (
    Dictionary,
    Mean,
    Patch,
    Resample,
    Steer,
    Zero,
    capture_features,
    feature_means,
    load_dictionary,
)
from bindscope.interventions.trace.features import TraceDictionary
from tests.conftest import PROMPTS
from tests.interventions.test_specs import variants
from tests.reference_patching import logit_atol
from tests.reference_sites import greedy_reference, hooked, site_reference

MARGIN = 100
# (site, architecture): one of each, so every family runs each activation once
KINDS = (("resid_post", "relu"), ("mlp_out", "jumprelu"), ("head_out", "topk"))
F = 24  # latents


def random_dictionary(model, site: str, architecture: str, layer: int = 1) -> Dictionary:
    """A random dictionary scaled to the site's activations on the test prompts."""
    g = torch.Generator().manual_seed(len(site) + 7 * len(architecture))
    x = torch.cat([site_reference(model, model.tokenize(t), site, layer) for t in PROMPTS])
    x = x.flatten(1)
    d = x.shape[1]
    W_enc = torch.randn(d, F, generator=g) / float(x.norm(dim=1).mean())
    W_dec = torch.randn(F, d, generator=g) * float(x.std())
    b_dec = x.mean(0) + 0.1 * torch.randn(d, generator=g) * float(x.std())
    pre = x @ W_enc
    threshold = pre.quantile(0.6, dim=0) if architecture == "jumprelu" else None
    k = 4 if architecture == "topk" else None
    weights = TraceDictionary(
        W_enc, 0.1 * torch.randn(F, generator=g), W_dec, b_dec, threshold, k, site != "mlp_out"
    )
    return Dictionary(site, layer, weights, architecture)


def hand_encode(sae: Dictionary, x: torch.Tensor) -> torch.Tensor:
    """The dictionary's features of ``x [n, d_in]``, written out from the formulas."""
    w = sae.weights
    if w.input_bias:
        x = x - w.b_dec
    pre = x @ w.W_enc + w.b_enc
    if sae.architecture == "topk":
        top = pre.topk(w.k, dim=-1)
        return torch.zeros_like(pre).scatter(-1, top.indices, torch.relu(top.values))
    if sae.architecture == "jumprelu":
        return torch.where(pre > w.threshold, torch.relu(pre), torch.zeros_like(pre))
    return torch.relu(pre)


def feature_hook(sae: Dictionary, new_features, positions=None):
    """A hook edit: ``x -> decode(new f) + (x - decode(f))`` at ``positions`` (None: all)."""

    def edit(x):
        flat = x[0].reshape(x.shape[1], -1).float()
        f = hand_encode(sae, flat)
        recon = f @ sae.weights.W_dec + sae.weights.b_dec
        new = new_features(f) @ sae.weights.W_dec + sae.weights.b_dec + (flat - recon)
        out = x.clone()
        rows = slice(None) if positions is None else list(positions)
        out[0, rows] = new.view(x.shape[1:])[rows].to(x.dtype)
        return out

    return edit


def _site_hook(model, sae, edit, layer: int):
    return hooked(model.hf, model.family, sae.site, layer, edit=edit)


def _hf_logits(model, ids, sae=None, edit=None, layer=None, hook=_site_hook):
    """The HF model's logits, with ``hook(model, sae, edit, layer)`` on (default: the site's)."""
    with torch.no_grad():
        if sae is None:
            return model.hf(torch.tensor([ids])).logits[0].float()
        with hook(model, sae, edit, sae.layer if layer is None else layer):
            return model.hf(torch.tensor([ids])).logits[0].float()


def _check(model, sae, ids, got, edit, hook=_site_hook):
    """``got`` equals the hook's logits; the same edit one layer off and no edit both miss.

    Returns ``(error, bound, how far one layer off misses)``.
    """
    ref = _hf_logits(model, ids, sae, edit, hook=hook)
    atol = logit_atol(ref, model.n_layers)
    torch.testing.assert_close(got, ref, rtol=0, atol=atol)
    missed = float((got - _hf_logits(model, ids, sae, edit, sae.layer + 1, hook)).abs().max())
    assert missed > MARGIN * atol
    assert float((got - _hf_logits(model, ids)).abs().max()) > MARGIN * atol
    return float((got - ref).abs().max()), atol, missed


def _dictionaries(model):
    return [random_dictionary(model, site, arch) for site, arch in KINDS if site in model.sites]


def test_no_edit_keeps_the_error_term_and_equals_the_plain_run(tiny):
    ids = tiny.tokenize(PROMPTS[2])
    plain = tiny.logits([ids])[0]
    for sae in _dictionaries(tiny):
        every = sae.features(range(F))
        assert bool((hand_encode(sae, site_reference(tiny, ids, sae.site, 1).flatten(1)) > 0).any())
        for spec in (Steer(every, scale=0.0), Patch(every, source=[ids])):
            got = tiny.logits([ids], intervene=spec)[0]
            torch.testing.assert_close(got, plain, rtol=0, atol=logit_atol(plain, tiny.n_layers))
        zeroed = tiny.logits([ids], intervene=Zero(every))[0]
        assert float((zeroed - plain).abs().max()) > MARGIN * logit_atol(plain, tiny.n_layers)


def test_zero_on_every_latent_is_the_decoder_bias_plus_the_error_term(tiny):
    ids = tiny.tokenize(PROMPTS[2])
    for sae in _dictionaries(tiny):
        got = tiny.logits([ids], intervene=Zero(sae.features(range(F))))[0]
        _check(tiny, sae, ids, got, feature_hook(sae, torch.zeros_like))


def _adding(indices, amount):
    def new(f):
        f = f.clone()
        f[:, list(indices)] += amount
        return f

    return new


def test_feature_steer_adds_the_decoder_rows_times_the_scale(tiny):
    ids = tiny.tokenize(PROMPTS[2])
    for sae in _dictionaries(tiny):
        for positions in (None, [3, 5]):
            spec = Steer(sae.features([2, 9]), scale=3.0, positions=positions)
            got = tiny.logits([ids], intervene=spec)[0]
            row = 3.0 * (sae.weights.W_dec[2] + sae.weights.W_dec[9])

            def edit(x, positions=positions, row=row):
                out = x.clone()
                cols = slice(None) if positions is None else list(positions)
                out[0, cols] += row.to(x.dtype)
                return out

            _check(tiny, sae, ids, got, edit)


def test_feature_mean_and_patch_and_resample_equal_the_hand_edit(tiny):
    target, source = variants(tiny, 2)
    chosen = [1, 4, 7, 11]
    for sae in _dictionaries(tiny):
        means = feature_means(tiny, PROMPTS, sae)
        hand = torch.cat([hand_encode(sae, site_reference(tiny, tiny.tokenize(t), sae.site, 1)
                                      .flatten(1)) for t in PROMPTS]).mean(0)  # fmt: skip
        torch.testing.assert_close(means, hand, rtol=1e-5, atol=1e-6 * float(hand.abs().max()))
        got = tiny.logits([target], intervene=Mean(sae.features(chosen), means=means))[0]
        _check(tiny, sae, target, got, feature_hook(sae, _replacing(chosen, means)))
        donor = hand_encode(sae, site_reference(tiny, source, sae.site, 1).flatten(1))
        got = tiny.logits([target], intervene=Patch(sae.features(chosen), source=[source]))[0]
        _check(tiny, sae, target, got, feature_hook(sae, _replacing(chosen, donor)))
        resampled = Resample(sae.features(chosen), reference=[source, target])
        again = tiny.logits([target], intervene=resampled)[0]
        torch.testing.assert_close(again, got, rtol=0, atol=logit_atol(got, tiny.n_layers))


def _replacing(indices, values):
    def new(f):
        f = f.clone()
        f[:, indices] = values[..., indices].expand(f.shape[0], -1)
        return f

    return new


def test_captured_features_are_the_encoded_site_and_steered_generation_is_the_hook(tiny):
    sae = _dictionaries(tiny)[0]
    found = capture_features(tiny, PROMPTS[:2], sae)
    for text, got in zip(PROMPTS, found):
        ref = hand_encode(sae, site_reference(tiny, tiny.tokenize(text), sae.site, 1).flatten(1))
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5 * float(ref.abs().max()))
    steer = Steer(sae.features([0, 5]), scale=4.0)
    row = 4.0 * (sae.weights.W_dec[0] + sae.weights.W_dec[5])
    steered = tiny.capture(PROMPTS[:1], [sae.site], [1], intervene=steer)[0][sae.site][1]
    plain = site_reference(tiny, tiny.tokenize(PROMPTS[0]), sae.site, 1)
    torch.testing.assert_close(steered, plain + row, rtol=0, atol=1e-5 * float(plain.abs().max()))
    got = tiny.generate_ids(PROMPTS[:2], max_new_tokens=5, intervene=steer)
    for text, ids in zip(PROMPTS, got):
        context = hooked(tiny.hf, tiny.family, sae.site, 1, edit=lambda x: x + row)
        assert ids == greedy_reference(tiny, tiny.tokenize(text), 5, context)


@pytest.mark.parametrize("site,architecture", KINDS)
def test_saelens_format_round_trip_is_equal(tiny_llama, tmp_path, site, architecture):
    sae = random_dictionary(tiny_llama, site, architecture)
    loaded = load_dictionary(sae.save(tmp_path / "sae"), tiny_llama)
    assert (loaded.site, loaded.layer, loaded.architecture) == (site, 1, architecture)
    for name in ("W_enc", "b_enc", "W_dec", "b_dec", "threshold", "k", "input_bias"):
        a, b = getattr(sae.weights, name), getattr(loaded.weights, name)
        assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b, name
    assert loaded.hook_name == f"blocks.1.{'attn.hook_z' if site == 'head_out' else 'hook_' + site}"


def test_gemma_scope_params_load_with_site_and_layer_from_the_path(tiny_llama, tmp_path):
    sae = random_dictionary(tiny_llama, "resid_post", "jumprelu", layer=2)
    w = sae.weights
    folder = tmp_path / "gemma-scope-2b-pt-res" / "layer_2" / "width_16k" / "average_l0_5"
    folder.mkdir(parents=True)
    arrays = {"W_enc": w.W_enc, "W_dec": w.W_dec, "b_enc": w.b_enc, "b_dec": w.b_dec}
    np.savez(folder / "params.npz", threshold=w.threshold.numpy(),
             **{k: v.numpy() for k, v in arrays.items()})  # fmt: skip
    loaded = load_dictionary(folder, tiny_llama)
    assert (loaded.site, loaded.layer, loaded.architecture) == ("resid_post", 2, "jumprelu")
    assert not loaded.weights.input_bias and torch.equal(loaded.weights.threshold, w.threshold)
    x = torch.randn(5, tiny_llama.d_model)
    torch.testing.assert_close(loaded.encode(x), torch.relu(x @ w.W_enc + w.b_enc)
                               * (x @ w.W_enc + w.b_enc > w.threshold))  # fmt: skip


@pytest.fixture
def tiny_llama(byte_tokenizer, sp_tokenizer):
    from tests.conftest import _tiny

    return _tiny("llama", byte_tokenizer, sp_tokenizer)


def _edited_cfg(folder, **changes):
    import json

    cfg = json.loads((folder / "cfg.json").read_text())
    cfg.update(changes)
    (folder / "cfg.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize(
    "change,words",
    [
        ({"hook_name": "blocks.1.ln1.hook_normalized"}, ["cfg.json", "hook_name"]),
        ({"hook_name": "blocks.9.hook_resid_post"}, ["sae", "layer 9", "hook_name"]),
        ({"d_in": 7}, ["sae_weights.safetensors", "d_in=7"]),
        ({"architecture": "gated"}, ["cfg.json", "architecture", "gated"]),
        ({"normalize_activations": "layer_norm"}, ["cfg.json", "normalize_activations"]),
    ],
)
def test_a_wrong_dictionary_is_refused_by_name(tiny_llama, tmp_path, change, words):
    folder = random_dictionary(tiny_llama, "resid_post", "relu").save(tmp_path / "sae")
    _edited_cfg(folder, **change)
    with pytest.raises(DictionaryError) as caught:
        load_dictionary(folder, tiny_llama)
    assert all(w in str(caught.value) for w in words), str(caught.value)


def test_a_dictionary_of_another_width_or_site_is_refused(tiny, tiny_llama, tmp_path):
    sae = random_dictionary(tiny_llama, "head_out", "topk")  # Llama's H*hd
    other = Dictionary("resid_post", 1, sae.weights, "topk", path="other-width")
    if tiny.d_model != sae.d_in:
        with pytest.raises(DictionaryError, match=r"other-width.*d_in"):
            tiny.logits(PROMPTS[:1], intervene=Zero(other.features([0])))
    if "resid_mid" not in tiny.sites:  # a parallel residual: no resid_mid
        mid = Dictionary("resid_mid", 1, _dictionaries(tiny)[0].weights, path="mid")
        with pytest.raises(DictionaryError, match=r"mid.*resid_mid"):
            capture_features(tiny, PROMPTS[:1], mid)
    with pytest.raises(DictionaryError, match=r"latents \[99\]"):
        sae.features([99])
    with pytest.raises(InterventionError, match="drop site="):
        Zero(sae.features([1]), layers=[2])
    with pytest.raises(InterventionError, match="in both"):
        tiny_llama.logits(
            PROMPTS[:1], intervene=[Zero(sae.features([1, 2])), Zero(sae.features(2))]
        )
    with pytest.raises(InterventionError, match="pass only scale"):
        Steer(sae.features([1]), 2, torch.ones(3))


def _hand_score(model, ids, n_target, sae=None, edit=None, layer=None):
    """Mean log-prob of the last ``n_target`` tokens under a hook (HF, no nnsight)."""
    logits = _hf_logits(model, ids, sae, edit, layer).double()
    logprobs = logits.log_softmax(-1)
    n = len(ids)
    return float(sum(logprobs[n - n_target + j - 1, ids[n - n_target + j]] for j in range(n_target))
                 / n_target), logits  # fmt: skip


def test_the_scan_ablates_feature_conditions_like_the_hand_edit(tiny):
    from bindscope.runners.scan import ScoredSequence, condition_scores

    sae = _dictionaries(tiny)[0]
    sequences = [ScoredSequence(tiny.tokenize(t), 2) for t in PROMPTS if len(tiny.tokenize(t)) > 4]
    conditions = [sae.features([3]), sae.features([1, 6, 9])]
    means = feature_means(tiny, PROMPTS, sae)
    misses = []  # |score - the same edit one layer off| / bound, every cell
    for given in (None, means):
        _, scores = condition_scores(tiny, sequences, conditions, means=given)
        for c, condition in enumerate(conditions):
            new = _replacing(list(condition.indices), torch.zeros(F) if given is None else given)
            for s, seq in enumerate(sequences):
                ref, logits = _hand_score(tiny, list(seq.ids), 2, sae, feature_hook(sae, new))
                bound = 2 * logit_atol(logits, tiny.n_layers)  # a log-prob: two logits' noise
                assert abs(scores[c, s] - ref) <= bound, (tiny.family, c, s)
                wrong, _ = _hand_score(tiny, list(seq.ids), 2, sae, feature_hook(sae, new), 2)
                misses.append(abs(scores[c, s] - wrong) / bound)
    assert max(misses) > MARGIN
    with pytest.raises(Exception, match="donors= resample-ablates heads"):
        condition_scores(tiny, sequences[:1], conditions, donors=sequences[:1])


def test_a_dictionary_built_in_memory_is_checked(tiny_llama):
    w = random_dictionary(tiny_llama, "resid_post", "jumprelu").weights
    with pytest.raises(DictionaryError, match="'topk' with threshold set and k=None"):
        Dictionary("resid_post", 1, w, "topk", path="made")
    with pytest.raises(DictionaryError, match="site 'pattern'"):
        Dictionary("pattern", 1, w, "jumprelu")

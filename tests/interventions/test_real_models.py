"""The same equivalences on the three embedded real models.

SmolLM2-135M-Instruct (Llama architecture, GQA 9/3), Gemma 3 270M (base; sliding-window
attention in 15 of 18 layers, one key/value head) and Qwen2.5-Coder-0.5B-Instruct (Qwen2: GQA
14/2, qkv biases, untied output matrix), all GGUF de-quantised to float32.
"""

from __future__ import annotations

import pytest
import torch

from bindscope.families import attention_windows
from tests.conftest import PROMPTS
from tests.reference import hf_eager_attentions, hf_greedy_under_pre_hooks, prob_zero
from tests.tolerance import assert_within, logit_bound, prob_bound, row_sum_bound

pytestmark = pytest.mark.slow
HEADS = {
    "smollm2": [(0, 3), (5, 0), (5, 8), (14, 4), (29, 2)],
    "gemma3_real": [(0, 3), (5, 0), (5, 2), (11, 1), (17, 3)],  # sliding 0, full 5, 11, 17
    "qwen_real": [(0, 3), (5, 0), (11, 13), (17, 7), (23, 2)],  # both kv groups (7 heads each)
}


@pytest.fixture(params=list(HEADS))
def real(request):
    return request.param, request.getfixturevalue(request.param)


def test_smollm2_loads_as_llama_with_gqa(smollm2):
    assert smollm2.family == "llama"
    dims = (smollm2.n_layers, smollm2.n_heads, smollm2.n_kv_heads, smollm2.head_dim)
    assert dims == (30, 9, 3, 64)
    assert smollm2.prepend_bos is False  # measured: this tokenizer adds no BOS


def test_gemma3_loads_as_gemma3_with_sliding_layers(gemma3_real):
    model = gemma3_real
    assert model.family == "gemma3"
    assert (model.n_layers, model.n_heads, model.n_kv_heads, model.head_dim) == (18, 4, 1, 256)
    windows = attention_windows(model.hf.config)
    assert [layer for layer, w in enumerate(windows) if w is None] == [5, 11, 17]
    assert set(windows) - {None} == {512}
    assert model.prepend_bos is True  # the Gemma tokenizer adds <bos>
    assert model.hf.lm_head.weight.shape[0] == 262_144


def test_qwen_loads_as_qwen2_with_biases_from_the_checked_gguf(qwen_real):
    from bindscope.loading import cache_dir
    from bindscope.loading.cache import manifest
    from bindscope.loading.embedded_models import QWEN_SHA256

    model = qwen_real
    assert model.family == "qwen2"
    dims = (model.n_layers, model.n_heads, model.n_kv_heads, model.head_dim, model.d_model)
    assert dims == (24, 14, 2, 64, 896)
    assert model.prepend_bos is False  # the Qwen tokenizer adds no BOS
    attention = model.hf.model.layers[0].self_attn
    assert all(getattr(attention, p).bias is not None for p in ("q_proj", "k_proj", "v_proj"))
    assert model.hf.lm_head.weight.shape == (151_936, 896)
    assert model.hf.lm_head.weight.data_ptr() != model.hf.model.embed_tokens.weight.data_ptr()
    facts = manifest(cache_dir() / "qwen2.5-coder-0.5b-instruct-Q4_K_M")
    assert facts["source_sha256"] == QWEN_SHA256  # the joined GGUF it was converted from
    assert model.weights_sha256 == facts["weights_sha256"]
    assert "AWQ" in model.training and "Apache-2.0" in model.training


def test_probs_equal_output_attentions(real):
    _, model = real
    batched = model.attention_probs(PROMPTS)
    bound = prob_bound(model)  # batching: summation order only
    for text, got in zip(PROMPTS, batched):
        ref = hf_eager_attentions(model, model.tokenize(text))
        assert_within(model.attention_probs([text])[0], ref, bound, "one prompt")
        assert_within(got, ref, bound, "left-padded batch")
        assert (got.sum(-1) - 1).abs().max() <= row_sum_bound(got.shape[-1])


def test_zero_ablation_equals_prob_zeroing_and_changes_logits(real):
    name, model = real
    text = PROMPTS[0]
    got = model.logits([text], ablate=HEADS[name])[0]
    with prob_zero(model.hf, HEADS[name]), torch.no_grad():
        ref = model.hf(torch.tensor([model.tokenize(text)])).logits[0]
    bound = logit_bound(model, [text])
    assert_within(got, ref, bound, "zero-ablation vs prob-zeroing")
    assert (got - model.logits([text])[0]).abs().max() > 100 * bound


def test_generation_under_ablation_equals_pre_hooks(real):
    name, model = real
    texts = ["The capital of France is", "Once upon a time"]
    got = model.generate_ids(texts, max_new_tokens=8, ablate=HEADS[name])
    for text, ids in zip(texts, got):
        assert ids == hf_greedy_under_pre_hooks(model, text, HEADS[name], 8)


def test_sites_equal_torch_hooks_and_steered_generation_matches(real):
    from bindscope.interventions import Steer
    from tests.interventions.test_sites import site_bound
    from tests.reference_sites import greedy_reference, hooked, site_reference

    _, model = real
    from bindscope.families import CALL_SITES

    # the attention call's sites are checked on every family in test_tl_sites.py
    sites = [s for s in model.sites if s not in ("pattern", *CALL_SITES)]
    last = model.n_layers - 1
    layers = [0, last // 2, last]
    got = model.capture(PROMPTS, sites=sites, layers=layers)
    for i, text in enumerate(PROMPTS):
        ids = model.tokenize(text)
        for site in sites:
            for layer in layers:
                ref = site_reference(model, ids, site, layer)
                bound = site_bound(model, ref, layer)
                assert_within(got[i][site][layer], ref, bound, f"{site} layer {layer}")
    layer = last // 2
    residual = got[0]["resid_post"][layer].norm(dim=-1).mean()  # the stream's own scale
    vector = torch.randn(model.d_model, generator=torch.Generator().manual_seed(0))
    vector = 0.5 * residual * vector / vector.norm()
    texts = ["The capital of France is", "Once upon a time"]
    steered = model.generate_ids(
        texts, max_new_tokens=8, intervene=Steer("resid_post", layer, vector)
    )
    for text, ids in zip(texts, steered):
        adding = hooked(model.hf, model.family, "resid_post", layer, edit=lambda x: x + vector)
        assert ids == greedy_reference(model, model.tokenize(text), 8, adding)
    assert steered != model.generate_ids(texts, max_new_tokens=8)  # the vector mattered


def test_logit_lens_equals_the_final_norm_and_unembedding_of_hf_hidden_states(real):
    _, model = real
    layers = [0, model.n_layers // 2, model.n_layers - 1]
    lens = model.logit_lens(PROMPTS[:2], layers, positions=None)  # every position
    norm = getattr(model.hf.model, model.family_row.final_norm)
    for text, got in zip(PROMPTS[:2], lens):
        with torch.no_grad():
            out = model.hf(torch.tensor([model.tokenize(text)]), output_hidden_states=True)
            # hidden_states[l + 1] is layer l's output; the last one has the final norm applied
            hidden = [out.hidden_states[layer + 1][0] for layer in layers[:-1]]
            ref = [model.hf.lm_head(norm(h)) for h in hidden] + [out.logits[0]]
        if model.logit_softcap is not None:
            ref[:-1] = [model.logit_softcap * torch.tanh(r / model.logit_softcap) for r in ref[:-1]]
        bound = logit_bound(model, [text])
        for i, layer in enumerate(layers):
            assert_within(got[i], ref[i], bound, f"logit lens layer {layer}")
        # negative control: another layer's logits are far outside the bound
        assert (got[1] - ref[0]).abs().max() > 100 * bound


def test_float64_passes_the_self_check_and_returns_float64():
    """--dtype float64 on the default model: the self-check bounds rows by the float32 of the
    eager softmax (issue 19.7), and probabilities and logits come back float64."""
    import bindscope

    wide = bindscope.load_model(dtype="float64")  # runs the self-check
    probs = wide.attention_probs([PROMPTS[0]])[0]
    assert probs.dtype == torch.float64 and wide.logits([PROMPTS[0]])[0].dtype == torch.float64
    assert (probs.sum(-1) - 1).abs().max() <= row_sum_bound(probs.shape[-1])

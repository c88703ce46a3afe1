"""The equivalences on the second real model, Gemma 3 270M (base; GGUF Q4_K_M, de-quantised)."""

from __future__ import annotations

import pytest
import torch

from bindscope.families import attention_windows
from tests.conftest import PROMPTS
from tests.reference import hf_eager_attentions, pre_hooks, prob_zero
from tests.tolerance import assert_within, logit_bound, prob_bound, row_sum_bound

pytestmark = pytest.mark.slow
HEADS = [(0, 3), (5, 0), (5, 2), (11, 1), (17, 3)]  # sliding (0) and full (5, 11, 17) layers


def test_loads_as_gemma3_with_sliding_layers(gemma3_real):
    model = gemma3_real
    assert model.family == "gemma3"
    assert (model.n_layers, model.n_heads, model.n_kv_heads, model.head_dim) == (18, 4, 1, 256)
    windows = attention_windows(model.hf.config)
    assert [layer for layer, w in enumerate(windows) if w is None] == [5, 11, 17]
    assert set(windows) - {None} == {512}
    assert model.prepend_bos is True  # the Gemma tokenizer adds <bos>
    assert model.hf.lm_head.weight.shape[0] == 262_144


def test_probs_equal_output_attentions(gemma3_real):
    model = gemma3_real
    batched = model.attention_probs(PROMPTS)
    bound = prob_bound(model)  # batching: summation order only
    for text, got in zip(PROMPTS, batched):
        ref = hf_eager_attentions(model, model.tokenize(text))
        assert_within(got, ref, bound, "left-padded batch")
        assert (got.sum(-1) - 1).abs().max() <= row_sum_bound(got.shape[-1])


def test_zero_ablation_equals_prob_zeroing_and_changes_logits(gemma3_real):
    model = gemma3_real
    text = PROMPTS[0]
    got = model.logits([text], ablate=HEADS)[0]
    with prob_zero(model.hf, HEADS), torch.no_grad():
        ref = model.hf(torch.tensor([model.tokenize(text)])).logits[0]
    bound = logit_bound(model, [text])
    assert_within(got, ref, bound, "zero-ablation vs prob-zeroing")
    assert (got - model.logits([text])[0]).abs().max() > 100 * bound


def test_generation_under_ablation_equals_pre_hooks(gemma3_real):
    model = gemma3_real
    text = "In web accessibility, a screen reader is"
    (got,) = model.generate_ids([text], max_new_tokens=8, ablate=HEADS)
    prompt = torch.tensor([model.tokenize(text)])
    with pre_hooks(model.hf, "gemma3", HEADS, 4, 256), torch.no_grad():
        ref = model.hf.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=8,
            do_sample=False,
            pad_token_id=model.tokenizer.pad_token_id,
        )[0, prompt.shape[1] :].tolist()
    eos = model.tokenizer.eos_token_id
    assert got == (ref[: ref.index(eos)] if eos in ref else ref)

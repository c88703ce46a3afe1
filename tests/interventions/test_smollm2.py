"""The same equivalences on the one real model, SmolLM2-135M-Instruct (GGUF, dequantised)."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import PROMPTS
from tests.reference import hf_eager_attentions, pre_hooks, prob_zero
from tests.tolerance import assert_within, logit_bound, prob_bound, row_sum_bound

pytestmark = pytest.mark.slow
HEADS = [(0, 3), (5, 0), (5, 8), (14, 4), (29, 2)]


def test_loads_as_llama_with_gqa(smollm2):
    assert smollm2.family == "llama"
    assert (smollm2.n_layers, smollm2.n_heads, smollm2.n_kv_heads, smollm2.head_dim) == (
        30,
        9,
        3,
        64,
    )
    assert smollm2.prepend_bos is False  # measured: this tokenizer adds no BOS


def test_probs_equal_output_attentions(smollm2):
    batched = smollm2.attention_probs(PROMPTS)
    bound = prob_bound(smollm2)  # batching: summation order only
    for text, got in zip(PROMPTS, batched):
        ref = hf_eager_attentions(smollm2, smollm2.tokenize(text))
        assert_within(smollm2.attention_probs([text])[0], ref, bound, "one prompt")
        assert_within(got, ref, bound, "left-padded batch")
        assert (got.sum(-1) - 1).abs().max() <= row_sum_bound(got.shape[-1])


def test_zero_ablation_equals_prob_zeroing_and_changes_logits(smollm2):
    text = PROMPTS[0]
    got = smollm2.logits([text], ablate=HEADS)[0]
    with prob_zero(smollm2.hf, HEADS), torch.no_grad():
        ref = smollm2.hf(torch.tensor([smollm2.tokenize(text)])).logits[0]
    bound = logit_bound(smollm2, [text])
    assert_within(got, ref, bound, "zero-ablation vs prob-zeroing")
    assert (got - smollm2.logits([text])[0]).abs().max() > 100 * bound


def test_generation_under_ablation_equals_pre_hooks(smollm2):
    texts = ["The capital of France is", "Once upon a time"]
    got = smollm2.generate_ids(texts, max_new_tokens=8, ablate=HEADS)
    for text, ids in zip(texts, got):
        prompt = torch.tensor([smollm2.tokenize(text)])
        with pre_hooks(smollm2.hf, "llama", HEADS, 9, 64), torch.no_grad():
            ref = smollm2.hf.generate(
                prompt,
                attention_mask=torch.ones_like(prompt),
                max_new_tokens=8,
                do_sample=False,
                pad_token_id=smollm2.tokenizer.pad_token_id,
            )
        ref = ref[0, prompt.shape[1] :].tolist()
        eos = smollm2.tokenizer.eos_token_id
        assert ids == (ref[: ref.index(eos)] if eos in ref else ref)


def test_float64_passes_the_self_check_and_returns_float64():
    """--dtype float64 on the default model: the self-check bounds rows by the float32 of the
    eager softmax (issue 19.7), and probabilities and logits come back float64."""
    import bindscope

    wide = bindscope.load_model(dtype="float64")  # runs the self-check
    probs = wide.attention_probs([PROMPTS[0]])[0]
    assert probs.dtype == torch.float64 and wide.logits([PROMPTS[0]])[0].dtype == torch.float64
    assert (probs.sum(-1) - 1).abs().max() <= row_sum_bound(probs.shape[-1])

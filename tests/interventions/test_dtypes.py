"""Half precision (float16, bfloat16), as GPU users run 1-3B models: the load-time self-check
passes, capture and ablation equal HF eager in the same dtype, and EB* stays near float32."""

from __future__ import annotations

import pytest
import torch

import bindscope
from bindscope.prompts import PromptRecord
from bindscope.runners.binding import binding
from bindscope.selfcheck import row_sum_tolerance
from tests.conftest import PROMPTS, tiny_config
from tests.reference import hf_eager_attentions, pre_hooks

HEADS = [(0, 1), (1, 0), (2, 2)]
RECORDS = [
    PromptRecord(
        "gen_001", "screen reader", "generation", "In web accessibility, a screen reader is"
    ),
    PromptRecord("gen_002", "alt text", "generation", "Alt text describes an image for people"),
]


def _half(family: str, tokenizer, dtype):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(sum(map(ord, family)))  # the same weights as build_tiny's float32 model
    hf = AutoModelForCausalLM.from_config(tiny_config(family), attn_implementation="eager")
    return bindscope.load_model(hf.eval().to(dtype), tokenizer=tokenizer)  # runs the self-check


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_half_precision_equals_hf_eager_and_keeps_eb_star(tiny, dtype):
    tok = tiny.tokenizer
    half = _half(tiny.family, tok, dtype)
    assert half.dtype == dtype
    for text in PROMPTS:
        ids = half.tokenize(text)
        # One unpadded prompt: bindscope and HF run the same kernels in the same dtype, so the
        # results agree to the last bit; the bound allows one rounding of the compared values.
        probs = half.attention_probs([text])[0]
        ref = hf_eager_attentions(half, ids)
        assert (probs - ref).abs().max() <= torch.finfo(dtype).eps
        assert (probs.sum(-1) - 1).abs().max() <= row_sum_tolerance(dtype, len(ids))
        got = half.logits([text], ablate=HEADS)[0]
        with pre_hooks(half.hf, half.family, HEADS, half.n_heads, half.head_dim), torch.no_grad():
            hooked = half.hf(torch.tensor([ids])).logits[0].float()
        one_rounding = torch.finfo(dtype).eps * float(hooked.abs().max())
        assert (got - hooked).abs().max() <= one_rounding
        # it ablated: bfloat16's 8-bit mantissa leaves room for one order of magnitude, not more
        assert (got - half.logits([text])[0]).abs().max() > 10 * one_rounding
    # EB* is a difference of means of probabilities in [0, 1]. Rounding every weight and
    # activation to the dtype moves each probability by a few units of the dtype's eps; 16 eps
    # (0.016 in float16, 0.125 in bfloat16) bounds the change against float32.
    full = binding(tiny, RECORDS, on_sink="keep")
    low = binding(half, RECORDS, on_sink="keep")
    for a, b in zip(full, low):
        assert abs(a.eb_star - b.eb_star) <= 16 * torch.finfo(dtype).eps


def test_self_check_bound_scales_with_dtype():
    assert row_sum_tolerance(torch.float32, 14) < 2e-6
    assert row_sum_tolerance(torch.bfloat16, 14) > 2.9e-3  # what bf16 rows were measured at
    assert row_sum_tolerance(torch.float16, 14) > 3.7e-4  # and fp16 rows


def test_float64_runs_end_to_end(tiny):
    """float64 weights give float64 probabilities and logits, the self-check passes with the
    bound of the dtype the softmax ran in, and the probabilities equal HF eager's."""
    from transformers import AutoModelForCausalLM

    from bindscope.selfcheck import softmax_dtype

    torch.manual_seed(sum(map(ord, tiny.family)))
    config = tiny_config(tiny.family)
    # GPT-2's reordered, upcast attention raises in float64 inside transformers (its softmax
    # must come out float32); GPT-2's own configs leave it off
    config.reorder_and_upcast_attn = False
    hf = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    wide = bindscope.load_model(hf.eval().to(torch.float64), tokenizer=tiny.tokenizer)
    text = PROMPTS[0]
    ids = wide.tokenize(text)
    probs = wide.attention_probs([text])[0]
    assert probs.dtype == torch.float64 and wide.logits([text])[0].dtype == torch.float64
    ran_in = softmax_dtype(torch.float64, wide.capture_method)
    assert (probs.sum(-1) - 1).abs().max() <= row_sum_tolerance(ran_in, len(ids))
    # same kernels, same dtype, one unpadded prompt: equal up to one rounding of the softmax
    ref = hf_eager_attentions(wide, ids)
    assert ref.dtype == torch.float64
    assert (probs - ref).abs().max() <= torch.finfo(ran_in).eps
    # a recomputed capture (sdpa) runs its softmax in float64 itself: the float64 bound holds
    assert softmax_dtype(torch.float64, "recompute") == torch.float64
    assert softmax_dtype(torch.float16, "eager") == torch.float16
    assert softmax_dtype(torch.float16, "recompute") == torch.float32


def test_float64_through_the_local_simulation(sp_tokenizer):
    """The remote probe bounds rows by the softmax's dtype too (float32 under eager)."""
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_config(tiny_config("llama"), attn_implementation="eager")
    wide = bindscope.load_model(hf.eval().to(torch.float64), tokenizer=sp_tokenizer,
                                remote="local")  # fmt: skip
    assert wide.attention_probs([PROMPTS[0]])[0].dtype == torch.float64


def test_float64_left_padding_equals_the_unpadded_run(tiny):
    """Issue 27 item 1: in float64 under eager attention a left-padded text's probabilities
    were NaN from layer 1 on (transformers' mask fill, float64's minimum, is -inf once the
    softmax casts to float32). Padded, they now equal the text run alone, and so do logits."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(sum(map(ord, tiny.family)))
    config = tiny_config(tiny.family)
    config.reorder_and_upcast_attn = False  # GPT-2's upcast attention refuses float64 (above)
    hf = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    wide = bindscope.load_model(hf.eval().to(torch.float64), tokenizer=tiny.tokenizer)
    long_text, short = PROMPTS[2], PROMPTS[1]
    assert len(wide.tokenize(long_text)) > len(wide.tokenize(short)) + 5  # really padded
    padded = wide.attention_probs([long_text, short])[1]
    alone = wide.attention_probs([short])[0]
    assert padded.dtype == torch.float64 and bool(torch.isfinite(padded).all())
    # The softmax runs in float32 under eager attention: one float32 rounding of a
    # probability (<= 1) bounds the difference between two batch shapes.
    assert (padded - alone).abs().max() <= torch.finfo(torch.float32).eps
    got = wide.logits([long_text, short])[1]
    ref = wide.logits([short])[0]
    assert bool(torch.isfinite(got).all())
    # logits inherit those float32-rounded probabilities: eps times their scale, with a
    # factor for the layers the rounding passes through
    scale = float(ref.abs().max())
    assert (got - ref).abs().max() <= 8 * wide.n_layers * torch.finfo(torch.float32).eps * scale
    # negative control: the long text's own last row is a different distribution by far
    other = wide.attention_probs([long_text])[0][:, :, -1, -padded.shape[-1] :]
    assert (other - padded[:, :, -1]).abs().max() > 1e4 * torch.finfo(torch.float32).eps

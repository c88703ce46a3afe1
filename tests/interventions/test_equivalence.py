"""Capture and ablation equal independent computations on every family."""

from __future__ import annotations

import torch

from bindscope.interventions import capture_probs, head_means, mean_ablate, ops, run_layers
from tests.conftest import PROMPTS
from tests.reference import hf_eager_attentions, hf_greedy_under_pre_hooks, pre_hooks, prob_zero
from tests.tolerance import assert_within, logit_bound, prob_bound, row_sum_bound

HEADS = [(0, 1), (1, 0), (1, 3), (2, 2)]


def test_probs_equal_hf_output_attentions_single_and_batched(tiny):
    batched = tiny.attention_probs(PROMPTS)  # one left-padded batch
    bound = prob_bound(tiny)  # batching changes kernel shapes, so summation order: rounding only
    for text, got in zip(PROMPTS, batched):
        single = tiny.attention_probs([text])[0]
        ref = hf_eager_attentions(tiny, tiny.tokenize(text))
        assert (
            got.shape == ref.shape == (tiny.n_layers, tiny.n_heads, len(ref[0, 0]), len(ref[0, 0]))
        )
        assert_within(single, ref, bound, "one prompt")
        assert_within(got, ref, bound, "left-padded batch")
        assert (got.sum(-1) - 1).abs().max() <= row_sum_bound(got.shape[-1])
        assert got.triu(1).abs().max() == 0
    # attention is peaked, so the comparisons above could fail
    assert batched[2].max(-1).values.mean() > 0.3


def test_layers_argument_selects_and_orders(tiny):
    full = tiny.attention_probs(PROMPTS[:1])[0]
    some = tiny.attention_probs(PROMPTS[:1], layers=[2, 0])[0]
    assert torch.equal(some, full[[0, 2]])


def test_zero_ablation_equals_prob_zeroing(tiny):
    ablated = tiny.logits(PROMPTS, ablate=HEADS)
    clean = tiny.logits(PROMPTS)
    bound = logit_bound(tiny, PROMPTS)  # batched vs unbatched, custom vs built-in attention
    for text, got, base in zip(PROMPTS, ablated, clean):
        with prob_zero(tiny.hf, HEADS), torch.no_grad():
            ref = tiny.hf(torch.tensor([tiny.tokenize(text)])).logits[0]
        assert_within(got, ref, bound, text)
        assert (got - base).abs().max() > 100 * bound  # the ablation did something


def test_no_ablation_is_bit_identical(tiny):
    for text in PROMPTS:
        ids = tiny.tokenize(text)
        with torch.no_grad():
            plain = tiny.hf(torch.tensor([ids])).logits[0]
        assert torch.equal(tiny.logits([text], ablate=[])[0], plain)


def test_per_row_head_sets_equal_separate_runs(tiny):
    rows = [HEADS[:2], [], HEADS[2:]]
    batch = tiny.encode(PROMPTS)
    with torch.no_grad(), tiny.nnsight.trace(**batch.inputs):
        run_layers(tiny, plan=ops.head_plan(tiny, per_row=rows))
        logits = ops.final_logits(tiny).save()
    bound = logit_bound(tiny, PROMPTS)  # one batch vs separate runs: summation order only
    for r, (text, heads) in enumerate(zip(PROMPTS, rows)):
        alone = tiny.logits([text], ablate=heads)[0]
        assert_within(logits[r, batch.pad(r) :], alone, bound, text)


def test_capture_and_ablation_compose_in_one_trace(tiny):
    batch = tiny.encode(PROMPTS[:2])
    probs = []
    with tiny.eager(), torch.no_grad(), tiny.nnsight.trace(**batch.inputs):
        for layer in range(tiny.n_layers):
            run_layers(tiny, plan=ops.head_plan(tiny, [(0, 1)]), only_layers=[layer])
            probs.append(capture_probs(tiny, [layer])[layer])
    reference = tiny.attention_probs(PROMPTS[:2], ablate=[(0, 1)])
    bound = prob_bound(tiny)
    for r in range(2):
        pad = batch.pad(r)
        got = torch.stack([p[r, :, pad:, pad:] for p in probs])
        assert_within(got, reference[r], bound, f"row {r}")
    clean = tiny.attention_probs(PROMPTS[:1])[0]
    # layer 0 is upstream of its own ablation; batch of 2 vs 1 only (Gemma: an ulp or two)
    eps = torch.finfo(torch.float32).eps
    torch.testing.assert_close(reference[0][0], clean[0], rtol=0, atol=4 * eps)
    assert (reference[0][1:] - clean[1:]).abs().max() > 100 * bound  # later layers changed


def test_recompute_fallback_matches_eager(tiny):
    from transformers import AutoModelForCausalLM  # noqa: F401  (sdpa model switch below)

    eager = tiny.attention_probs(PROMPTS)
    previous = tiny.attn_implementation
    try:
        tiny.hf.set_attn_implementation("sdpa")
    except ValueError:  # Gemma 2 has no sdpa: force the recompute path under eager
        tiny.capture_fallback = "no sdpa in this family"
    try:
        assert tiny.capture_mode == "recompute"
        batch = tiny.encode(PROMPTS)
        with torch.no_grad(), tiny.nnsight.trace(**batch.inputs):
            found = capture_probs(tiny)
        bound = prob_bound(tiny)  # sdpa's q and k, recomputed in float: rounding only
        for r, ref in enumerate(eager):
            pad = batch.pad(r)
            got = torch.stack([found[layer][r, :, pad:, pad:] for layer in sorted(found)])
            assert_within(got, ref, bound, f"row {r}")
    finally:
        tiny.capture_fallback = None
        tiny.hf.set_attn_implementation(previous)


def test_generation_under_ablation_equals_pre_hooks(tiny):
    texts = PROMPTS[:2]
    got = tiny.generate_ids(texts, max_new_tokens=6, ablate=HEADS)
    clean = tiny.generate_ids(texts, max_new_tokens=6)
    for text, ids in zip(texts, got):
        assert ids == hf_greedy_under_pre_hooks(tiny, text, HEADS, 6)
    assert got != clean or tiny.family == "never"  # ablation changed some continuation


def test_mean_ablation_equals_pre_hook_replacement(tiny):
    means = head_means(tiny, PROMPTS, HEADS)
    assert means.n_positions == sum(len(tiny.tokenize(t)) for t in PROMPTS)
    batch = tiny.encode(PROMPTS[:1])
    with torch.no_grad(), tiny.nnsight.trace(**batch.inputs):
        mean_ablate(tiny, HEADS, means)
        logits = ops.final_logits(tiny).save()
    with (
        pre_hooks(tiny.hf, tiny.family, HEADS, tiny.n_heads, tiny.head_dim, means.means),
        torch.no_grad(),
    ):
        ref = tiny.hf(batch.input_ids).logits
    bound = logit_bound(tiny, PROMPTS[:1])
    assert_within(logits, ref, bound, "mean ablation vs pre-hook")
    zeroed = tiny.logits(PROMPTS[:1], ablate=HEADS)[0]
    assert (logits[0] - zeroed).abs().max() > 100 * bound  # mean is not zero

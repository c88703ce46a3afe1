"""BSI/EB/EB* equal a direct computation from full probabilities, on every family."""

from __future__ import annotations

import math

import pytest
import torch

from bindscope.errors import SpanNotFoundError
from bindscope.metrics.binding import BindingResult, summarize
from bindscope.prompts import PromptRecord, locate
from bindscope.runners.binding import binding
from tests.reference import hf_eager_attentions
from tests.tolerance import prob_bound, rounding_bound

RECORDS = [
    PromptRecord(
        "gen_001",
        "screen reader",
        "generation",
        "In web accessibility, a screen reader is",
        max_tokens=5,
    ),
    PromptRecord(
        "gen_002",
        "color contrast",
        "generation",
        "Developers should test color contrast and heading structure.",
        max_tokens=5,
    ),
    PromptRecord(
        "gen_003",
        "screen reader",
        "generation",
        "In web accessibility, a screen reader is software",
        max_tokens=5,
    ),  # same prefix
    PromptRecord(
        "gen_004",
        "landmark region",
        "generation",
        "Developers should test landmark regions and heading structure.",
        max_tokens=5,
    ),
    PromptRecord(
        "rec_001",
        "alt text",
        "recognition",
        "Alt text describes an image for people",
        choices=("x", "y"),
        answer_idx=0,
    ),
]


def direct(model, record):
    """BSI by explicit loops over pairs on HF eager output_attentions of the whole prompt."""
    span = locate(model, record.template, record.term).indices
    probs = hf_eager_attentions(model, model.tokenize(record.template))
    bsi = torch.zeros(model.n_layers, model.n_heads)
    pairs = [(a, b) for a in span for b in span if a > b]
    for layer in range(model.n_layers):
        for head in range(model.n_heads):
            bsi[layer, head] = sum(float(probs[layer, head, a, b]) for a, b in pairs) / len(pairs)
    eb = [float(bsi[i].max() - bsi[i].mean()) for i in range(model.n_layers)]
    best = max(range(len(eb)), key=lambda i: (eb[i], -i))
    p = [max(float(x), 1e-10) for x in bsi[best]]
    p = [x / sum(p) for x in p]
    return bsi, eb, best, -sum(x * math.log(x) for x in p), span


def test_binding_equals_direct_computation(tiny):
    results = binding(tiny, RECORDS, batch_size=3, on_sink="keep")  # padded batches; the sink too
    # BSI is a mean of probabilities and EB a difference of two such means: each is off by at
    # most the probabilities' rounding bound (batched capture vs one unpadded HF run).
    bound = prob_bound(tiny)
    multi = 0
    for record, result in zip(RECORDS, results):
        assert result.key == record.key
        span = locate(tiny, record.template, record.term).indices
        if len(span) < 2:
            assert math.isnan(result.eb_star) and "single_token" in result.flags
            continue
        multi += 1
        bsi, eb, best, entropy, span = direct(tiny, record)
        assert result.span == tuple(span)
        assert (result.bsi - bsi).abs().max() <= bound
        assert max(abs(a - b) for a, b in zip(result.eb.tolist(), eb)) <= 2 * bound
        assert result.best_layer == best
        assert abs(result.eb_star - eb[best]) <= 2 * bound
        # entropy over the heads' normalised BSI: each term's error is d(p log p) = (log p + 1) dp,
        # with p floored at 1e-10 (|log p| <= 23), over n_heads terms, normalisation doubling it
        assert abs(result.entropy - entropy) <= 2 * 24 * tiny.n_heads * bound
        eb_norm = eb[best] / (1 - 1 / tiny.n_heads)
        assert abs(result.eb_star_norm - eb_norm) <= 2 * bound / (1 - 1 / tiny.n_heads)
    assert multi >= 3


def test_prefix_invariance_makes_shared_prefixes_identical(tiny):
    a, b = binding(tiny, [RECORDS[0], RECORDS[2]])
    assert torch.equal(a.bsi, b.bsi)


def test_ablation_changes_binding_downstream_only(tiny):
    clean = binding(tiny, RECORDS[:1])[0]
    ablated = binding(tiny, RECORDS[:1], ablate=[(0, 0), (0, 1)])[0]
    assert torch.equal(clean.bsi[0], ablated.bsi[0])
    assert (clean.bsi[1:] - ablated.bsi[1:]).abs().max() > 1e-4


def test_single_token_span_is_nan_never_zero():
    bsi = torch.full((3, 4), float("nan"))
    s = summarize(bsi)
    assert math.isnan(s.eb_star) and s.best_layer == -1


def test_summary_on_hand_made_bsi():
    bsi = torch.tensor([[0.1, 0.1, 0.1, 0.1], [0.9, 0.1, 0.1, 0.1], [0.5, 0.5, 0.5, 0.5]])
    s = summarize(bsi)
    assert s.best_layer == 1
    assert s.eb_star == pytest.approx(0.9 - 0.3)
    assert s.eb_star_norm == pytest.approx(0.6 / 0.75)
    assert s.eb[0] == 0 and s.eb[2] == 0
    p = torch.tensor([0.9, 0.1, 0.1, 0.1]) / 1.2
    # float32 entropy of 4 terms against the same sum in another order: rounding only
    within = rounding_bound(magnitude=float(p.log().abs().max()), width=4, depth=1)
    assert s.entropy == pytest.approx(float(-(p * p.log()).sum()), abs=within)


def test_missing_term_errors_or_skips_with_reason(tiny):
    bad = PromptRecord(
        "gen_009", "tree grid", "generation", "Nothing relevant here at all", max_tokens=3
    )
    with pytest.raises(SpanNotFoundError, match="tree grid/gen_009"):
        binding(tiny, [bad])
    good, skipped = binding(tiny, [RECORDS[0], bad], on_missing="skip")
    assert not good.skipped and "not found" in skipped.skipped
    assert math.isnan(skipped.eb_star) and skipped.to_dict()["eb_star"] is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_binding_result_to_dict_writes_the_record_fields_in_order(dtype):
    bsi = torch.tensor([[0.25, float("nan")], [0.5, 0.125]], dtype=dtype)
    eb = torch.tensor([float("nan"), 0.375], dtype=dtype)
    result = BindingResult(
        "t/p",
        "p",
        "t",
        "generation",
        None,
        0.375,
        0.75,
        1,
        eb,
        bsi,
        float("nan"),
        (2, 3),
        ("▁a", "b"),
        ("bos",),
        None,
    )
    want = {
        "key": "t/p",
        "prompt_id": "p",
        "term": "t",
        "task": "generation",
        "control_group": None,
        "eb_star": 0.375,
        "eb_star_norm": 0.75,
        "best_layer": 1,
        "entropy": None,
        "n_span": 2,
        "span": [2, 3],
        "span_tokens": ["▁a", "b"],
        "flags": ["bos"],
        "skipped": None,
        "eb": [None, 0.375],
        "bsi": [[0.25, None], [0.5, 0.125]],
    }
    got = result.to_dict()
    assert list(got) == list(want) and got == want

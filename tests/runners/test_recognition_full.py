"""Recognition's reference strategy (``full``) runs the LM head only where a score reads it.

It is what a remote model runs; its scores still equal one unbatched forward per choice.
"""

from __future__ import annotations

import pytest

from bindscope.runners import attribution_metrics
from bindscope.runners.behaviour import recognition
from bindscope.runners.prefix import keeps_logits
from tests.metrics.test_behaviour import REC, head_rows, one_forward_per_choice
from tests.tolerance import logit_bound

HEADS = [(1, 0), (2, 3)]


def _bound(model) -> float:
    """A mean choice log-prob is a log-softmax of logits: each moves by at most twice the
    logits' largest rounding error (the logit and the log-sum-exp)."""
    texts = [r.template + " " + c for r in REC for c in r.choices or ()]
    return 2 * logit_bound(model, texts)


def _max_diff(model, got) -> float:
    per_record = [[], HEADS, []]
    refs = [one_forward_per_choice(model, r, hs) for r, hs in zip(REC, per_record)]
    return max(abs(a - b) for res, ref in zip(got, refs) for a, b in zip(res.scores, ref))


def _one_position_early(metric_terms):
    """The fault: every score reads the logits one position before its own."""

    def early(metrics, ids, *, every_logit=False):
        terms, keep = metric_terms(metrics, ids, every_logit=every_logit)
        index, target, weight = terms["logprob"]
        terms["logprob"] = ((index - 1).clamp(min=0), target, weight)
        return terms, keep

    return early


def test_full_strategy_keeps_only_the_scored_logits(tiny, monkeypatch):
    """Every family: the LM head runs on each sequence's last ``longest choice + 1``
    positions; the scores equal one forward per choice within the float32 bound, and reading
    one position early misses that bound by more than 100x."""
    if not keeps_logits(tiny):
        pytest.skip(f"{tiny.family}: forward takes no logits_to_keep")
    per_record = [[], HEADS, []]
    rows, got = head_rows(
        tiny,
        monkeypatch,
        lambda: recognition(tiny, REC, per_row=per_record, strategy="full", batch_size=1),
    )
    lengths = [
        [len(tiny.tokenizer(" " + c, add_special_tokens=False)["input_ids"]) for c in r.choices]
        for r in REC
    ]
    assert sorted(rows) == sorted(len(n) * (max(n) + 1) for n in lengths)  # batches by length
    bound = _bound(tiny)
    assert _max_diff(tiny, got) <= bound
    early = _one_position_early(attribution_metrics.metric_terms)
    monkeypatch.setattr(attribution_metrics, "metric_terms", early)
    wrong = recognition(tiny, REC, per_row=per_record, strategy="full", batch_size=1)
    assert _max_diff(tiny, wrong) > 100 * bound

"""Head-taxonomy scores reduced in the trace equal the same scores from HF full probabilities."""

from __future__ import annotations

import torch

from bindscope.metrics.taxonomy import repeated_scores_from_probs, scores_from_probs
from bindscope.runners.taxonomy_scores import repeated_scores, text_scores
from tests.reference import hf_eager_attentions
from tests.tolerance import assert_within, misses, prob_bound

# different lengths, so the batch is left-padded (one row unpadded, the others not)
TEXTS = [
    "Alt text",
    "In web accessibility, a screen reader is software that reads the page aloud.",
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Focus indicators show which element has keyboard focus.",
    "A",
]


def spread_bound(probs: torch.Tensor, delta: float) -> float:
    """Bound for the participation ratio PR = 1/S, S = sum_k p_k^2.

    ``prob_bound`` is a quarter of the scores' error, so |ds| <= 4 delta; a softmax's error
    is relative, |dp_k| = p_k |ds_k - sum_j p_j ds_j| <= 8 delta p_k, so |dS| <= 2 sum_k p_k
    |dp_k| <= 16 delta S and |d(1/S)| = |dS| / S^2 <= 16 delta PR: per query, hence for the
    mean over queries, at most 16 delta max(PR).
    """
    ratio = 1.0 / (probs.double() ** 2).sum(-1)
    return 16 * delta * float(ratio.max())


def check(got: torch.Tensor, ref: torch.Tensor, bound: float, what: str, errors: list) -> None:
    diff = float((got.double() - ref).abs().max())
    errors.append((what, diff, bound))
    assert_within(got.double(), ref.double(), bound, what)
    # negative control: the same score of another head (heads rolled by one) is an order of
    # magnitude or more beyond the bound
    wrong = misses(got.double().roll(1, dims=1), ref, bound)
    assert wrong > 10, f"{what}: a wrong head is within {wrong:.1f} bounds ({bound:.2e})"


def test_text_scores_equal_full_probabilities(tiny):
    delta = prob_bound(tiny)
    got = text_scores(tiny, TEXTS, batch_size=len(TEXTS))
    errors: list = []
    for text, scores in zip(TEXTS, got):
        probs = hf_eager_attentions(tiny, tiny.tokenize(text))
        ref = scores_from_probs(probs)
        if probs.shape[-1] < 2:  # one token: every score undefined
            assert all(torch.isnan(scores[s]).all() for s in ("sink", "previous_token", "spread"))
            continue
        check(scores["sink"], ref["sink"], delta, f"{tiny.family} sink", errors)
        check(scores["previous_token"], ref["previous_token"], delta, "previous_token", errors)
        check(scores["spread"], ref["spread"], spread_bound(probs, delta), "spread", errors)
    _report(tiny.family, errors)


def _report(family: str, errors: list) -> None:
    """Print the largest difference and its bound per score (``pytest -s`` shows them)."""
    worst: dict[str, tuple[float, float]] = {}
    for what, diff, bound in errors:
        name = what.split()[-1]
        if diff / bound > worst.get(name, (0.0, 1.0))[0] / worst.get(name, (0.0, 1.0))[1]:
            worst[name] = (diff, bound)
    print(family, " ".join(f"{n}: {d:.1e} (bound {b:.1e})" for n, (d, b) in worst.items()))


def test_repeated_scores_equal_full_probabilities(tiny):
    delta = prob_bound(tiny)
    got, tokens = repeated_scores(tiny, n=3, length=8, seed=1)
    start = 1 if tiny.prepend_bos else 0
    assert all(len(set(t)) == 8 for t in tokens)
    _, same = repeated_scores(tiny, n=3, length=8, seed=1)
    assert same == tokens  # seeded
    errors: list = []
    for scores, toks in zip(got, tokens):
        ids = [tiny.tokenizer.bos_token_id] * start + toks + toks
        probs = hf_eager_attentions(tiny, ids)
        ref = repeated_scores_from_probs(probs, start=start, length=8)
        for name in ("induction", "duplicate_token"):
            check(scores[name], ref[name], delta, f"{tiny.family} {name}", errors)
    _report(tiny.family, errors)

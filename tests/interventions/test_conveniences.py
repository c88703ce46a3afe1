"""What a new user reached for: Knockout edges from a term span, and the patching metrics."""

from __future__ import annotations

import pytest
import torch

from bindscope.errors import InterventionError, SpanNotFoundError
from bindscope.interventions import Knockout
from bindscope.metrics import logit_diff, token_loss
from bindscope.prompts import locate
from tests.conftest import build_tiny

TEXTS = [
    "In web accessibility, a screen reader is software that reads the page aloud.",
    "A screen reader reads alt text",
]
HEADS = [(0, 1), (1, 0), (2, 3)]


@pytest.fixture(scope="module")
def model(byte_tokenizer):
    return build_tiny("qwen2", byte_tokenizer)


def test_knockout_from_a_term_span_equals_the_edges_built_by_hand(model):
    spans = [locate(model, t, "screen reader").indices for t in TEXTS]
    within = [[(q, k) for q in s for k in s if k < q] for s in spans]
    assert all(within)  # a multi-token term: there are edges to remove
    got = model.logits(TEXTS, intervene=Knockout(HEADS, term="screen reader"))
    ref = model.logits(TEXTS, per_row=[Knockout(HEADS, e) for e in within])
    assert all(torch.equal(a, b) for a, b in zip(got, ref))
    last = [[(len(model.tokenize(t)) - 1, k) for k in s] for t, s in zip(TEXTS, spans)]
    got = model.logits(TEXTS, intervene=Knockout(HEADS, term="screen reader", query=-1))
    ref = model.logits(TEXTS, per_row=[Knockout(HEADS, e) for e in last])
    assert all(torch.equal(a, b) for a, b in zip(got, ref))
    clean = model.logits(TEXTS)
    assert any(not torch.equal(a, b) for a, b in zip(got, clean))


def test_knockout_term_errors(model):
    with pytest.raises(SpanNotFoundError, match="#1"):
        model.logits(
            ["a screen reader", "no term here"], intervene=Knockout(HEADS, term="screen reader")
        )
    with pytest.raises(InterventionError, match="not both"):
        Knockout(HEADS, [(3, 1)], term="screen reader")
    with pytest.raises(InterventionError, match="query= goes with term="):
        Knockout(HEADS, [(3, 1)], query=2)
    with pytest.raises(InterventionError, match="token-id list"):
        model.logits([model.tokenize(TEXTS[0])], intervene=Knockout(HEADS, term="screen reader"))


def test_logit_diff_and_token_loss_equal_hand_computations(model):
    text = TEXTS[0]
    ids = model.tokenize(text)
    logits = model.logits([text])[0]
    a, b = ids[3], ids[4]
    assert logit_diff(logits, a, b) == pytest.approx(float(logits[-1, a] - logits[-1, b]))
    assert logit_diff(logits, a, b, position=2) == -logit_diff(logits, b, a, position=2)
    loss = token_loss(logits, ids)
    ref = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(ids[1:]), reduction="none")
    torch.testing.assert_close(loss, ref)
    with pytest.raises(ValueError, match="logit rows"):
        token_loss(logits, ids[:-1])


def test_knockout_of_every_head_of_some_layers_equals_listing_them(model):
    n = len(model.tokenize(TEXTS[1]))
    edges = [(n - 1, 1), (n - 2, 0)]
    listed = [(layer, h) for layer in (0, 2) for h in range(model.n_heads)]
    short = model.logits(TEXTS[1:], intervene=Knockout(layers=[0, 2], edges=edges))[0]
    assert torch.equal(short, model.logits(TEXTS[1:], intervene=Knockout(listed, edges))[0])


def test_position_bound_edits_of_a_one_token_prompt_stay_in_the_prompt(model):
    """A Steer at position 0 of a one-token prompt acts on the prompt pass only, not on
    every generated token (which would happen if one column meant every position): equal
    to a hook that adds the vector in the first forward call only."""
    from bindscope.interventions import Steer
    from tests.reference_sites import greedy_reference, hooked

    prompt = model.tokenize(TEXTS[1])[:1]
    vector = 4.0 * torch.randn(model.d_model, generator=torch.Generator().manual_seed(5))
    got = model.generate_ids(
        [prompt], max_new_tokens=4, intervene=Steer("resid_post", 1, vector, positions=[0])
    )[0]
    calls = []

    def first_only(x):
        calls.append(1)
        return x + vector if len(calls) == 1 else x

    adding = hooked(model.hf, model.family, "resid_post", 1, edit=first_only)
    assert got == greedy_reference(model, prompt, 4, adding)
    every = model.generate_ids([prompt], max_new_tokens=4, intervene=Steer("resid_post", 1, vector))
    assert every[0] != got  # steering every step too generates something else

"""Planted heads are scored and classified as what they were wired to be."""

from __future__ import annotations

import pytest
import torch

from bindscope.metrics.taxonomy import classify
from bindscope.runners.taxonomy_scores import repeated_scores, text_scores
from tests.conftest import CORPUS
from tests.metrics.planted_heads import INDUCTION, PREV, SINK, planted_model


@pytest.fixture(scope="module")
def planted(byte_tokenizer):
    return planted_model(byte_tokenizer)


@pytest.fixture(scope="module")
def means(planted):
    texts = text_scores(planted, CORPUS, batch_size=4)  # left-padded batches
    repeated, _ = repeated_scores(planted, n=6, length=12, seed=0)
    out = {}
    for name in ("sink", "previous_token", "spread"):
        out[name] = torch.stack([s[name] for s in texts]).mean(0)
    for name in ("induction", "duplicate_token"):
        out[name] = torch.stack([s[name] for s in repeated]).mean(0)
    return out


def test_previous_token_head_scores_one_and_is_classified(means):
    assert means["previous_token"][PREV] > 0.99
    assert means["spread"][PREV] < 1.01  # one key per query
    classes = classify({k: v.tolist() for k, v in means.items()})
    layer, head = PREV
    assert "previous_token" in classes["labels"][layer][head]
    assert classes["counts"]["previous_token"] == 1  # no other head is


def test_sink_head_attends_to_position_0_and_is_classified(planted, means):
    assert not planted.prepend_bos  # position 0 is the text's first token, not a BOS
    assert means["sink"][SINK] > 0.99
    classes = classify({k: v.tolist() for k, v in means.items()})
    layer, head = SINK
    assert classes["labels"][layer][head] == ["sink"]
    assert classes["counts"]["sink"] == 1


def test_two_layer_induction_circuit_is_found(means):
    assert means["induction"][INDUCTION] > 0.9
    others = means["induction"].clone()
    others[INDUCTION] = 0
    assert others.max() < 0.1
    classes = classify({k: v.tolist() for k, v in means.items()})
    assert classes["primary"][INDUCTION[0]][INDUCTION[1]] == "induction"
    # the circuit's previous-token head, one layer below, is found as such
    assert classes["primary"][PREV[0]][PREV[1]] == "previous_token"

"""Every read of a site goes where the edits write: a family that moves ``head_out``.

The moved model is the tiny Llama with each output projection wrapped: the wrapper doubles
its input and the wrapped projection has half the weights, so the model computes what the
original computes, but the head outputs the family row names (the wrapped projection's
input) are twice the wrapper's input, where the fixed Llama path would read. Scans, head
means and attributions on the moved model must then equal those on the original, each
read through the family's sites; means read at the fixed path and written at the site
miss by a factor of two.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import bindscope
from bindscope.families import At, Family, Sites, family_for_config
from bindscope.interventions import Mean, Resample, Zero, head_means
from bindscope.runners.attribution import head_attribution
from bindscope.runners.attribution_patching import LogitDifference, head_attribution_patching
from bindscope.runners.scan import ScoredSequence, condition_scores
from tests.conftest import PROMPTS, tiny_config
from tests.tolerance import logit_bound

HEADS = [(0, 1), (1, 2), (2, 3)]
MARGIN = 100  # orders of magnitude between float32 noise and a misplaced read


class _Doubled(nn.Module):
    """``proj(2 x)`` with ``proj`` the original projection at half weight: the same map."""

    def __init__(self, original: nn.Linear) -> None:
        super().__init__()
        self.proj = nn.Linear(
            original.in_features, original.out_features, original.bias is not None
        )
        with torch.no_grad():
            self.proj.weight.copy_(original.weight / 2)
            if original.bias is not None:
                self.proj.bias.copy_(original.bias)

    def forward(self, x):
        return self.proj(2 * x)


def _pair(tokenizer):
    """The tiny Llama and its copy whose family row moves head_out into the wrapper."""
    from transformers import AutoModelForCausalLM

    models = []
    for moved in (False, True):
        torch.manual_seed(7)
        hf = AutoModelForCausalLM.from_config(tiny_config("llama"), attn_implementation="eager")
        if not moved:
            models.append(bindscope.load_model(hf.eval(), tokenizer=tokenizer))
            continue
        for layer in hf.model.layers:
            layer.self_attn.o_proj = _Doubled(layer.self_attn.o_proj)
        row = family_for_config(hf.config)
        family = Family(
            "llama_moved",
            row.model_types,
            dict(row.rename),
            sites=Sites(head_out=At("self_attn.o_proj.proj", "input")),
        )
        models.append(bindscope.load_model(hf.eval(), tokenizer=tokenizer, family=family))
    return models


@pytest.fixture(scope="module")
def pair(sp_tokenizer):
    return _pair(sp_tokenizer)


def test_the_moved_model_is_the_same_model(pair):
    original, moved = pair
    bound = logit_bound(original, PROMPTS)
    for a, b in zip(original.logits(PROMPTS), moved.logits(PROMPTS)):
        assert (a - b).abs().max() <= bound
    # the site the row names holds twice what the fixed path holds
    assert moved.sites["head_out"] == ("self_attn.o_proj.proj", "input", 0)


def test_head_means_are_read_where_mean_writes(pair):
    original, moved = pair
    bound = logit_bound(original, PROMPTS)
    means = [head_means(m, PROMPTS, HEADS) for m in pair]
    # read at the moved site the means are twice the wrapper input's (the original's)
    for layer, _ in HEADS:
        torch.testing.assert_close(means[1].means[layer], 2 * means[0].means[layer])
    want = original.logits(PROMPTS, intervene=Mean(HEADS, means[0]))
    got = moved.logits(PROMPTS, intervene=Mean(HEADS, means[1]))
    clean = original.logits(PROMPTS)
    for w, g, c in zip(want, got, clean):
        assert (w - g).abs().max() <= bound
        assert (w - c).abs().max() > MARGIN * bound  # the means change the logits
    # negative control: means read at the fixed path (the original's) written at the site
    wrong = moved.logits(PROMPTS, intervene=Mean(HEADS, means[0]))
    assert max(float((w - x).abs().max()) for w, x in zip(want, wrong)) > MARGIN * bound


def test_scans_read_where_the_edits_write(pair):
    original, moved = pair
    ids = [original.tokenize(p) for p in PROMPTS]
    sequences = [ScoredSequence(i, 2) for i in ids]
    donors = [ScoredSequence(i, 2) for i in ids[1:] + ids[:1]]
    conditions = [[h] for h in HEADS]
    bound = logit_bound(original, PROMPTS)
    for options in ({}, {"donors": donors}, {"strategy": "naive", "donors": donors}):
        _, want = condition_scores(original, sequences, conditions, batch_size=2, **options)
        _, got = condition_scores(moved, sequences, conditions, batch_size=2, **options)
        assert np.abs(want - got).max() <= bound, options
    means = [head_means(m, PROMPTS, HEADS) for m in pair]
    _, want = condition_scores(original, sequences, conditions, means=means[0], batch_size=2)
    _, got = condition_scores(moved, sequences, conditions, means=means[1], batch_size=2)
    assert np.abs(want - got).max() <= bound


def test_attributions_read_where_the_edits_write(pair):
    original, moved = pair
    for model in pair:
        model.hf.requires_grad_(True)
    bound = logit_bound(original, PROMPTS)
    metric = LogitDifference(5, 7)
    for make in (
        lambda m: Zero(HEADS),
        lambda m: Mean(HEADS, head_means(m, PROMPTS, HEADS)),
        lambda m: Resample(HEADS, PROMPTS, seed=3),
    ):
        want, got = (head_attribution_patching(m, PROMPTS, metric, intervene=make(m)) for m in pair)
        for w, g in zip(want, got):
            torch.testing.assert_close(g, w, rtol=0, atol=bound, equal_nan=True)
    # direct logit attribution multiplies the head outputs by the projection they enter
    want = head_attribution(original, PROMPTS, [(5, 7)] * len(PROMPTS))
    got = head_attribution(moved, PROMPTS, [(5, 7)] * len(PROMPTS))
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, rtol=0, atol=bound)

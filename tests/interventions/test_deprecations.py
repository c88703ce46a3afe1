"""One name per thing: the removed spellings are gone, and their replacements stay."""

from __future__ import annotations

import pytest
import torch

import bindscope.interventions as interventions
from bindscope.errors import HeadSpecError, InterventionError
from bindscope.interventions import SiteMeans, head_means, mean_ablate, ops, site_means
from tests.conftest import PROMPTS, build_tiny

HEADS = [(0, 1), (2, 2)]


@pytest.fixture(scope="module")
def llama(sp_tokenizer):
    return build_tiny("llama", sp_tokenizer, self_check=False)


@pytest.mark.parametrize("name", ["zero_ablate", "capture_attention", "HeadMeans"])
def test_the_removed_names_are_gone(name):
    with pytest.raises(AttributeError):
        getattr(interventions, name)
    with pytest.raises(AttributeError):
        getattr(ops, name)
    assert name not in interventions.__all__ and name not in ops.__all__


def test_mean_ablate_takes_heads_then_means_only(llama):
    means = head_means(llama, PROMPTS, HEADS)
    batch = llama.encode(PROMPTS[:2])
    with (
        pytest.raises(HeadSpecError, match=r"is not a list of \(layer, head\) pairs"),
        torch.no_grad(),
        llama.nnsight.trace(**batch.inputs),
    ):
        mean_ablate(llama, means, HEADS)  # the older (model, means, heads) order


def test_intervene_head_pairs_are_refused_and_name_zero_while_the_shortcut_works(llama):
    with pytest.raises(InterventionError, match=r"intervene=Zero\(\[\.\.\.\]\).*ablate="):
        llama.logits(PROMPTS[:1], intervene=HEADS)
    shortcut = llama.logits(PROMPTS[:1], ablate=HEADS)
    assert torch.equal(
        shortcut[0], llama.logits(PROMPTS[:1], intervene=interventions.Zero(HEADS))[0]
    )
    llama.logits(PROMPTS[:2], per_row=[HEADS, []])


def test_head_means_are_site_means(llama):
    means = head_means(llama, PROMPTS, HEADS)
    assert type(means) is SiteMeans and means.site == "head_out"
    # the same means as site_means at head_out, over the same positions
    captured = site_means(llama, PROMPTS, "head_out", layers=[0, 2])
    assert means.n_positions == captured.n_positions
    for layer in (0, 2):
        # float32 sums of n_positions values in two orders differ by at most n * eps of
        # the largest value's size (the textbook bound of recursive summation)
        size = float(captured.means[layer].abs().max())
        atol = means.n_positions * torch.finfo(torch.float32).eps * size
        torch.testing.assert_close(means.means[layer], captured.means[layer], rtol=0, atol=atol)

"""One name per thing: the deprecated spellings warn and name their replacement."""

from __future__ import annotations

import contextlib
import warnings

import pytest
import torch

from bindscope.interventions import (
    Zero,
    capture_attention,
    capture_probs,
    head_means,
    mean_ablate,
    ops,
    run_layers,
    zero_ablate,
)
from tests.conftest import PROMPTS, build_tiny

HEADS = [(0, 1), (2, 2)]


@pytest.fixture(scope="module")
def llama(sp_tokenizer):
    return build_tiny("llama", sp_tokenizer, self_check=False)


def _in_trace(model, body):
    batch = model.encode(PROMPTS[:2])
    with torch.no_grad(), model.eager(), model.nnsight.trace(**batch.inputs):
        body()


def test_zero_ablate_warns_and_names_its_replacement(llama):
    with pytest.warns(DeprecationWarning, match=r"zero_ablate.*intervene=Zero.*head_plan"):
        _in_trace(llama, lambda: zero_ablate(llama, HEADS))


def test_capture_attention_warns_and_names_capture_probs(llama):
    with pytest.warns(DeprecationWarning, match=r"capture_attention.*capture_probs"):
        _in_trace(llama, lambda: capture_attention(llama, [0]))


def test_mean_ablate_older_order_warns_and_the_kept_order_does_not(llama):
    means = head_means(llama, PROMPTS, HEADS)
    with pytest.warns(DeprecationWarning, match=r"mean_ablate\(model, heads, means\)"):
        _in_trace(llama, lambda: mean_ablate(llama, means, HEADS))
    with _no_bindscope_deprecation():
        _in_trace(llama, lambda: mean_ablate(llama, HEADS, means))
        _in_trace(llama, lambda: capture_probs(llama, [0]))
        _in_trace(llama, lambda: run_layers(llama, plan=ops.head_plan(llama, HEADS)))


def test_intervene_head_pairs_warn_and_name_zero_while_the_shortcut_does_not(llama):
    with pytest.warns(DeprecationWarning, match=r"intervene=Zero\(\[\.\.\.\]\).*ablate="):
        llama.logits(PROMPTS[:1], intervene=HEADS)
    with _no_bindscope_deprecation():
        llama.logits(PROMPTS[:1], ablate=HEADS)
        llama.logits(PROMPTS[:1], intervene=Zero(HEADS))
        llama.logits(PROMPTS[:2], per_row=[HEADS, []])


@contextlib.contextmanager
def _no_bindscope_deprecation():
    """Fail on any of bindscope's deprecation warnings raised inside (others' pass)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DeprecationWarning)
        yield
    ours = [str(w.message) for w in caught if "deprecated: " in str(w.message)]
    assert ours == []


def test_head_means_are_site_means_and_the_old_type_name_warns(llama):
    import bindscope.interventions as interventions
    from bindscope.interventions import SiteMeans, site_means

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
    with pytest.warns(DeprecationWarning, match=r"HeadMeans.*SiteMeans"):
        old = interventions.HeadMeans
    assert old is SiteMeans

"""Bad or conflicting specs are refused before any trace runs (issue 19 items 4, 8, 10, 11).

These checks do not depend on the architecture, so one family's tiny model serves.
"""

from __future__ import annotations

import math

import pytest
import torch

from bindscope.errors import InputError, InterventionError
from bindscope.interventions import Knockout, Mean, Patch, Resample, Zero, head_means
from tests.conftest import PROMPTS, build_tiny

HEADS = [(0, 1), (1, 0)]


@pytest.fixture(scope="module")
def model(byte_tokenizer):
    return build_tiny("qwen2", byte_tokenizer)


# -- two specs on one head in one row (item 4) ----------------------------------------------


def _conflicts(model):
    means = head_means(model, PROMPTS, HEADS)
    n = len(model.tokenize(PROMPTS[0]))
    return [
        (Zero([(1, 0)]), Patch([(1, 0)], PROMPTS[:1])),
        (Mean([(0, 1)], means), Zero([(0, 1), (2, 2)])),
        (Resample([(1, 0)], PROMPTS[1:]), Mean(HEADS, means)),
        (Knockout([(1, 0)], [(n - 1, 0)]), Zero([(1, 0)])),
    ]


@pytest.mark.parametrize("case", range(4))
@pytest.mark.parametrize("reverse", [False, True])
def test_two_specs_on_one_head_in_a_row_are_refused_naming_head_and_specs(model, case, reverse):
    first, second = _conflicts(model)[case]
    specs = [second, first] if reverse else [first, second]
    head = sorted(set(first.heads) & set(second.heads))[0]
    with pytest.raises(InterventionError) as err:
        model.logits(PROMPTS[:1], intervene=specs)
    message = str(err.value)
    assert f"head {head}" in message and "text #0" in message
    assert type(first).__name__ in message and type(second).__name__ in message
    # the same pair split over intervene= and per_row= is the same conflict
    with pytest.raises(InterventionError, match=r"head \("):
        model.logits(PROMPTS[:1], intervene=specs[0], per_row=[specs[1]])


def test_specs_on_different_heads_or_rows_still_combine(model):
    got = model.logits(PROMPTS[:2], per_row=[Zero([(1, 0)]), Patch([(1, 0)], PROMPTS[1:2])])
    assert len(got) == 2
    model.logits(PROMPTS[:1], intervene=[Zero([(1, 0)]), Patch([(1, 1)], PROMPTS[:1])])


# -- Mean with bad means (item 8) ------------------------------------------------------------


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_mean_with_non_finite_means_is_refused(model, bad):
    means = head_means(model, PROMPTS, HEADS)
    table = {layer: value.clone() for layer, value in means.means.items()}
    table[1][0, 3] = bad
    with pytest.raises(InterventionError, match=r"layer 1.*not finite"):
        model.logits(PROMPTS[:1], intervene=Mean(HEADS, table))


@pytest.mark.parametrize("shape", [(4, 8), (3, 16), (64,), (4, 16, 1)])
def test_mean_with_means_of_the_wrong_shape_is_refused(model, shape):
    table = {0: torch.zeros(shape), 1: torch.zeros(model.n_heads, model.head_dim)}
    with pytest.raises(InterventionError) as err:
        model.logits(PROMPTS[:1], intervene=Mean(HEADS, table))
    assert "layer 0" in str(err.value)
    assert f"[{model.n_heads}, {model.head_dim}]" in str(err.value)


def test_mean_with_a_non_tensor_table_entry_is_refused(model):
    with pytest.raises(InterventionError, match="layer 0"):
        model.logits(PROMPTS[:1], intervene=Mean(HEADS, {0: "x", 1: [1.0]}))


# -- Resample seed and generation length (item 10) -------------------------------------------


@pytest.mark.parametrize("seed", [None, math.nan, 1.5, "3", True])
def test_resample_seed_must_be_an_integer(seed):
    with pytest.raises(InterventionError, match="seed"):
        Resample(HEADS, PROMPTS, seed=seed)


def test_resample_accepts_integer_seeds():
    assert Resample(HEADS, PROMPTS, seed=7).seed == 7
    import numpy as np

    assert Resample(HEADS, PROMPTS, seed=np.int64(7)).seed == 7


@pytest.mark.parametrize("count", [0, -1, 2.5, None, "3"])
def test_generate_needs_a_positive_number_of_new_tokens(model, count):
    with pytest.raises(InputError, match="max_new_tokens"):
        model.generate_ids(PROMPTS[:1], max_new_tokens=count)
    with pytest.raises(InputError, match="max_new_tokens"):
        model.generate(PROMPTS[:1], max_new_tokens=count)


# -- non-integer edges and positions (item 11) -----------------------------------------------


@pytest.mark.parametrize("edges", [[(3.5, 1)], [(3, 0.5)], [(5.7, 2.2)], [("3", 1)], [(True, 0)]])
def test_knockout_edges_must_be_integers(edges):
    with pytest.raises(InterventionError, match="not an integer"):
        Knockout(HEADS, edges)


@pytest.mark.parametrize("positions", [[3.5], [1, 5.7], ["2"], [True]])
def test_patch_positions_must_be_integers(positions):
    with pytest.raises(InterventionError, match="not an integer"):
        Patch(HEADS, PROMPTS[:1], positions=positions)


def test_integer_like_edges_and_positions_are_accepted():
    import numpy as np

    assert Knockout(HEADS, [(np.int64(4), 1)]).edges == ((4, 1),)
    assert Patch(HEADS, PROMPTS[:1], positions=range(2)).positions == (0, 1)

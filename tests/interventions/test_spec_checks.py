"""Bad or conflicting specs are refused before any trace runs (issue 19 items 4, 8, 10, 11).

These checks do not depend on the architecture, so one family's tiny model serves.
"""

from __future__ import annotations

import math

import pytest

from bindscope.errors import InputError, InterventionError
from bindscope.interventions import Knockout, Patch, Resample
from tests.conftest import PROMPTS, build_tiny

HEADS = [(0, 1), (1, 0)]


@pytest.fixture(scope="module")
def model(byte_tokenizer):
    return build_tiny("qwen2", byte_tokenizer)


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

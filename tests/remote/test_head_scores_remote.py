"""Head-taxonomy scores through the simulated NDIF server equal the local ones, and only
O(layers x heads) per text comes back."""

from __future__ import annotations

import pytest

from bindscope.runners.taxonomy_scores import repeated_scores, text_scores
from tests.conftest import PROMPTS
from tests.tolerance import assert_within, prob_bound

pytestmark = pytest.mark.parametrize("twins", ["llama", "gpt2"], indirect=True)


def test_head_scores_run_remotely(twins):
    local, simulated = twins
    # recomputed probabilities on the server side may differ from eager by rounding
    bound = prob_bound(local)
    for got, want in zip(text_scores(simulated, PROMPTS), text_scores(local, PROMPTS)):
        for name in ("sink", "previous_token"):
            assert_within(got[name], want[name], bound, name)
        # spread: 16 x bound x the participation ratio (tests/metrics/test_head_scores.py)
        spread = 16 * bound * float(want["spread"].max())
        assert_within(got["spread"], want["spread"], spread, "spread")
    server = simulated.trace_options["backend"]
    per_text = 3 * local.n_layers * local.n_heads * 4  # three float32 [L, H] scores
    assert server.result_bytes[-1] < 4096 + len(PROMPTS) * per_text
    got, tokens = repeated_scores(simulated, n=2, length=6, seed=0)
    want, same = repeated_scores(local, n=2, length=6, seed=0)
    assert tokens == same
    for g, w in zip(got, want):
        assert_within(g["induction"], w["induction"], bound, "induction")

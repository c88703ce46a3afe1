"""The exact scan on a remote model: one session per batch, equal to the local scan.

A remote model runs each batch of the scan (either strategy) as one nnsight session (one
request): the clean pass, a resample's donor pass and every condition pass run on the
server, and only scores come back. ``SimulatedServer`` plays NDIF here (payload unpickled
with the sandbox's whitelist, body run on copies); the live layer runs the same against the
real server (tests/remote/live/test_experiments.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from bindscope.interventions import head_means
from bindscope.runners.scan import condition_scores
from tests.experiments.test_scan_runner import TEXTS, _logprob_bound, _sequences
from tests.remote.conftest import simulated_twin


@pytest.fixture(scope="module")
def every_family_twins(tiny, byte_tokenizer, sp_tokenizer):
    """(local, simulated remote) with the same weights (build_tiny seeds by family)."""
    return simulated_twin(tiny, byte_tokenizer, sp_tokenizer)


@pytest.fixture(scope="module")
def layout_twins(tiny_layout, byte_tokenizer, sp_tokenizer):
    """``every_family_twins`` for one family per attention layout."""
    return simulated_twin(tiny_layout, byte_tokenizer, sp_tokenizer)


def _conditions(model):
    # single heads at three depths (so passes start at three layers) and one whole layer
    last = model.n_layers - 1
    return [[(0, 1)], [(1, 0)], [(last, model.n_heads - 1)], [(1, h) for h in range(model.n_heads)]]


def test_remote_scan_equals_local_to_the_bit_in_one_request_per_batch(every_family_twins):
    local, far = every_family_twins
    server = far.trace_options["backend"]
    sequences, conditions = _sequences(local), _conditions(local)
    donors = sequences[1:] + sequences[:1]
    heads = sorted({h for c in conditions for h in c})
    means = head_means(local, TEXTS, heads)
    for kwargs in ({}, {"means": means}, {"donors": donors}):
        # rows_per_pass=5 mixes conditions and cuts them across passes
        options = {"batch_size": 3, "rows_per_pass": 5, **kwargs}
        before = len(server.payload_bytes)
        got = condition_scores(far, sequences, conditions, **options)
        requests = server.result_bytes[before:]
        want = condition_scores(local, sequences, conditions, **options)
        # same ops on the same weights in the same order: equal, not merely close
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]), kwargs
        # one session per batch of 3 sequences, whatever the passes
        assert len(requests) == -(-len(sequences) // 3), kwargs
        # only scores come back: less than one layer's clean residual stream of one batch
        one_layer = 3 * max(len(s.ids) for s in sequences) * local.d_model * 4
        assert max(requests) < one_layer, (requests, one_layer)
    # negative control: a scan of other heads differs by far more than float noise
    moved = [[(layer, (head + 1) % local.n_heads) for layer, head in c] for c in conditions]
    _, other = condition_scores(far, sequences, moved, batch_size=3)
    _, zeroed = condition_scores(local, sequences, conditions, batch_size=3)
    assert np.abs(other - zeroed).max() > 100 * _logprob_bound(local)


def test_naive_remote_scan_equals_local_in_one_request_per_batch(layout_twins):
    """The naive strategy through the simulated server (each family's shipped sites: above;
    naive against residual-start locally on every family: tests/experiments/test_scan_runner.py)."""
    local, far = layout_twins
    server = far.trace_options["backend"]
    sequences, conditions = _sequences(local), _conditions(local)
    options = {"batch_size": 3, "strategy": "naive"}
    before = len(server.payload_bytes)
    got = condition_scores(far, sequences, conditions, **options)
    assert len(server.result_bytes[before:]) == -(-len(sequences) // 3)  # a session a batch
    want = condition_scores(local, sequences, conditions, **options)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])

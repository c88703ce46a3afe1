"""Edges through the simulated NDIF server equal a local run.

The whole EAP/EAP-IG scan runs in one session (one request: the corrupted senders' outputs
and the activation differences stay on the server, only ``[b, S, R]`` scores come back),
and exact path patching and mean-ablated circuits travel as the engine's `PathPatch`.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bindscope.errors import InputError
from bindscope.interventions import PathPatch, edge_means
from bindscope.interventions.graph import edge_graph
from bindscope.runners.attribution_metrics import LogitDifference
from bindscope.runners.circuit import faithfulness, top_mask
from bindscope.runners.edges import edge_attribution, path_patching
from tests.reference_edges import edge_bound, one_edge_of_each_kind, random_pairs
from tests.tolerance import assert_within, gradient_bound

METRIC = LogitDifference(5, 7)


def test_edge_scores_through_the_simulated_server_equal_local(twins):
    local, simulated = twins
    clean, corrupted = random_pairs(local)
    server = simulated.trace_options["backend"]
    requests = len(server.result_bytes)
    got = edge_attribution(simulated, clean, corrupted, METRIC, method="eap-ig", steps=2)
    assert len(server.result_bytes) == requests + 1  # one session for every pass
    ref = edge_attribution(local, clean, corrupted, METRIC, method="eap-ig", steps=2)
    scores = torch.from_numpy(ref.scores)
    # the server's weights are frozen: rounding apart (tests/tolerance.py)
    assert_within(torch.from_numpy(got.scores), scores, gradient_bound(local, scores), "scores")
    np.testing.assert_allclose(got.clean, ref.clean, atol=1e-5, rtol=0)
    np.testing.assert_allclose(got.corrupted, ref.corrupted, atol=1e-5, rtol=0)
    # negative control: the scores differ from edge to edge far beyond the bound
    assert np.abs(np.diff(ref.mean().ravel())).max() > 1e3 * gradient_bound(local, scores)
    # only scores and metrics come back, not the [S, b, s, d] differences
    n_scores = ref.scores.size * 4
    assert server.result_bytes[-1] < 2 * n_scores + 8192


def test_path_patching_and_mean_circuits_through_the_simulated_server(twins):
    local, simulated = twins
    clean, corrupted = random_pairs(local)
    edges = one_edge_of_each_kind(local)
    got = path_patching(simulated, clean, corrupted, METRIC, edges)
    ref = path_patching(local, clean, corrupted, METRIC, edges)
    bound = edge_bound(float(np.abs(ref).max()) + 1, local)
    np.testing.assert_allclose(got, ref, atol=bound, rtol=0)
    plain = path_patching(local, clean, corrupted, METRIC, [])
    assert np.abs(ref - plain).max() > 100 * bound  # the edges matter
    spec = PathPatch(edge_graph(local).valid, means=edge_means(local, corrupted))
    for g, r in zip(simulated.logits(clean, intervene=spec), local.logits(clean, intervene=spec)):
        torch.testing.assert_close(g, r, rtol=0, atol=edge_bound(float(r.abs().max()) + 1, local))
    scores = edge_attribution(local, clean, corrupted, METRIC, method="eap")
    keep = top_mask(scores, 10)
    far = faithfulness(
        simulated, clean, corrupted, METRIC, scores, keep, n_random=0, ablation="mean"
    )
    near = faithfulness(local, clean, corrupted, METRIC, scores, keep, n_random=0, ablation="mean")
    np.testing.assert_allclose(far.patched, near.patched, atol=bound, rtol=0)


def test_a_metric_function_is_refused_remotely(twins):
    _, simulated = twins
    clean, corrupted = random_pairs(simulated)
    with pytest.raises(InputError, match="metric function"):
        edge_attribution(simulated, clean, corrupted, lambda logits, rows: logits[:, 0])


def _shipped_methods() -> dict:
    import importlib
    import types

    from bindscope.remote.shipping import SHIPPED_MODULES

    return {
        (cls, name): member
        for module in map(importlib.import_module, SHIPPED_MODULES)
        for cls in vars(module).values()
        if isinstance(cls, type) and cls.__module__ == module.__name__
        for name, member in vars(cls).items()
        if isinstance(member, types.FunctionType)
    }


def test_a_simulated_request_leaves_the_clients_own_classes_alone(twins):
    # In one process cloudpickle would rebuild a class it pickled into that same class,
    # with the server's recompiled methods (no module): every later request would then
    # search all of sys.modules for each of them. The simulated server builds its own.
    local, simulated = twins
    clean, corrupted = random_pairs(local)
    before = _shipped_methods()
    path_patching(simulated, clean, corrupted, METRIC, one_edge_of_each_kind(local))
    path_patching(simulated, clean, corrupted, METRIC, one_edge_of_each_kind(local))
    after = _shipped_methods()
    assert len(before) > 20
    changed = [
        f"{cls.__name__}.{name}" for (cls, name), f in after.items() if before[cls, name] is not f
    ]
    assert not changed

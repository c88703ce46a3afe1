"""Edges on every family: path patching and EAP against plain torch (tests/reference_edges.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bindscope.errors import InputError
from bindscope.interventions import PathPatch
from bindscope.runners.attribution_metrics import LogitDifference
from bindscope.runners.circuit import faithfulness, greedy_mask, stability, verify
from bindscope.runners.edges import (
    edge_attribution,
    edge_graph,
    path_patching,
    path_patching_each,
)
from tests.reference_edges import (
    one_edge_of_each_kind,
    other_receiver,
    other_sender,
    random_pairs,
    read_input,
    receiver_logits,
    sender_delta,
)
from tests.tolerance import SAFETY

EPS = torch.finfo(torch.float32).eps
CORRECT, WRONG = 5, 7


def _metric(logits):
    return logits[CORRECT] - logits[WRONG]


def _bound(magnitude, width, depth):
    """Rounding of one value of size ``magnitude`` through ``depth`` layers of dot products
    ``width`` wide (tests/tolerance.py), twice: ours and the reference's orderings."""
    return 2 * SAFETY * EPS * magnitude * math.sqrt(width) * depth


@pytest.fixture(scope="module")
def scored(tiny):
    tiny.hf.requires_grad_(True)
    clean, corrupted = random_pairs(tiny)
    metric = LogitDifference(CORRECT, WRONG)
    scores = edge_attribution(tiny, clean, corrupted, metric, method="eap")
    return tiny, clean, corrupted, metric, scores


def test_path_patching_matches_reference(tiny):
    """Each edge kind equals the reference; every wrong sender, receiver or kind misses.

    The controls compare the whole next-token logit vector (the engine's `PathPatch`,
    which `path_patching` runs, against the reference with a wrong sender or a wrong
    receiver / input kind): each must miss by more than 100x the bound. The one exclusion
    is structural: an edge that moves no logit by 100x the bound tests nothing, and that is
    only a layer-0 MLP into the last layer's MLP on a parallel residual (GPT-NeoX): the
    last-layer MLP acts only through its own (the last) position, where the layer-0 MLP
    reads the same last token in both texts, so its change there is exactly zero.
    """
    model = tiny
    clean, corrupted = random_pairs(model, strong=True)
    metric = LogitDifference(CORRECT, WRONG)
    plain = [g[-1].float() for g in model.logits(clean)]
    inert, margins = set(), []
    for edge in one_edge_of_each_kind(model):
        ours = path_patching(model, clean, corrupted, metric, [edge])
        got = model.logits(clean, intervene=PathPatch([edge], source=corrupted))
        for p in range(2):
            delta = sender_delta(model, clean[p], corrupted[p], edge[0])
            with torch.no_grad():
                ref = receiver_logits(model, clean[p], edge[1], delta)
                wrong_sender = sender_delta(model, clean[p], corrupted[p], other_sender(edge[0]))
                wrongs = [
                    receiver_logits(model, clean[p], edge[1], wrong_sender),
                    receiver_logits(model, clean[p], other_receiver(model, edge[1]), delta),
                ]
            bound = _bound(float(ref.abs().max()) + 1, model.d_model, model.n_layers + 1)
            assert abs(ours[p] - float(_metric(ref))) <= bound, (edge, p, ours[p], bound)
            logits = got[p][-1].float()
            assert float((logits - ref).abs().max()) <= bound, (edge, p)
            if float((ref - plain[p]).abs().max()) <= 100 * bound:
                inert.add(edge)
                continue
            for wrong in wrongs:
                margins.append(float((logits - wrong).abs().max()) / bound)
                assert margins[-1] > 100, (edge, p, margins[-1])
    last = model.n_layers - 1
    assert inert <= ({("m0", f"m{last}")} if "resid_mid" not in model.sites else set()), inert
    assert len(margins) >= 20


def test_eap_scores_are_gradient_times_difference(scored):
    model, clean, corrupted, _, scores = scored
    graph = scores.graph
    for sender, receiver in one_edge_of_each_kind(model):
        i, j = graph.senders.index(sender), graph.receivers.index(receiver)
        for p in range(2):
            delta = sender_delta(model, clean[p], corrupted[p], sender)
            added = torch.zeros_like(delta, requires_grad=True)
            value = _metric(receiver_logits(model, clean[p], receiver, added))
            (grad,) = torch.autograd.grad(value, added)
            ref = float((grad * delta).sum())
            magnitude = float((grad * delta).abs().sum())
            bound = _bound(magnitude, model.d_model, model.n_layers + 1)
            assert abs(scores.scores[p, i, j] - ref) <= bound, (sender, receiver, p)


def test_incoming_scores_sum_to_node_attribution(scored):
    """Sum over a receiver's senders = gradient at its input x (corrupted - clean input).

    With a norm after the attention output (OLMo 2, Gemma 2/3) the heads' changes do not
    add up, so there only the first layer's query/key/value receivers (embedding only) count.
    """
    model, clean, corrupted, _, scores = scored
    graph = scores.graph
    sandwich = model.sites["attn_out"][0] != "self_attn"
    receivers = ["a0.h0<q>", "a0.g0<v>"] if sandwich else ["a1.h2<q>", "m1", "logits"]
    for receiver in receivers:
        j = graph.receivers.index(receiver)
        for p in range(2):
            x = read_input(model, clean[p], receiver)
            x_cor = read_input(model, corrupted[p], receiver)
            added = torch.zeros_like(x, requires_grad=True)
            value = _metric(receiver_logits(model, clean[p], receiver, added))
            (grad,) = torch.autograd.grad(value, added)
            node = float((grad * (x_cor - x)).sum())
            total = float(scores.scores[p, :, j].sum())
            magnitude = float((grad.abs() * (x_cor - x).abs()).sum()) + 1e-3
            bound = _bound(magnitude, model.d_model, model.n_layers + 1) * len(graph.senders)
            assert abs(total - node) <= bound, (receiver, p, total, node)


def test_every_edge_and_no_edge(scored):
    """Patching every edge gives the corrupted metric; patching none the clean one."""
    model, clean, corrupted, metric, scores = scored
    graph = scores.graph
    everything = path_patching(model, clean, corrupted, metric, graph.valid)
    nothing = path_patching(model, clean, corrupted, metric, np.zeros_like(graph.valid))
    bound = _bound(float(np.abs(scores.corrupted).max()) + 1, model.d_model, model.n_layers + 1)
    np.testing.assert_allclose(everything, scores.corrupted, atol=bound * 4, rtol=0)
    np.testing.assert_allclose(nothing, scores.clean, atol=bound, rtol=0)
    assert np.abs(scores.clean - scores.corrupted).max() > 1000 * bound  # the control moves


def test_eap_ig_one_step_is_eap(scored):
    model, clean, corrupted, metric, scores = scored
    one = edge_attribution(model, clean, corrupted, metric, method="eap-ig", steps=1)
    np.testing.assert_array_equal(one.scores, scores.scores)
    three = edge_attribution(model, clean, corrupted, metric, method="eap-ig", steps=3)
    assert not np.allclose(three.scores, scores.scores)  # the steps are used


def test_graph_shape(tiny):
    graph = edge_graph(tiny)
    heads, kv, layers = tiny.n_heads, tiny.n_kv_heads, tiny.n_layers
    assert len(graph.senders) == 1 + layers * (heads + 1)
    assert len(graph.receivers) == layers * (heads + 2 * kv + 1) + 1
    same_layer = graph.valid[graph.senders.index("a0.h0"), graph.receivers.index("m0")]
    assert same_layer == ("resid_mid" in tiny.sites)  # a parallel residual's MLP reads resid_pre
    assert not graph.valid[graph.senders.index("a1.h0"), graph.receivers.index("a1.h0<q>")]


def test_each_sender_s_inputs_are_its_named_receivers(tiny):
    """``inputs_of``: a head reads its query and its group's key and value; an MLP itself."""
    graph = edge_graph(tiny)
    group = tiny.n_heads // tiny.n_kv_heads
    for layer in range(tiny.n_layers):
        for h in range(tiny.n_heads):
            names = [f"a{layer}.h{h}<q>", *(f"a{layer}.g{h // group}<{x}>" for x in "kv")]
            got = [graph.receivers[j] for j in graph.inputs_of[f"a{layer}.h{h}"]]
            assert got == names
        assert [graph.receivers[j] for j in graph.inputs_of[f"m{layer}"]] == [f"m{layer}"]
    assert set(graph.inputs_of) == set(graph.senders) - {"embed"}


def test_bad_edges_are_refused(tiny):
    graph = edge_graph(tiny)
    with pytest.raises(InputError, match="not a node"):
        graph.index([("a0.h99", "logits")])
    with pytest.raises(InputError, match="does not read"):
        graph.index([("a1.h0", "a0.h0<q>")])
    with pytest.raises(InputError, match=r"tokenize to its clean"):
        path_patching(tiny, [[5, 6, 7]], [[5, 6]], LogitDifference(1, 2), [("embed", "logits")])


def test_circuit_of_every_edge_and_of_none(scored):
    """A circuit of every edge keeps the whole metric (share 1), of no edge none of it (0)."""
    model, clean, corrupted, metric, scores = scored
    valid = scores.graph.valid
    whole = faithfulness(model, clean, corrupted, metric, scores, valid, n_random=0)
    empty = faithfulness(model, clean, corrupted, metric, scores, np.zeros_like(valid), n_random=1)
    gap = float(np.abs(scores.clean.mean() - scores.corrupted.mean()))
    bound = _bound(float(np.abs(scores.corrupted).max()) + 1, model.d_model, model.n_layers + 1)
    assert abs(whole.share.value - 1) <= 4 * bound / gap
    assert abs(empty.share.value) <= 4 * bound / gap
    np.testing.assert_allclose(empty.null, [0.0], atol=4 * bound / gap)  # 0 random edges too


def test_verify_packs_the_per_edge_loop(scored):
    """`verify` packs edges x pairs into batches; it equals one `path_patching` per edge.

    The slow reference is the loop `verify` ran before (one pass over the pairs per edge,
    batch 4). Not bit for bit: a row's batch, and so its padding and matmul shapes,
    differ; the bound is the float32 rounding of the logits through every layer. Control:
    each edge compared with the next edge's reference misses by over 100 bounds.
    """
    model, clean, corrupted, metric, scores = scored
    checked = verify(model, clean, corrupted, metric, scores, 3, batch_size=5)
    loop = np.array(
        [path_patching(model, clean, corrupted, metric, [e], batch_size=4) for e in checked.edges]
    )  # [edges, pairs]
    each = path_patching_each(model, clean, corrupted, metric, checked.edges, batch_size=5)
    size = max(float(x.abs().max()) for x in model.logits(clean)) + 1
    bound = _bound(size, model.d_model, model.n_layers + 1)
    assert each.shape == loop.shape == (6, len(clean))
    assert float(np.abs(each - loop).max()) <= bound
    np.testing.assert_allclose(checked.exact, (loop - scores.clean).mean(1), rtol=0, atol=bound)
    assert float(np.abs(each - np.roll(loop, 1, axis=0)).max()) > 100 * bound


def test_verify_and_stability(scored):
    model, clean, corrupted, metric, scores = scored
    checked = verify(model, clean, corrupted, metric, scores, 3)
    assert len(checked.edges) == 6 and 0 <= checked.recall_at_k <= 1
    i, j = (
        scores.graph.senders.index(checked.edges[0][0]),
        scores.graph.receivers.index(checked.edges[0][1]),
    )
    single = path_patching(model, clean, corrupted, metric, [checked.edges[0]])
    assert checked.exact[0] == pytest.approx(float(np.mean(single - scores.clean)))
    assert checked.estimate[0] == pytest.approx(float(scores.scores[:, i, j].mean()))
    assert stability(scores, scores.graph.n_edges) == 1.0  # every edge: always kept


def test_greedy_circuit_is_connected_to_the_logits(scored):
    model, _, _, _, scores = scored
    graph = scores.graph
    mask = greedy_mask(scores, 12)
    assert int(mask.sum()) == 12 and not (mask & ~graph.valid).any()
    senders = {graph.senders[i] for i in np.flatnonzero(mask.any(1))}
    group = model.n_heads // model.n_kv_heads
    for i, j in zip(*np.nonzero(mask)):
        receiver = graph.receivers[j]
        if receiver == "logits":
            continue
        node = receiver.split("<")[0]
        if ".g" in node:  # a key/value group: some head of the group is in the circuit
            layer, g = node.split(".g")
            assert any(
                f"{layer}.h{h}" in senders for h in range(int(g) * group, (int(g) + 1) * group)
            )
        else:
            assert node in senders, (graph.senders[i], receiver)
    assert greedy_mask(scores, graph.n_edges).sum() <= graph.n_edges


def test_a_user_metric_function_gives_the_same_scores(scored):
    """``f(logits at the last position, pair indices)`` in place of LogitDifference."""
    model, clean, corrupted, _, scores = scored
    seen = []

    def difference(logits, rows):
        seen.append(list(rows))
        return logits[:, CORRECT] - logits[:, WRONG]

    mine = edge_attribution(model, clean, corrupted, difference, method="eap")
    np.testing.assert_array_equal(mine.scores, scores.scores)
    assert seen[0] == [0, 1]  # the pair indices of the batch's rows

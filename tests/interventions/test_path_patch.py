"""PathPatch through ``intervene=``: equals plain torch hooks (tests/reference_edges.py).

On every family, one edge of each kind and a set of edges into one receiver give the same
next-token logits as the reference (the receiver reads its own copy of the stream, built
with HF modules and forward hooks, no nnsight); the negative controls (a wrong sender,
receiver or input kind misses by orders of magnitude) are in tests/runners/test_edges.py.
`capture` and `generate` take the same spec.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bindscope.errors import InterventionError
from bindscope.interventions import Knockout, Patch, PathPatch, Steer, Zero
from bindscope.interventions.graph import edge_graph
from bindscope.interventions.plan import plan_batch
from bindscope.interventions.resolve import resolve_rows
from tests.reference_edges import (
    edge_bound,
    one_edge_of_each_kind,
    random_pairs,
    receiver_logits,
    sender_delta,
)


def _last_logits(model, clean, corrupted, edges):
    got = model.logits(clean, intervene=PathPatch(edges, source=corrupted))
    return [g[-1].float() for g in got]


def test_path_patch_logits_match_reference(tiny):
    """Every logit equals the reference's (the negative controls: tests/runners/test_edges.py)."""
    model = tiny
    clean, corrupted = random_pairs(model, strong=True)
    for edge in one_edge_of_each_kind(model):
        ours = _last_logits(model, clean, corrupted, [edge])
        for p in range(2):
            delta = sender_delta(model, clean[p], corrupted[p], edge[0])
            with torch.no_grad():
                ref = receiver_logits(model, clean[p], edge[1], delta)
            bound = edge_bound(float(ref.abs().max()) + 1, model)
            error = float((ours[p] - ref).abs().max())
            assert error <= bound, (edge, p, error, bound)


def test_a_set_of_edges_into_one_receiver(tiny):
    """The embedding and MLP 0 into MLP 2 at once: the receiver reads both changes."""
    model = tiny
    clean, corrupted = random_pairs(model)
    edges = [("embed", "m2"), ("m0", "m2")]
    ours = _last_logits(model, clean, corrupted, edges)
    for p in range(2):
        delta = sum(sender_delta(model, clean[p], corrupted[p], s) for s, _ in edges)
        with torch.no_grad():
            ref = receiver_logits(model, clean[p], "m2", delta)
        bound = edge_bound(float(ref.abs().max()) + 1, model)
        assert float((ours[p] - ref).abs().max()) <= bound


def test_every_edge_is_the_corrupted_run_in_logits_capture_generate(tiny):
    """Every edge patched gives the corrupted texts' logits, activations and continuations."""
    model = tiny
    clean, corrupted = random_pairs(model)
    everything = PathPatch(edge_graph(model).valid, source=corrupted)
    last = model.n_layers - 1
    for ours, ref in zip(
        model.logits(clean, intervene=everything), model.logits(corrupted), strict=True
    ):
        bound = edge_bound(float(ref.abs().max()) + 1, model)
        assert float((ours - ref).abs().max()) <= 4 * bound
    sites = ["mlp_out", "resid_post"]
    got = model.capture(clean, sites, [last], intervene=everything)
    want = model.capture(corrupted, sites, [last])
    for ours, ref in zip(got, want, strict=True):
        for site in sites:
            x, y = ours[site][last], ref[site][last]
            assert float((x - y).abs().max()) <= 4 * edge_bound(float(y.abs().max()) + 1, model)
    one = model.generate_ids(clean, max_new_tokens=1, intervene=PathPatch(
        [one_edge_of_each_kind(model)[-1]], source=corrupted
    ))  # fmt: skip
    patched = _last_logits(model, clean, corrupted, [one_edge_of_each_kind(model)[-1]])
    assert [row[0] for row in one] == [int(x.argmax()) for x in patched]
    # later tokens read the patched prompt's keys and values (the cache): the corrupted run
    assert model.generate_ids(clean, max_new_tokens=4, intervene=everything) == (
        model.generate_ids(corrupted, max_new_tokens=4)
    )


def test_probabilities_and_early_captures_run_under_a_path_patch(tiny):
    """A capture that ends before a path patch's last receiver still sees the patch.

    Every edge patched gives the corrupted texts' probabilities; an edge into the last MLP
    leaves layer 0's residual as it was. Both calls stopped the model before the patch's
    receivers had been read (nnsight's out-of-order error); donors and pattern patches:
    tests/interventions/test_specs.py.
    """
    model = tiny
    clean, corrupted = random_pairs(model, strong=True)
    everything = PathPatch(edge_graph(model).valid, source=corrupted)
    got = model.attention_probs(clean, intervene=everything)
    plain, want = model.attention_probs(clean), model.attention_probs(corrupted)
    for ours, before, ref in zip(got, plain, want, strict=True):
        bound = 4 * edge_bound(float(ref.abs().max()) + 1, model)
        assert float((ours - ref).abs().max()) <= bound
        assert float((before - ref).abs().max()) > 100 * bound  # the patch changed them
    late = PathPatch([("m0", f"m{model.n_layers - 1}")], source=corrupted)
    got = model.capture(clean, ["resid_post"], [0], intervene=late)
    for ours, ref in zip(got, model.capture(clean, ["resid_post"], [0]), strict=True):
        x, y = ours["resid_post"][0], ref["resid_post"][0]
        assert float((x - y).abs().max()) <= edge_bound(float(y.abs().max()) + 1, model)


def test_no_edge_is_the_clean_run(tiny):
    model = tiny
    clean, corrupted = random_pairs(model)
    nothing = np.zeros_like(edge_graph(model).valid)
    for ours, ref in zip(
        model.logits(clean, intervene=PathPatch(nothing, source=corrupted)), model.logits(clean)
    ):
        torch.testing.assert_close(ours, ref, rtol=0, atol=0)


def test_bad_path_patches_are_refused(tiny):
    model = tiny
    clean, corrupted = random_pairs(model)
    with pytest.raises(InterventionError, match="not a node"):
        model.logits(clean, intervene=PathPatch([("a0.h99", "logits")], source=corrupted))
    with pytest.raises(InterventionError, match="does not read"):
        model.logits(clean, intervene=PathPatch([("a1.h0", "a0.h0<q>")], source=corrupted))
    with pytest.raises(InterventionError, match="equal lengths"):
        model.logits(clean, intervene=PathPatch([("embed", "logits")], source=[[5, 6], [5, 6]]))
    with pytest.raises(InterventionError, match="takes no other spec"):
        model.logits(clean, intervene=[PathPatch([("embed", "logits")], source=corrupted),
                                       Zero([(0, 0)])])  # fmt: skip
    twice = [PathPatch([(s, "logits")], source=corrupted) for s in ("embed", "m0")]
    with pytest.raises(InterventionError, match="takes no other spec"):
        model.logits(clean, intervene=twice)
    with pytest.raises(InterventionError, match="Knockout and PathPatch in one batch"):
        model.logits(clean, per_row=[PathPatch([("embed", "logits")], source=[corrupted[0]]),
                                     Knockout([(0, 0)], edges=((2, 1),))])  # fmt: skip
    with pytest.raises(InterventionError, match="edges="):
        PathPatch("embed->logits", source=corrupted)


def _mixed_rows(model, clean, corrupted):
    """Texts and specs of one batch: PathPatch of other edge sets on the same and other
    texts, beside Zero, Patch, Steer and no spec."""
    kinds = one_edge_of_each_kind(model)
    steer = torch.randn(model.d_model, generator=torch.Generator().manual_seed(1))
    rows = [
        (0, PathPatch([kinds[0]], source=[corrupted[0]])),
        (1, PathPatch(kinds[1:3], source=[corrupted[1]])),
        (0, PathPatch([kinds[3], kinds[5]], source=[corrupted[0]])),
        (1, PathPatch([kinds[4]], source=[corrupted[1]])),
        (0, Zero([(1, 0)])),
        (1, Patch([(0, 1)], source=[corrupted[1]])),
        (0, Steer("resid_pre", 1, steer, scale=4.0)),
        (1, None),
    ]
    return [clean[p] for p, _ in rows], [spec for _, spec in rows]


def test_a_mixed_batch_equals_each_row_alone(tiny):
    """Rows with different PathPatch specs and other specs share one batch.

    Each row's logits equal the same text and spec run alone, within `edge_bound`: not
    bit for bit, since alone a text is padded to its own width and its batch differs
    (other matmul shapes and orders); the bound is the float32 rounding of a patched
    edge through every layer, as for the reference. Negative control: a row compared
    with another row of the same text (another spec) misses by over 100 bounds.
    """
    model = tiny
    clean, corrupted = random_pairs(model, strong=True)
    texts, specs = _mixed_rows(model, clean, corrupted)
    mixed = model.logits(texts, per_row=specs, batch_size=len(texts))
    alone = [model.logits([t], per_row=[s])[0] for t, s in zip(texts, specs)]
    bound = edge_bound(max(float(x.abs().max()) for x in alone) + 1, model)
    worst, nearest_wrong = 0.0, float("inf")
    for i, ours in enumerate(mixed):
        worst = max(worst, float((ours - alone[i]).abs().max()))
        for j, other in enumerate(alone):
            if j != i and texts[j] == texts[i]:
                nearest_wrong = min(nearest_wrong, float((ours - other).abs().max()))
    assert worst <= bound, (worst, bound)
    assert nearest_wrong > 100 * bound, (nearest_wrong, bound)


def test_scratch_rows_are_counted_per_text(tiny):
    """Texts patching one edge each, into different receivers of one layer, need one
    scratch row each (not one per receiver of the batch); two receivers of one text with
    other senders need two."""
    model = tiny
    clean, corrupted = random_pairs(model)
    edges = [("embed", "a1.h0<q>"), ("embed", "a1.g0<k>"), ("m0", "a1.h1<q>")]
    specs = [PathPatch([e], source=[corrupted[0]]) for e in edges]
    rows = resolve_rows(model, [clean[0]] * 3, per_row=specs)
    assert plan_batch(model, model.pad([0, 1, 2], [clean[0]] * 3), rows).plan.path.slots == 1
    two = resolve_rows(model, [clean[0]], intervene=PathPatch(edges, source=[corrupted[0]]))
    assert plan_batch(model, model.pad([0], [clean[0]]), two).plan.path.slots == 2


def test_a_mixed_batch_generates_as_each_row_alone(tiny):
    """`generate` takes the same mixed batch (less Patch, which it refuses): each row's
    greedy continuation is the one it gets alone."""
    model = tiny
    clean, corrupted = random_pairs(model, strong=True)
    texts, specs = _mixed_rows(model, clean, corrupted)
    keep = [i for i, spec in enumerate(specs) if not isinstance(spec, Patch)]
    texts, specs = [texts[i] for i in keep], [specs[i] for i in keep]
    mixed = model.generate_ids(texts, max_new_tokens=3, per_row=specs, batch_size=len(texts))
    alone = [
        model.generate_ids([t], max_new_tokens=3, per_row=[s])[0] for t, s in zip(texts, specs)
    ]
    assert mixed == alone

"""Issues 44 and 45 on the real NDIF server: Patchscope, pattern Patch, features, new sites.

Same twins and texts as ``test_calls.py``: the same float32 weights on both sides, one thread
per process, so each call equals its local run to the last bit (``torch.equal``). Each spec
also moves the server's result off the plain run, so equality is not that of two no-ops.
What cannot run remotely is refused before any request, with the reason.
"""

from __future__ import annotations

import pytest
import torch

from bindscope.errors import InputError, InterventionError
from bindscope.interventions import Hook, Patch, Patchscope, Steer, Zero, capture_features
from bindscope.model.cache import run_with_cache
from tests.interventions.test_dictionary import random_dictionary
from tests.remote.live.test_calls import HEADS, TEXTS, _equal_lists, _variants

pytestmark = pytest.mark.ndif_live


def _equal_and_moved(far, local, texts, moved, **kwargs):
    """The server's logits under ``kwargs`` equal local ones; rows ``moved`` are not the
    plain run's (each spec there did something)."""
    got = far.logits(texts, **kwargs)
    _equal_lists(got, local.logits(texts, **kwargs), kwargs)
    plain = local.logits(texts)
    for i in moved:
        assert not torch.equal(got[i], plain[i]), (i, kwargs)


def test_patchscope_and_pattern_patch_equal_local(twins):
    """A pattern Patch ships its invoke over the batch; a Patchscope captures its source
    state in one request and sends it as a value in the next (logits and generate)."""
    local, far = twins
    texts = _variants(local)
    pattern = Patch(HEADS, texts[1:2], site="pattern", positions=[9])
    scope = Patchscope(texts[1], 2, 5, target_layer=0, target_position=-1)
    _equal_and_moved(far, local, texts[:2], [0], intervene=pattern)  # text 1 is its source
    _equal_and_moved(far, local, texts[:2], [0, 1], intervene=scope)
    got = far.generate_ids(TEXTS[:2], max_new_tokens=4, intervene=scope)
    assert got == local.generate_ids(TEXTS[:2], max_new_tokens=4, intervene=scope)


def test_feature_specs_and_captured_features_equal_local(twins):
    """A small random dictionary's weights ship in each request; Zero and Steer on its three
    features most active on the texts (one per text, one request) equal local in logits, and
    Steer in the feature activations captured under it."""
    local, far = twins
    texts = TEXTS[:2]  # no donors: two lengths, so padding too
    sae = random_dictionary(local, "resid_post", "topk")
    plain = capture_features(local, texts, sae)
    features = sae.features(torch.cat(plain).sum(0).topk(3).indices.tolist())
    steer = Steer(features, scale=2.0)
    _equal_and_moved(far, local, texts, [0, 1], per_row=[Zero(features), steer])
    _equal_lists(capture_features(far, texts, sae), plain, "capture_features")
    _equal_lists(
        capture_features(far, texts, sae, intervene=steer),
        capture_features(local, texts, sae, intervene=steer),
        ("capture_features", steer.describe()),
    )


def test_a_hook_and_run_with_cache_are_refused_remotely_with_the_reason(twins):
    local, far = twins
    hook = Hook("resid_post", 0, lambda x: x)
    local.logits(TEXTS[:1], intervene=hook)  # local: runs
    with pytest.raises(InterventionError, match="cannot be shipped to NDIF's sandbox"):
        far.logits(TEXTS[:1], intervene=hook)
    with pytest.raises(InputError, match="weights stay on the server"):
        run_with_cache(far, TEXTS[:1])


NEW_SITES = ["q", "k", "v", "scores", "mlp_post", "ln_final_scale"]


def test_the_new_sites_capture_and_a_zeroed_query_head_equal_local(twins):
    """q, k, v, scores and mlp_post at two layers, and the final norm's scale, captured on
    the server; a Zero of query heads (the attention call's source, rewritten there)."""
    local, far = twins
    got = far.capture(TEXTS[:2], sites=NEW_SITES, layers=[0, 2])
    ref = local.capture(TEXTS[:2], sites=NEW_SITES, layers=[0, 2])
    for a, b in zip(got, ref):
        assert list(a) == list(b) == NEW_SITES
        for site in NEW_SITES:
            assert list(a[site]) == list(b[site]), site
            for layer in b[site]:
                assert torch.equal(a[site][layer], b[site][layer]), (site, layer)
    _equal_and_moved(far, local, TEXTS[:2], [0, 1], intervene=Zero(HEADS, site="q"))

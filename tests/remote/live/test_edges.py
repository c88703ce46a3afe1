"""Edges through the real NDIF server equal a local run, on both embedded models.

`edge_attribution` runs in one session (one request); exact path patching and a circuit's
faithfulness travel as the engine's `PathPatch`. Gradients start at layer 0's input on the
server (frozen weights) and at the weights locally: the same derivatives by other backward
kernels, so the scores agree within ``gradient_bound``. The metrics (a difference of two
logits) come from the session's passes, which the real server rounds differently from a local
run by about 1e-5 (as the exact scan's session: docs/remote.md), so they agree within twice
the logit bound.
"""

from __future__ import annotations

import pytest
import torch

from bindscope.errors import RemoteJobError
from bindscope.prompts.tasks import answer_ids, task_pairs
from bindscope.runners.attribution_metrics import LogitDifference
from bindscope.runners.circuit import faithfulness, top_mask
from bindscope.runners.edges import edge_attribution, path_patching
from tests.remote.live.conftest import BOTH_MODES
from tests.tolerance import assert_within, gradient_bound, logit_bound

pytestmark = pytest.mark.ndif_live


def _pairs(model, n=4):
    pairs = task_pairs("ioi", n, model.tokenizer)
    metric = [LogitDifference(*answer_ids(p, model.tokenizer)) for p in pairs]
    return [p.clean for p in pairs], [p.corrupted for p in pairs], metric


@BOTH_MODES
def test_edge_scores_and_circuits_equal_local(twins, mode):
    """Trusted, the scores equal local; sandboxed, the scan refuses (its gradients cannot
    reach the model's process) rather than return zeros. Path patching and faithfulness
    take no gradient and equal local in both modes."""
    local, far = twins
    clean, corrupted, metric = _pairs(local)
    ref = edge_attribution(local, clean, corrupted, metric, method="eap-ig", steps=2)
    metric_bound = 2 * logit_bound(local, clean + corrupted)  # a difference of two logits

    def close(a, b, what):
        assert_within(torch.as_tensor(a), torch.as_tensor(b), metric_bound, what)

    if mode == "sandboxed":
        with pytest.raises(RemoteJobError, match="did not reach layer 0's input"):
            edge_attribution(far, clean, corrupted, metric, method="eap-ig", steps=2)
    else:
        got = edge_attribution(far, clean, corrupted, metric, method="eap-ig", steps=2)
        scores = torch.from_numpy(ref.scores)
        bound = gradient_bound(local, scores)
        assert_within(torch.from_numpy(got.scores), scores, bound, "scores")
        close(got.clean, ref.clean, "clean metric")
        close(got.corrupted, ref.corrupted, "corrupted metric")
    edges = ref.top(5)
    close(
        path_patching(far, clean, corrupted, metric, edges),
        path_patching(local, clean, corrupted, metric, edges),
        "path patching",
    )
    keep = top_mask(ref, 20)
    for ablation in ("corrupted", "mean"):
        a = faithfulness(far, clean, corrupted, metric, ref, keep, n_random=0, ablation=ablation)
        b = faithfulness(local, clean, corrupted, metric, ref, keep, n_random=0, ablation=ablation)
        close(a.patched, b.patched, ablation)

"""Attribution to dictionary features, on every family.

On the linearised copy of ``test_attribution_patching`` the logit difference is affine in the
last layer's ``resid_post``, so a latent's estimate (gradient x feature change, the error term
held) must equal its exact effect within float32 rounding; another text's exact effect misses
by orders of magnitude. The exact effects themselves equal a plain torch hook on the HF model
that zeroes the latent by hand.
"""

from __future__ import annotations

import pytest
import torch

from bindscope.errors import InputError
from bindscope.runners.attribution_patching import LogitDifference
from bindscope.runners.feature_attribution import feature_attribution
from tests.conftest import FAMILY_NAMES
from tests.interventions.test_dictionary import feature_hook, random_dictionary
from tests.reference_sites import hooked
from tests.runners.test_attribution_patching import TEXTS, A, B, linearised
from tests.tolerance import logit_bound, rounding_bound

MARGIN = 100
VERIFY = 4


def _hand_effect(model, sae, latent):
    """The logit difference's change with ``latent`` zeroed by a hook, per text."""

    def zeroed(f):
        f = f.clone()
        f[:, latent] = 0
        return f

    out = []
    for text in TEXTS:
        ids = torch.tensor([model.tokenize(text)])
        with torch.no_grad():
            clean = model.hf(ids).logits[0, -1].double()
            with hooked(
                model.hf, model.family, sae.site, sae.layer, edit=feature_hook(sae, zeroed)
            ):
                edited = model.hf(ids).logits[0, -1].double()
        out.append(float((edited[A] - edited[B]) - (clean[A] - clean[B])))
    return torch.tensor(out, dtype=torch.float64)


def test_feature_estimates_equal_exact_effects_and_the_top_k_are_measured(flat):
    sae = random_dictionary(flat, "resid_post", "relu", layer=flat.n_layers - 1)
    found = _estimates_equal_exact_effects(flat, sae)
    hand = _hand_effect(flat, sae, found.verified[0])
    exact = torch.from_numpy(found.exact)
    assert float((exact[:, 0] - hand).abs().max()) <= 4 * logit_bound(flat, TEXTS)


@pytest.fixture(scope="module", params=FAMILY_NAMES)
def flat_mlp(request, byte_tokenizer, sp_tokenizer):
    """``flat`` with its last MLP kept: the logits are affine in that MLP's output."""
    model = linearised(request.param, sp_tokenizer if request.param == "llama" else byte_tokenizer,
                       keep_mlp=True)  # fmt: skip
    model.hf.requires_grad_(True)
    return model


def test_transcoder_estimates_equal_exact_effects(flat_mlp):
    """A transcoder's latents, encoded from the last MLP's input, edit its output."""
    from tests.interventions.test_transcoder import random_transcoder

    tc = random_transcoder(flat_mlp, "relu", skip=True, layer=flat_mlp.n_layers - 1)
    _estimates_equal_exact_effects(flat_mlp, tc)


def _estimates_equal_exact_effects(flat, sae):
    """The top K are the largest estimates, and each equals its exact effect; another
    text's exact effect misses by orders of magnitude."""
    found = feature_attribution(flat, TEXTS, LogitDifference(A, B), sae, verify=VERIFY)
    assert found.estimate.shape == (len(TEXTS), sae.d_sae) and len(found.verified) == VERIFY
    ranked = abs(found.estimate.mean(0))
    assert min(ranked[list(found.verified)]) >= max(
        ranked[[i for i in range(sae.d_sae) if i not in found.verified]]
    )
    got = torch.from_numpy(found.estimate[:, list(found.verified)])  # [texts, K]
    exact = torch.from_numpy(found.exact)
    width = max(len(flat.tokenize(t)) for t in TEXTS)
    bound = 4 * logit_bound(flat, TEXTS) + rounding_bound(
        magnitude=float(got.abs().max()), width=width * flat.d_model, depth=2
    )
    error = float((got - exact).abs().max())
    assert error <= bound, f"{flat.family}: error {error:.2e} > bound {bound:.2e}"
    miss = float((got - exact.roll(1, 0)).abs().max())
    assert miss > MARGIN * bound, f"{flat.family}: another text misses by only {miss:.2e}"
    return found


def test_verify_out_of_range_is_refused(flat):
    sae = random_dictionary(flat, "resid_post", "relu", layer=flat.n_layers - 1)
    for bad in (0, sae.d_sae + 1, True):
        with pytest.raises(InputError, match="verify="):
            feature_attribution(flat, TEXTS, LogitDifference(A, B), sae, verify=bad)

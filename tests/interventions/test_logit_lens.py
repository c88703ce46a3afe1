"""`logit_lens(texts, layers, positions=...)` against plain torch hooks, on every family.

The reference reads ``resid_post`` with a forward hook on the native HF decoder layer of one
unpadded text, then applies the native final norm, LM head and final soft-capping; the lens
runs the texts left-padded together and keeps only the asked positions inside the trace.
Bound: `reference_patching.logit_atol` (float32 noise of logits from two batch layouts); the
same positions one layer off miss it by orders of magnitude.
"""

from __future__ import annotations

import pytest
import torch

from bindscope.errors import InputError
from tests.conftest import PROMPTS
from tests.reference_patching import logit_atol
from tests.reference_sites import hooked
from tests.tolerance import misses

MARGIN = 100


def _native_final(hf, family):
    if family == "gpt2":
        return hf.transformer.ln_f
    if family == "gpt_neox":
        return hf.gpt_neox.final_layer_norm
    return hf.model.norm


def _hook_lens(model, ids, layer):
    """``[n, vocab]``: layer ``layer``'s resid_post of one text through norm and head."""
    into: list[torch.Tensor] = []
    with hooked(model.hf, model.family, "resid_post", layer, into=into), torch.no_grad():
        model.hf(torch.tensor([ids]))
        logits = model.hf.get_output_embeddings()(_native_final(model.hf, model.family)(into[0]))
    cap = getattr(model.hf.config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits[0].float()


@pytest.mark.parametrize("positions", [-1, [0, 1, -1], None], ids=["default", "some", "all"])
def test_logit_lens_equals_plain_hooks_at_the_asked_positions(tiny, positions):
    layers = [0, 2]
    kwargs = {} if positions == -1 else {"positions": positions}  # -1 is the default
    got = tiny.logit_lens(PROMPTS, layers, **kwargs)
    for text, lens in zip(PROMPTS, got):
        ids = tiny.tokenize(text)
        n = len(ids)
        cols = list(range(n)) if positions is None else [
            p % n for p in ([positions] if isinstance(positions, int) else positions)
        ]  # fmt: skip
        assert lens.shape == (len(layers), len(cols), tiny.hf.get_output_embeddings().out_features)
        for j, layer in enumerate(layers):
            ref = _hook_lens(tiny, ids, layer)[cols]
            atol = logit_atol(ref, tiny.n_layers)
            torch.testing.assert_close(lens[j], ref, rtol=0, atol=atol)
            wrong = _hook_lens(tiny, ids, 1)[cols]  # the same positions one layer off
            assert misses(lens[j], wrong, atol) > MARGIN


def test_logit_lens_last_layer_equals_the_logits_at_those_positions(tiny):
    logits = tiny.logits(PROMPTS)
    lens = tiny.logit_lens(PROMPTS, [tiny.n_layers - 1], positions=[1, -2])
    for found, ref in zip(lens, logits):
        ref = ref[[1, ref.shape[0] - 2]]
        torch.testing.assert_close(found[0], ref, rtol=0, atol=logit_atol(ref, tiny.n_layers))


@pytest.mark.parametrize(
    ("positions", "words"),
    [([0, 40], "outside text #0"), (-20, "outside text #0"), (1.5, "not a position"),
     ([], "not a position"), ("-1", "not a position")],
)  # fmt: skip
def test_logit_lens_refuses_positions_it_cannot_read(tiny, positions, words):
    with pytest.raises(InputError, match=words):
        tiny.logit_lens(PROMPTS, [0], positions=positions)  # PROMPTS[0] is under 20 tokens

"""Hook and Patchscope equal plain torch hooks doing the same, on every family.

Hook: the user's functions at two sites (one of them a head, editing in place), alone and
beside a Zero, in logits of left-padded texts and in generation. Patchscope: a two-pass
computation, the source's hidden state read by one hook and written by another. Bounds:
`reference_patching.logit_atol` (float32 noise of logits in two batch layouts); the same
hook at a wrong layer, or a state from a wrong layer or position, misses by orders of
magnitude.
"""

from __future__ import annotations

import pytest
import torch

from bindscope.errors import BindscopeError, InterventionError
from bindscope.interventions import Hook, Patchscope, Steer, Zero
from bindscope.runners import head_attribution_patching
from bindscope.runners.attribution_metrics import LogitDifference
from tests.conftest import PROMPTS
from tests.reference_patching import logit_atol
from tests.reference_sites import greedy_reference, hooked
from tests.tolerance import misses

MARGIN = 100
SHIFT = torch.linspace(-1.0, 1.0, 64)  # the tiny models' d_model


def _scale_resid(x):
    return x * 0.5 + SHIFT[: x.shape[-1]]


def _scale_head(x):  # in place, returns None: TransformerLens's style
    x[:, :, 1] *= 3.0


def _head_edit(model):
    def edit(x):  # o_proj's input [1, n, H*hd]
        x = x.clone()
        heads = x.view(*x.shape[:-1], model.n_heads, model.head_dim)
        heads[:, :, 1] *= 3.0
        return x

    return edit


def _hf_logits(model, ids, *contexts):
    with torch.no_grad():
        for context in contexts:
            context.__enter__()
        try:
            return model.hf(torch.tensor([ids])).logits[0].float()
        finally:
            for context in reversed(contexts):
                context.__exit__(None, None, None)


def _zero_head(model, layer, head):
    def edit(x):
        x = x.clone()
        x.view(*x.shape[:-1], model.n_heads, model.head_dim)[:, :, head] = 0
        return x

    return hooked(model.hf, model.family, "head_out", layer, edit=edit)


def _check(got, ref, wrong, n_layers):
    atol = logit_atol(ref, n_layers)
    torch.testing.assert_close(got, ref, rtol=0, atol=atol)
    assert misses(wrong, ref, atol) > MARGIN


def test_hooks_equal_torch_hooks_alone_beside_zero_and_in_generation(tiny):
    hooks = [Hook("resid_post", 1, _scale_resid), Hook("head_out", [0], _scale_head)]
    got = tiny.logits(PROMPTS, intervene=hooks)  # left-padded together
    mixed = tiny.logits(PROMPTS, intervene=[Zero([(1, 0)]), *hooks])
    for k, text in enumerate(PROMPTS):
        ids = tiny.tokenize(text)

        def contexts(layer, zero=False):
            found = [
                hooked(tiny.hf, tiny.family, "resid_post", layer, edit=_scale_resid),
                hooked(tiny.hf, tiny.family, "head_out", 0, edit=_head_edit(tiny)),
            ]
            return [_zero_head(tiny, 1, 0), *found] if zero else found

        ref = _hf_logits(tiny, ids, *contexts(1))
        _check(got[k], ref, _hf_logits(tiny, ids, *contexts(2)), tiny.n_layers)
        ref = _hf_logits(tiny, ids, *contexts(1, zero=True))
        _check(mixed[k], ref, got[k], tiny.n_layers)
    new = tiny.generate_ids(PROMPTS, max_new_tokens=4, intervene=hooks[0])
    for text, ids in zip(PROMPTS, new):
        context = hooked(tiny.hf, tiny.family, "resid_post", 1, edit=_scale_resid)
        assert ids == greedy_reference(tiny, tiny.tokenize(text), 4, context)


def test_hooks_are_refused_remotely_and_on_a_bad_return(tiny_layout, monkeypatch):
    model = tiny_layout
    with pytest.raises(InterventionError, match="cannot be shipped"), monkeypatch.context() as m:
        m.setattr(model, "remote", "ndif")
        model.logits(PROMPTS, intervene=Hook("resid_post", 0, _scale_resid))
    with pytest.raises(BindscopeError, match="shape it was given"):
        model.logits(PROMPTS, intervene=Hook("resid_post", 0, lambda x: x[:, :1]))
    with pytest.raises(InterventionError, match="not a function"):
        Hook("resid_post", 0, "scale")
    with pytest.raises(BindscopeError, match="measure a Hook exactly"):
        head_attribution_patching(model, PROMPTS[:1], LogitDifference(5, 6),
                                  intervene=Hook("resid_post", 0, _scale_resid))  # fmt: skip
    with pytest.raises(InterventionError, match="unknown site"):
        Hook("resid", 0, _scale_resid)


@pytest.mark.parametrize("layer", [1.5, [0, 1.5], [], "x"])
def test_a_hook_layer_that_is_not_an_index_is_named_like_steers(layer):
    # one check for Steer's and Hook's layer: the message names the spec and the option
    for spec in (
        lambda: Hook("resid_post", layer, _scale_resid),
        lambda: Steer("resid_post", layer, torch.ones(3)),
    ):
        with pytest.raises(InterventionError) as info:
            spec()
        assert f"layer={layer!r} is not a layer index" in str(info.value)


def _patchscope_reference(model, source, target, spec, new_tokens=0):
    """Two passes with plain hooks: read the source's state, write it into the target."""
    found: list[torch.Tensor] = []
    with hooked(model.hf, model.family, spec.site, spec.layer, into=found), torch.no_grad():
        model.hf(torch.tensor([source]))
    state = found[0][0, spec.position]
    where = spec.target_position % len(target)

    def write(x):
        if x.shape[1] != len(target):  # a generation step: the prompt pass was patched
            return x
        x = x.clone()
        x[0, where] = state
        return x

    context = hooked(model.hf, model.family, spec.site, spec.target_layer, edit=write)
    if new_tokens:
        return greedy_reference(model, target, new_tokens, context)
    return _hf_logits(model, target, context)


def test_patchscope_equals_a_two_pass_hook_computation(tiny):
    source, target = tiny.tokenize(PROMPTS[2]), tiny.tokenize(PROMPTS[0])
    spec = Patchscope(source, 1, 4, target_layer=0, target_position=-2)
    got = tiny.logits([target, target], intervene=spec)  # two rows: batched alike
    ref = _patchscope_reference(tiny, source, target, spec)
    atol = logit_atol(ref, tiny.n_layers)
    for found in got:
        torch.testing.assert_close(found, ref, rtol=0, atol=atol)
    for wrong in (Patchscope(source, 2, 4, target_layer=0, target_position=-2),
                  Patchscope(source, 1, 7, target_layer=0, target_position=-2)):  # fmt: skip
        assert misses(_patchscope_reference(tiny, source, target, wrong), ref, atol) > MARGIN
    new = tiny.generate_ids([PROMPTS[0], PROMPTS[1]], max_new_tokens=4, intervene=spec)
    assert new[0] == _patchscope_reference(tiny, source, target, spec, new_tokens=4)


def test_patchscope_bad_input_is_refused(tiny_layout):
    model = tiny_layout
    source = PROMPTS[2]
    with pytest.raises(InterventionError, match="residual-stream"):
        Patchscope(source, 1, site="head_out")
    with pytest.raises(BindscopeError, match="outside source"):
        model.logits(PROMPTS[:1], intervene=Patchscope(source, 1, 99))
    with pytest.raises(BindscopeError, match="outside text #0"):
        model.logits(PROMPTS[:1], intervene=Patchscope(source, 1, target_position=99))
    with pytest.raises(BindscopeError, match="layer"):
        model.logits(PROMPTS[:1], intervene=Patchscope(source, 99))

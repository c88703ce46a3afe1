"""Families added at run time: register(), load_model(family=), and the standard layout."""

from __future__ import annotations

import warnings

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

import bindscope
from bindscope import families
from bindscope.errors import SelfCheckError, UnsupportedModelError
from bindscope.families import Family
from tests.conftest import PROMPTS, tiny_config
from tests.tolerance import logit_bound

HEADS = [(0, 1), (2, 3)]


class NewLlamaConfig(LlamaConfig):
    model_type = "new_llama_like"


class NewLlama(LlamaForCausalLM):
    config_class = NewLlamaConfig


class NewGPTConfig(GPT2Config):
    model_type = "new_gpt_like"


class NewGPT(GPT2LMHeadModel):
    config_class = NewGPTConfig


def _twins(known_cls, new_cls, new_config_cls, family):
    config = tiny_config(family)
    torch.manual_seed(0)
    known = known_cls(config).eval()
    settings = {k: v for k, v in config.to_dict().items() if k != "model_type"}
    new = new_cls(new_config_cls(**settings)).eval()
    assert new.config.model_type == new_config_cls.model_type
    new.load_state_dict(known.state_dict())
    for hf in (known, new):
        hf.set_attn_implementation("eager")
    return known, new


@pytest.fixture
def clean_registry():
    saved = list(families._REGISTERED)
    yield
    families._REGISTERED[:] = saved


def test_unknown_standard_layout_loads_with_a_warning_and_matches(byte_tokenizer):
    known, new = _twins(LlamaForCausalLM, NewLlama, NewLlamaConfig, "llama")
    reference = bindscope.load_model(known, tokenizer=byte_tokenizer)
    with pytest.warns(UserWarning, match="NewLlama.*new_llama_like.*self-check"):
        model = bindscope.load_model(new, tokenizer=byte_tokenizer)
    assert model.family == "new_llama_like"
    for got, ref in zip(
        model.logits(PROMPTS, ablate=HEADS), reference.logits(PROMPTS, ablate=HEADS)
    ):
        assert torch.equal(got, ref)  # same weights, same arithmetic


def test_unknown_layout_that_fails_the_self_check_is_refused(byte_tokenizer, monkeypatch):
    _, new = _twins(LlamaForCausalLM, NewLlama, NewLlamaConfig, "llama")

    def failing(model):
        raise SelfCheckError("ablating head (0, 0) left the logits unchanged")

    monkeypatch.setattr("bindscope.wrap.self_check", failing)
    with pytest.raises(UnsupportedModelError, match="register"):
        bindscope.load_model(new, tokenizer=byte_tokenizer)


def test_nonstandard_layout_needs_a_family_and_register_adds_it(byte_tokenizer, clean_registry):
    known, new = _twins(GPT2LMHeadModel, NewGPT, NewGPTConfig, "gpt2")
    with pytest.raises(UnsupportedModelError) as err:
        bindscope.load_model(new, tokenizer=byte_tokenizer)
    assert "NewGPT" in str(err.value) and "register(Family(" in str(err.value)
    gpt2_row = next(f for f in families.FAMILIES if f.name == "gpt2")
    # the row's sites are checked at load: the Llama default's resid_mid is not in GPT-2
    no_sites = Family("new_gpt_like", ("new_gpt_like",), dict(gpt2_row.rename), final_norm="ln_f")
    with pytest.raises(UnsupportedModelError) as err:
        bindscope.load_model(new, tokenizer=byte_tokenizer, family=no_sites)
    assert "'resid_mid'" in str(err.value) and "post_attention_layernorm" in str(err.value)
    row = Family(
        "new_gpt_like",
        ("new_gpt_like",),
        dict(gpt2_row.rename),
        final_norm="ln_f",
        sites=gpt2_row.sites,
    )
    reference = bindscope.load_model(known, tokenizer=byte_tokenizer)
    # one model only, no registration
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        single = bindscope.load_model(new, tokenizer=byte_tokenizer, family=row)
    assert single.family == "new_gpt_like"
    families.register(row)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = bindscope.load_model(new, tokenizer=byte_tokenizer)
    assert model.family_row is row
    for got, ref in zip(
        model.logits(PROMPTS, ablate=HEADS), reference.logits(PROMPTS, ablate=HEADS)
    ):
        assert torch.equal(got, ref)


def test_a_machine_with_an_accelerator_keeps_the_weights_where_load_model_put_them(
    byte_tokenizer, monkeypatch
):
    """nnsight builds a transformers pipeline, which moves a module to the first accelerator
    it finds unless given a device; on a GPU machine a CPU load ended on the GPU (H200).
    Here transformers is told CUDA exists: without the device passed on, the pipeline's
    ``model.to("cuda:0")`` fails on this CPU build of torch."""
    # the pipeline module whose device choice is patched; the auto class builds the model
    from transformers import AutoModelForCausalLM
    from transformers.pipelines import base

    monkeypatch.setattr(base, "is_torch_cuda_available", lambda: True)
    hf = AutoModelForCausalLM.from_config(tiny_config("gpt2"), attn_implementation="eager")
    model = bindscope.load_model(hf.eval(), tokenizer=byte_tokenizer)
    assert {p.device.type for p in model.hf.parameters()} == {"cpu"}


def test_a_loaded_model_object_takes_the_dtype_and_device_asked_for(byte_tokenizer):
    """``load_model(hf, dtype=..., device=...)`` used to leave an object as it was, silently."""
    from transformers import AutoModelForCausalLM  # the tiny model, built here

    def tiny_gpt2():
        torch.manual_seed(0)
        config = tiny_config("qwen2")  # GPT-2's upcast attention refuses float64
        return AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()

    kept = bindscope.load_model(tiny_gpt2(), tokenizer=byte_tokenizer)
    assert {p.dtype for p in kept.hf.parameters()} == {torch.float32}
    cast = bindscope.load_model(
        tiny_gpt2(), tokenizer=byte_tokenizer, dtype="float64", device="cpu"
    )
    assert {p.dtype for p in cast.hf.parameters()} == {torch.float64}
    assert {p.device.type for p in cast.hf.parameters()} == {"cpu"}
    # the same weights in float64: the logits agree with the float32 model's within float32
    # rounding of logits this size (tests/tolerance.py), the float64 side adding ~nothing
    got, ref = cast.logits(PROMPTS[:2]), kept.logits(PROMPTS[:2])
    assert all(g.dtype == torch.float64 for g in got)
    bound = logit_bound(kept, PROMPTS[:2])
    assert max((g - r.double()).abs().max().item() for g, r in zip(got, ref)) <= bound

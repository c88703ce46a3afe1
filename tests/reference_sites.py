"""Each site read with plain torch hooks on the native HF modules (no nnsight, no family row).

The table below is written from the transformers source of each architecture, apart from
``bindscope.families``: a wrong row (another module, another port) disagrees with it.
"""

from __future__ import annotations

import contextlib

import torch

# family -> site -> (module path under a native decoder layer, "input" | "output")
_LLAMA = {
    "resid_pre": ("", "input"),
    "head_out": ("self_attn.o_proj", "input"),
    "attn_out": ("self_attn", "output"),
    "resid_mid": ("post_attention_layernorm", "input"),
    "mlp_in": ("mlp", "input"),
    "mlp_post": ("mlp.down_proj", "input"),
    "mlp_out": ("mlp", "output"),
    "resid_post": ("", "output"),
}
_SANDWICH = {  # a norm on each block's output before the residual add
    **_LLAMA,
    "attn_out": ("post_attention_layernorm", "output"),
    "mlp_out": ("post_feedforward_layernorm", "output"),
}
NATIVE_SITES: dict[str, dict[str, tuple[str, str]]] = {
    "gpt2": {
        **_LLAMA,
        "head_out": ("attn.c_proj", "input"),
        "attn_out": ("attn", "output"),
        "resid_mid": ("ln_2", "input"),
        "mlp_post": ("mlp.c_proj", "input"),
    },
    "gpt_neox": {
        key: value
        for key, value in {
            **_LLAMA,
            "head_out": ("attention.dense", "input"),
            "attn_out": ("attention", "output"),
            "mlp_post": ("mlp.dense_4h_to_h", "input"),
        }.items()
        if key != "resid_mid"  # parallel residual: attention and MLP both read resid_pre
    },
    "olmo2": {
        key: value
        for key, value in {**_SANDWICH, "resid_mid": ("mlp", "input")}.items()
        if key != "mlp_in"  # no norm before the MLP: its input is resid_mid
    },
    "gemma2": {**_SANDWICH, "resid_mid": ("pre_feedforward_layernorm", "input")},
    "gemma3": {**_SANDWICH, "resid_mid": ("pre_feedforward_layernorm", "input")},
}


def untouched_copy(hf):
    """A copy of an HF model (same weights) that nnsight never touched.

    nnsight's ``.source`` (read by Knockout and by the q, k, v and scores sites) rewrites a
    module's forward with a copy of its module's globals: a reference that monkeypatches a
    function of the modeling module (``eager_attention_forward``, ``apply_rotary_pos_emb``)
    no longer reaches that model, so it runs on this copy.
    """
    copy = type(hf)(hf.config).eval()
    copy.load_state_dict(hf.state_dict())
    return copy


def native_sites(family: str) -> dict[str, tuple[str, str]]:
    return NATIVE_SITES.get(family, _LLAMA)


def decoder_layers(hf_model, family: str):
    if family == "gpt2":
        return hf_model.transformer.h
    if family == "gpt_neox":
        return hf_model.gpt_neox.layers
    return hf_model.model.layers


def _module(layer_module, path: str):
    for part in path.split(".") if path else ():
        layer_module = getattr(layer_module, part)
    return layer_module


def _first(value):
    return value[0] if isinstance(value, tuple) else value


@contextlib.contextmanager
def hooked(hf_model, family: str, site: str, layer: int, *, edit=None, into=None):
    """Hook one site: ``into`` gets a copy of its tensor; ``edit(x)`` returns a replacement.

    Editing ``resid_mid`` must change the residual stream itself, not only the next norm's
    input (a pre-hook on the norm returns a new tensor the residual add never sees), so it
    is edited through the attention output: ``attn_out' = edit(resid_pre + attn_out) -
    resid_pre``.
    """
    if site == "resid_mid" and edit is not None:
        with _resid_mid_edit(hf_model, family, layer, edit, into):
            yield
        return
    path, port = native_sites(family)[site]
    module = _module(decoder_layers(hf_model, family)[layer], path)

    def pre(mod, args, kwargs):
        x = args[0] if args else kwargs["hidden_states"]
        if into is not None:
            into.append(x.detach().clone())
        if edit is None:
            return None
        x = edit(x)
        if args:
            return (x, *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": x}

    def post(mod, args, output):
        x = _first(output)
        if into is not None:
            into.append(x.detach().clone())
        if edit is None:
            return None
        x = edit(x)
        return (x, *output[1:]) if isinstance(output, tuple) else x

    if port == "input":
        handle = module.register_forward_pre_hook(pre, with_kwargs=True)
    else:
        handle = module.register_forward_hook(post)
    try:
        yield
    finally:
        handle.remove()


@contextlib.contextmanager
def _resid_mid_edit(hf_model, family: str, layer: int, edit, into):
    pre: list[torch.Tensor] = []

    def add_back(x):
        return edit(pre[-1] + x) - pre[-1]

    reading = hooked(hf_model, family, "resid_mid", layer, into=into)
    with (
        hooked(hf_model, family, "resid_pre", layer, into=pre),
        hooked(hf_model, family, "attn_out", layer, edit=add_back),
        reading if into is not None else contextlib.nullcontext(),
    ):
        yield


def site_reference(model, text_ids: list[int], site: str, layer: int) -> torch.Tensor:
    """One text's activations at a site, unpadded: ``[n, d]`` (``[n, H, hd]`` at head_out)."""
    found: list[torch.Tensor] = []
    with hooked(model.hf, model.family, site, layer, into=found), torch.no_grad():
        model.hf(torch.tensor([text_ids]))
    x = found[0][0].float()
    if site == "head_out":
        x = x.view(x.shape[0], model.n_heads, model.head_dim)
    return x


def greedy_reference(model, ids: list[int], max_new_tokens: int, context) -> list[int]:
    """HF greedy generation of one unpadded text under ``context`` (hooks), cut at EOS."""
    prompt = torch.tensor([ids])
    with context, torch.no_grad():
        out = model.hf.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=model.tokenizer.pad_token_id,
        )
    new = out[0, prompt.shape[1] :].tolist()
    eos = {model.tokenizer.eos_token_id, model.hf.generation_config.eos_token_id}
    cut = next((i for i, token in enumerate(new) if token in eos), len(new))
    return new[:cut]

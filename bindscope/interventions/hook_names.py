"""TransformerLens hook names as bindscope sites, and SAELens' transcoder fields."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import torch

from bindscope.errors import DictionaryError

if TYPE_CHECKING:
    from bindscope.interventions.trace.features import TraceDictionary

# SAELens' transcoder architectures (encoder at hook_name, decoder at hook_name_out)
TRANSCODERS = {"transcoder": "relu", "skip_transcoder": "relu", "jumprelu_transcoder": "jumprelu"}
# TransformerLens hook names -> bindscope sites
TL_SITES = {
    "hook_resid_pre": "resid_pre",
    "hook_resid_mid": "resid_mid",
    "hook_resid_post": "resid_post",
    "hook_attn_out": "attn_out",
    "hook_mlp_out": "mlp_out",
    "attn.hook_z": "head_out",
    "ln2.hook_normalized": "mlp_in",  # the MLP's input, after the norm before it
}


def hook_name(site: str, layer: int) -> str:
    """The TransformerLens hook name of a bindscope site (``blocks.3.hook_resid_post``)."""
    tl = {v: k for k, v in TL_SITES.items()}
    return f"blocks.{layer}.{tl[site]}"


def site_of_hook(name: str, where: str) -> tuple[str, int]:
    """``(site, layer)`` of a TransformerLens hook name (raises `DictionaryError`)."""
    found = re.fullmatch(r"blocks\.(\d+)\.(.+)", name or "")
    if found is None or found.group(2) not in TL_SITES:
        raise DictionaryError(
            f"{where}: hook_name {name!r} is not a site bindscope edits; known hook names are "
            f"blocks.L.{{{', '.join(TL_SITES)}}}"
        )
    return TL_SITES[found.group(2)], int(found.group(1))


def transcoder_output(cfg: dict, meta: dict, where: str, layer: int) -> tuple[str, str] | None:
    """``(site, hook_name_out)`` of a SAELens transcoder's output, or None for an SAE."""
    out_name = cfg.get("hook_name_out") or meta.get("hook_name_out")
    if not out_name and cfg.get("architecture") not in TRANSCODERS:
        return None
    site, out_layer = site_of_hook(str(out_name or ""), where + " (field hook_name_out)")
    if out_layer != layer:
        raise DictionaryError(
            f"{where}: hook_name reads layer {layer} but hook_name_out writes layer {out_layer}; "
            "bindscope edits transcoders within one layer (the MLP's input to its output)"
        )
    return site, str(out_name)


def skip_weights(
    tensors: dict[str, torch.Tensor], where: str, weights: TraceDictionary
) -> torch.Tensor:
    """A skip transcoder's ``W_skip`` ``[d_out, d_in]``."""
    shape = (int(weights.W_dec.shape[1]), int(weights.W_enc.shape[0]))
    skip = tensors.get("W_skip")
    if skip is None or tuple(skip.shape) != shape:
        got = None if skip is None else tuple(skip.shape)
        raise DictionaryError(f"{where}: skip_transcoder needs W_skip of shape {shape}, got {got}")
    return skip.float()

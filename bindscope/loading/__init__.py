"""Getting a model: ``load_model``, the one path from a name to a checked ``Model``.

docs/architecture.md ("Getting a model") says which module decides each step.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from bindscope.errors import ModelLoadError, SelfCheckError
from bindscope.families import Family
from bindscope.loading.cache import cache_dir
from bindscope.loading.embedded_models import (
    DEFAULT_MODEL_NAME,
    EMBEDDED,
    GEMMA3_INSTALL_HINT,
    GEMMA3_PACKAGES,
    SERVED,
    Embedded,
    check_embedded,
    embedded,
    embedded_folder,
    weights_digest,
)
from bindscope.loading.weights import check_device, check_dtype, read_weights
from bindscope.model import Model
from bindscope.remote import load_remote, probe_capture, simulate
from bindscope.selfcheck import self_check as self_check_model
from bindscope.wrap import check_inferred, resolve_family, wrap_model

__all__ = [
    "EMBEDDED",
    "GEMMA3_INSTALL_HINT",
    "GEMMA3_PACKAGES",
    "SERVED",
    "Embedded",
    "cache_dir",
    "check_device",
    "check_dtype",
    "check_embedded",
    "embedded",
    "embedded_folder",
    "load_model",
    "weights_digest",
]


def load_model(
    model: Any = None,
    *,
    revision: str | None = None,
    tokenizer: Any = None,
    dtype: torch.dtype | str | None = None,
    device: str | torch.device | None = None,
    remote: bool | str = False,
    prepend_bos: bool | None = None,
    self_check: bool = True,
    family: Family | None = None,
    cache: str | os.PathLike | None = None,
    verify_cache: bool = False,
) -> Model:
    """Load and wrap a causal LM for capture and ablation.

    ``model``: None (the default embedded model), an ``EMBEDDED`` short name, a Hub id, a local
    safetensors folder (``revision``: its subfolder), or a loaded model (with ``tokenizer=``, cast
    and moved in place). ``remote``: True runs every trace on NDIF, ``"local"`` on a simulated
    NDIF. ``prepend_bos`` None follows the tokenizer; ``family`` replaces the table's row;
    ``cache`` defaults to ``$BINDSCOPE_CACHE``; ``verify_cache`` hashes every weight byte.
    """
    if remote is True:
        _refuse_local_options(model, dtype=dtype, device=device, tokenizer=tokenizer)
        return load_remote(model, revision=revision, prepend_bos=prepend_bos, self_check=self_check)
    if remote not in (False, "local", None):
        raise ModelLoadError(f"remote must be True, 'local' or False, not {remote!r}")
    hf, tok, name, folder = read_weights(
        model, revision, tokenizer, dtype, device, cache, verify_cache
    )
    family, inferred = resolve_family(hf, name, family)
    wrapped = wrap_model(
        hf, tokenizer or tok, name=name, revision=revision, prepend_bos=prepend_bos, family=family
    )
    _record_provenance(wrapped, cache, folder)
    if inferred:
        check_inferred(wrapped)
    elif self_check:
        _self_check_cached(wrapped, folder)
    if remote == "local":
        simulate(wrapped)
        if self_check:
            probe_capture(wrapped)
    return wrapped


def _record_provenance(
    wrapped: Model, cache: str | os.PathLike | None, folder: Path | None
) -> None:
    spec = EMBEDDED.get(wrapped.name)  # what its checkpoint is: base or instruction-tuned
    wrapped.training = spec.training if spec else None
    wrapped.weights_sha256 = weights_digest(wrapped.name, cache) if folder is not None else None


def _refuse_local_options(model: Any, **local: Any) -> None:
    chosen = [name for name, value in local.items() if value is not None]
    if chosen:
        raise ModelLoadError(
            f"remote=True runs NDIF's own copy of {model}: its dtype and device are the "
            "deployment's and its tokenizer comes from the Hub id; drop " + ", ".join(chosen)
        )
    packaged = embedded(model) if model is not None else None
    if packaged is not None:
        served = SERVED.get(packaged.name)
        raise ModelLoadError(
            f"{model} is an embedded short name, loaded here from registry packages; "
            "remote=True needs the Hugging Face id NDIF serves"
            + (f": {served}" if served else f" (e.g. {SERVED[DEFAULT_MODEL_NAME]})")
        )


def _self_check_cached(wrapped: Model, folder: Path | None) -> None:
    try:
        self_check_model(wrapped)
    except SelfCheckError as exc:
        if folder is None:
            raise
        raise SelfCheckError(
            f"{exc}\n{wrapped.name} was read from the cache folder {folder}; if it is damaged, "
            f"clear it with: rm -rf {folder} (the next load converts it again)"
        ) from None

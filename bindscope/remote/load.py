"""Remote loading: a meta-device model from the Hub's config, run on NDIF, and its self-check."""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch

from bindscope import nnsight_private
from bindscope.errors import ModelLoadError, RemoteJobError, SelfCheckError
from bindscope.families import family_for_config
from bindscope.interventions import ops
from bindscope.protocols import LanguageModel
from bindscope.remote.preflight import check_backend
from bindscope.remote.shipping import register_shipped
from bindscope.remote.transport import NdifBackend
from bindscope.selfcheck import (
    PROBE_TEXT,
    check_ablation_effect,
    check_causal,
    row_sum_tolerance,
    softmax_dtype,
)
from bindscope.wrap import wrap_model


def _build_meta(model_id: str, revision: str | None):
    # heavy: nnsight and transformers load when a remote model is built
    from nnsight import TransformersModel
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    try:
        config = AutoConfig.from_pretrained(model_id, revision=revision)
        tokenizer = AutoTokenizer.from_pretrained(model_id, revision=revision)
    except Exception as exc:
        label = model_id + (f"@{revision}" if revision else "")
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        raise ModelLoadError(
            f"Could not read the config and tokenizer of {label} ({reason}). Remote models "
            "are built from the Hub's config and tokenizer, so check the id and that "
            "huggingface.co is reachable."
        ) from None
    family = family_for_config(config, model_name=model_id)
    # The tokenizer is passed in: with transformers 5 nnsight 0.8.1's meta build cannot
    # tell that a text-generation pipeline needs one ("Impossible to guess which tokenizer").
    envoy = TransformersModel(
        model_id,
        revision=revision,
        task="text-generation",
        tokenizer=tokenizer,
        rename=dict(family.rename),
    )
    # The server generates with the checkpoint's own settings (its EOS ids included).
    with contextlib.suppress(Exception):
        generation = GenerationConfig.from_pretrained(model_id, revision=revision or "main")
        nnsight_private.underlying_module(envoy).generation_config = generation
    return envoy


def _check_id(model_id: object) -> None:
    if model_id is None:
        raise ModelLoadError(
            "remote=True needs a Hugging Face id that NDIF serves (e.g. "
            "'HuggingFaceTB/SmolLM2-135M-Instruct', which `bindscope ndif up` serves); the "
            "default SmolLM2 runs locally without --remote"
        )
    if not isinstance(model_id, str):
        raise ModelLoadError(
            f"remote=True needs a Hugging Face id string, not a loaded {type(model_id).__name__}; "
            "NDIF runs its own copy of the weights"
        )
    if Path(model_id).exists():
        raise ModelLoadError(
            f"{model_id} is a local folder; NDIF can only run models it serves by Hub id. "
            "Run local folders without --remote."
        )


def load_remote(
    model_id: str,
    *,
    revision: str | None = None,
    prepend_bos: bool | None = None,
    self_check: bool = True,
):
    """Build a ``Model`` whose traces run on NDIF (``load_model(..., remote=True)``)."""
    _check_id(model_id)
    revision = None if revision == "main" else revision
    info = check_backend(model_id, revision)
    envoy = _build_meta(model_id, revision)
    model = wrap_model(
        nnsight_private.underlying_module(envoy),
        envoy.tokenizer,
        name=model_id,
        revision=revision,
        prepend_bos=prepend_bos,
        nnsight_model=envoy,
        remote="ndif",
    )
    register_shipped()
    model.trace_options = {"backend": NdifBackend(envoy, model_name=model_id)}
    model.remote_info = info
    if self_check:
        probe_capture(model)
    return model


def _run_probe(model: LanguageModel) -> dict:
    ids = model.tokenize(PROBE_TEXT)
    batch = model.encode([ids, ids])
    with torch.no_grad(), model.eager(), model.nnsight.trace(**batch.inputs, **model.trace_options):
        result = ops.probe(model)
    return result


def probe_capture(model: LanguageModel) -> dict:
    """Check capture and ablation remotely with one small request; fall back if needed.

    Without attention weights under eager attention, ``model.capture_fallback`` records why
    and probabilities are recomputed from queries and keys from then on.
    """
    where = f"{model.name} (family {model.family}, remote {model.remote})"
    try:
        result = _run_probe(model)
    except RemoteJobError as exc:
        if "attention implementation" not in str(exc) and "cannot switch" not in str(exc):
            raise
        model.capture_fallback = f"the server could not switch to eager attention: {exc}"
        result = _run_probe(model)
    stats = result["stats"]  # [L, 3]: present, row-sum error, upper triangle
    missing = [layer for layer in range(len(stats)) if float(stats[layer, 0]) == 0.0]
    if missing and not model.capture_fallback:
        model.capture_fallback = (
            f"no attention weights came back under eager attention (layers {missing}); "
            "probabilities are recomputed from queries and keys"
        )
        result = _run_probe(model)
        stats = result["stats"]
    if (stats[:, 0] == 0).any():
        raise SelfCheckError(f"{where}: attention probabilities could not be captured")
    row_error, upper = float(stats[:, 1].max()), float(stats[:, 2].max())
    # NDIF's deployment dtype is not visible from here: bound rows by the coarsest it may use
    weights = torch.bfloat16 if model.remote == "ndif" else model.dtype
    dtype = softmax_dtype(weights, model.capture_method)  # the softmax's own rounding
    bound = row_sum_tolerance(dtype, len(model.tokenize(PROBE_TEXT)))
    if row_error > bound:
        raise SelfCheckError(
            f"{where}: attention rows sum to 1 +- {row_error:.2e}, beyond the {bound:.1e} that "
            f"rounding in {dtype} explains; the captured tensor is not a softmax"
        )
    check_causal(where, upper)
    effect = float(result["effect"])
    check_ablation_effect(where, effect, model)
    return {"row_sum_error": row_error, "upper_triangle": upper, "ablation_effect": effect}

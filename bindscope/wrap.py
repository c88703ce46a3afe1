"""Wrap a loaded transformers model as a ``Model``, with its family row."""

from __future__ import annotations

import warnings
from typing import Any

from bindscope.errors import SelfCheckError, UnsupportedModelError
from bindscope.families import REGISTER_HINT, Family, family_for_config, standard_layout_family
from bindscope.model import Model
from bindscope.protocols import LanguageModel
from bindscope.selfcheck import self_check


def resolve_family(hf: Any, name: str, family: Family | None) -> tuple[Family, bool]:
    """The family for ``hf`` and whether it was inferred (then `check_inferred` must run)."""
    if family is not None:
        if not isinstance(family, Family):
            raise TypeError(f"family= takes a bindscope.families.Family, not {family!r}")
        return family, False
    try:
        return family_for_config(hf.config, model_name=name), False
    except UnsupportedModelError:
        inferred = standard_layout_family(hf)
        if inferred is None:
            raise
        return inferred, True


def check_inferred(model: LanguageModel) -> None:
    """Self-check a model wrapped with an inferred family; warn on success, raise otherwise."""
    architecture = type(model.hf).__name__
    try:
        self_check(model)
    except (SelfCheckError, RuntimeError, AttributeError, IndexError) as exc:
        raise UnsupportedModelError(
            f"{model.name}: architecture {architecture} (model_type={model.family!r}) has no "
            f"family row, and the standard Llama layout failed the load-time self-check: {exc}. "
            + REGISTER_HINT
        ) from exc
    warnings.warn(
        f"{model.name}: architecture {architecture} (model_type={model.family!r}) has no "
        "family row; using the standard Llama layout (model.layers[i].self_attn.o_proj, "
        "lm_head), which passed the load-time self-check. Register a Family to silence this.",
        stacklevel=3,
    )


def wrap_model(
    hf: Any,
    tokenizer: Any,
    *,
    name: str,
    revision: str | None,
    prepend_bos: bool | None,
    family: Family | None = None,
    **options: Any,
) -> Model:
    """Wrap a transformers model (with weights or on the meta device) as a ``Model``."""
    family = family or family_for_config(hf.config, model_name=name)
    return Model(
        hf,
        tokenizer,
        family=family,
        name=name,
        revision=revision,
        prepend_bos=prepend_bos,
        **options,
    )

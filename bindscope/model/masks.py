"""The padding mask of eager attention in float64: a fill the float32 softmax can take."""

from __future__ import annotations

from typing import Any

import torch

# The float32 minimum, exact in float64: masks every key it is added to, finite in float32.
_FLOAT32_FILL = torch.finfo(torch.float32).min


def install_float64_padding_fix() -> None:
    """Make transformers' eager float64 mask fill with float32's minimum (idempotent).

    Without it every left-padded row of a float64 model gets NaN probabilities; other dtypes
    keep transformers' own mask, bit for bit.
    """
    # heavy (transformers): imported when a model is built, not for `bindscope --help`
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    original = ALL_MASK_ATTENTION_FUNCTIONS["eager"]
    if getattr(original, "finite_float64_fill", False):
        return

    def eager_mask(*args: Any, dtype: torch.dtype = torch.float32, **kwargs: Any) -> Any:
        mask = original(*args, dtype=dtype, **kwargs)
        if dtype == torch.float64 and isinstance(mask, torch.Tensor) and mask.is_floating_point():
            mask = mask.clamp(min=_FLOAT32_FILL)
        return mask

    eager_mask.finite_float64_fill = True  # type: ignore[attr-defined]
    ALL_MASK_ATTENTION_FUNCTIONS["eager"] = eager_mask

"""What the page shows from a model call: tokens, patterns, next-token logits, logit lens."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from bindscope.model.calls import logit_lens
from bindscope.protocols import LanguageModel
from bindscope.viewer.encode import encode, quantize

__all__ = ["describe", "model_data", "token_labels"]

LENS_LAYERS_AT_ONCE = 4  # a lens over every position is [layers, n, vocab]: a few at a time


def token_labels(model: LanguageModel, ids: Sequence[int]) -> list[str]:
    """Each token as text, with a leading space shown as ``·`` and a newline as ``⏎``."""
    out = []
    for token in ids:
        text = model.tokenizer.decode([token])
        text = text.replace("\n", "⏎") or "∅"  # ∅: a token that decodes to nothing
        out.append("·" + text[1:] if text.startswith(" ") else text)
    return out


def describe(intervene: Any) -> str:
    """A short label of an intervention spec (or list of specs)."""
    specs = intervene if isinstance(intervene, (list, tuple)) else [intervene]
    parts = []
    for spec in specs:
        heads = getattr(spec, "heads", None)
        named = ", ".join(f"L{h[0]}.H{h[1]}" for h in heads) if heads else ""
        parts.append(f"{type(spec).__name__}({named})" if named else type(spec).__name__)
    return " + ".join(parts)


def _top(values: torch.Tensor, model: LanguageModel, k: int) -> list[list[Any]]:
    probs = torch.softmax(values.double(), dim=-1)
    top = torch.topk(probs, k)
    labels = token_labels(model, top.indices.tolist())
    return [[t, round(float(p), 4)] for t, p in zip(labels, top.values)]


def _run(
    model: LanguageModel, text: str, intervene: Any, k: int, clean: np.ndarray | None
) -> tuple[dict, np.ndarray]:
    # heads whose patterns equal ``clean``'s are left out
    probs = model.attention_probs([text], intervene=intervene)[0]  # [L, H, n, n]
    n = probs.shape[-1]
    steps = quantize(probs.reshape(-1, n, n).float().numpy())  # [L*H, n(n+1)/2]
    logits = model.logits([text], intervene=intervene)[0][-1]  # [vocab]
    if clean is None:
        run: dict[str, Any] = {"label": "clean", "same": None, "patterns": encode(steps)}
    else:
        same = (steps == clean).all(axis=1)
        kept = encode(steps[~same])
        run = {"label": describe(intervene), "same": [int(s) for s in same], "patterns": kept}
    return {"top": _top(logits, model, k)} | run, steps


def _lens(model: LanguageModel, text: str, k: int) -> dict:
    rows = []
    for start in range(0, model.n_layers, LENS_LAYERS_AT_ONCE):
        layers = list(range(start, min(start + LENS_LAYERS_AT_ONCE, model.n_layers)))
        lens = logit_lens(model, [text], layers, positions=None)[0]  # [len(layers), n, vocab]
        rows += [[_top(position, model, k) for position in per_layer] for per_layer in lens]
    return {"k": k, "top": rows}


def model_data(
    model: LanguageModel, text: str, *, intervene: Any = None, top_k: int = 8, lens_k: int = 3
) -> dict:
    """The page's model part: geometry, tokens, the clean run, the intervened run, the lens."""
    ids = model.tokenize(text)
    clean, steps = _run(model, text, None, top_k, None)
    runs = [clean]
    if intervene is not None:
        runs.append(_run(model, text, intervene, top_k, steps)[0])
    shape = ("name", "n_layers", "n_heads", "n_kv_heads")
    return {
        "model": {key: getattr(model, key) for key in shape},
        "text": text,
        "tokens": token_labels(model, ids),
        "runs": runs,
        "lens": _lens(model, text, lens_k),
    }

"""Tiny one-layer models with a planted answer-carrying head, for C5's power and null tests."""

from __future__ import annotations

import dataclasses
import math

import torch

from bindscope.prompts import PromptRecord
from bindscope.runners.behaviour import recognition
from bindscope.runners.binding import binding
from tests.conftest import tiny_config
from tests.experiments import prompts_tiny

N_HEADS = 8


def one_layer_model(tokenizer, seed: int = 0):
    """A 1-layer, 8-head Llama: its attention probabilities do not depend on any o_proj."""
    from transformers import AutoModelForCausalLM

    import bindscope

    cfg = tiny_config("llama")
    cfg.num_hidden_layers = 1
    cfg.num_attention_heads = N_HEADS
    cfg.num_key_value_heads = N_HEADS
    cfg.head_dim = cfg.hidden_size // N_HEADS
    torch.manual_seed(seed)
    hf = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").eval()
    return bindscope.load_model(hf, tokenizer=tokenizer)


def top_head(model, records) -> int:
    """The head with the highest mean BSI over the records (layer 0)."""
    results = [r for r in binding(model, records) if not math.isnan(r.eb_star)]
    return int(torch.stack([r.bsi for r in results]).mean(0)[0].argmax())


def plant(model, head: int | None, *, up: float = 20.0, down: float = 0.02) -> None:
    """Scale o_proj's input columns: ``head`` by ``up``, every other head by ``down``.

    With ``head=None`` every head is scaled down (the null model: no head matters).
    """
    o_proj = model.hf.model.layers[0].self_attn.o_proj
    d = model.head_dim
    with torch.no_grad():
        for h in range(model.n_heads):
            o_proj.weight[:, h * d : (h + 1) * d] *= up if h == head else down


def answered_by_model(model, records: list[PromptRecord]) -> list[PromptRecord]:
    """Recognition records whose answer is the model's own baseline choice (accuracy 1)."""
    out = []
    preds = iter(recognition(model, [r for r in records if r.task == "recognition"]))
    for r in records:
        if r.task == "recognition":
            r = dataclasses.replace(r, answer_idx=next(preds).prediction)
        out.append(r)
    return out


def prompt_rows() -> list[dict]:
    """The tiny prompt set with more recognition items (more power per condition)."""
    rows = prompts_tiny.records()
    extra = []
    for row in rows:
        if row["task"] == "recognition" and len(row["choices"]) == 4:
            twin = dict(row, prompt_id=row["prompt_id"].replace("rec", "rex"))
            twin["template"] = "Quick check. " + row["template"]
            extra.append(twin)
    return rows + extra

"""The metrics attribution patching differentiates, and their tensors for the trace body."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from bindscope.errors import InputError, whole_number
from bindscope.protocols import LanguageModel
from bindscope.runners.prefix import keeps_logits

__all__ = ["LogitDifference", "Metric", "TargetLogprob", "check_metrics", "metric_terms"]


@dataclass(frozen=True)
class TargetLogprob:
    """Mean log-probability per token of a text's last ``n_target`` tokens."""

    n_target: int = 1

    def __post_init__(self) -> None:
        fix = "pass the number of target tokens at the text's end, e.g. TargetLogprob(1)"
        whole_number(self.n_target, "n_target", fix, least=1)


@dataclass(frozen=True)
class LogitDifference:
    """``logit(correct) - logit(wrong)`` at the text's last position (ids or one-token strings)."""

    correct: int | str
    wrong: int | str


Metric = TargetLogprob | LogitDifference


def token_id(model: LanguageModel, token: int | str, what: str = "token") -> int:
    """A token id, or the id of a one-token string (``what`` names it in the error)."""
    if isinstance(token, str):
        ids = model.tokenizer(token, add_special_tokens=False)["input_ids"]
        if len(ids) != 1:
            raise InputError(
                f"{model.name}: {what} {token!r} is {len(ids)} tokens; pass "
                "one token (e.g. ' Paris') or its id"
            )
        return int(ids[0])
    vocab = model.hf.get_output_embeddings().weight.shape[0]  # the logits' width
    fix = "pass an id from model.tokenizer.encode(' Paris') or a one-token string (' Paris')"
    return whole_number(token, f"{model.name}: {what}", fix, least=0, below=vocab)


def check_metrics(model: LanguageModel, metric: object, lengths: list[int]) -> list[Metric]:
    """One checked metric per text (token strings resolved to ids)."""
    metrics = list(metric) if isinstance(metric, (list, tuple)) else [metric] * len(lengths)
    if len(metrics) != len(lengths):
        raise InputError(f"{len(metrics)} metrics for {len(lengths)} texts; give one per text")
    out: list[Metric] = []
    for i, (m, n) in enumerate(zip(metrics, lengths)):
        if isinstance(m, TargetLogprob):
            if not 0 < m.n_target < n:
                raise InputError(
                    f"text #{i} has {n} tokens: TargetLogprob(n_target={m.n_target}) needs "
                    "at least one target token and a prompt before it"
                )
            out.append(m)
        elif isinstance(m, LogitDifference):
            ids = (token_id(model, t, "LogitDifference token") for t in (m.correct, m.wrong))
            out.append(LogitDifference(*ids))
        else:
            raise InputError(
                f"metric #{i} is a {type(m).__name__}; pass TargetLogprob(n_target) or "
                "LogitDifference(correct, wrong)"
            )
    return out


def metric_terms(
    metrics: Sequence[Metric], ids: torch.Tensor, *, every_logit: bool = False
) -> tuple[dict, int]:
    """The metric's terms (``ops.metric_values``) over left-padded ``ids`` and the logits to keep.

    The terms index the last ``keep`` logits, or all with ``every_logit``.
    """
    keep = max(m.n_target + 1 if isinstance(m, TargetLogprob) else 1 for m in metrics)
    b, width = ids.shape
    first = 0 if every_logit else width - keep  # the column of the first logit indexed
    t = max((m.n_target for m in metrics if isinstance(m, TargetLogprob)), default=0)
    logprob = [torch.zeros(b, t, dtype=torch.long) for _ in range(2)] + [torch.zeros(b, t)]
    logit = [torch.zeros(b, 2, dtype=torch.long) for _ in range(2)] + [torch.zeros(b, 2)]
    for r, m in enumerate(metrics):
        if isinstance(m, TargetLogprob):
            columns = torch.arange(width - m.n_target, width)  # of the target tokens
            logprob[0][r, : m.n_target] = columns - 1 - first  # the logits predicting them
            logprob[1][r, : m.n_target] = ids[r, columns]
            logprob[2][r, : m.n_target] = 1.0 / m.n_target
        else:
            logit[0][r] = width - 1 - first
            logit[1][r] = torch.tensor([int(m.correct), int(m.wrong)])
            logit[2][r] = torch.tensor([1.0, -1.0])
    terms = {}
    if t:
        terms["logprob"] = tuple(logprob)
    if any(isinstance(m, LogitDifference) for m in metrics):
        terms["logit"] = tuple(logit)
    return terms, keep


def logit_terms(model: LanguageModel, metrics: Sequence[Metric], ids: torch.Tensor) -> tuple:
    """`metric_terms` and the forward's options keeping only their logits (where it can)."""
    keeps = keeps_logits(model)
    terms, keep = metric_terms(metrics, ids, every_logit=not keeps)
    return terms, {"logits_to_keep": keep} if keeps else {}

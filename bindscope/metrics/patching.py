"""The measures every patching study reads off logits: logit difference and per-token loss."""

from __future__ import annotations

import torch

__all__ = ["logit_diff", "token_loss"]


def logit_diff(logits: torch.Tensor, correct: int, wrong: int, *, position: int = -1) -> float:
    """``logits[position, correct] - logits[position, wrong]`` of one text's ``[n, vocab]``."""
    row = logits[position].float()
    return float(row[correct] - row[wrong])


def token_loss(logits: torch.Tensor, ids: list[int] | torch.Tensor) -> torch.Tensor:
    """Per-token cross-entropy ``[n - 1]`` of one text: entry ``t`` predicts ``ids[t + 1]``."""
    ids = torch.as_tensor(ids, dtype=torch.long, device=logits.device)
    if logits.shape[0] != ids.shape[0]:
        raise ValueError(f"{logits.shape[0]} logit rows for {ids.shape[0]} tokens")
    logp = logits[:-1].float().log_softmax(-1)
    return -logp.gather(-1, ids[1:, None]).squeeze(-1)

"""Left-padded batches of token ids, and the checks on what goes into them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from bindscope.errors import InputError, PromptTooLongError, is_whole, whole_number

T = TypeVar("T")

DEFAULT_BATCH_SIZE = 16
#: A decoding step reads every weight once whatever the batch: 64 rows generate 1.5x faster
#: per row than 16 (benchmarks/README.md).
GENERATION_BATCH_SIZE = 64
#: Batches per nnsight session (one request when remote; a failed one loses at most these).
SESSION_BATCHES = 8


@dataclass(frozen=True)
class Batch:
    """A left-padded ``[b, n]`` batch; ``indices``: the texts' positions in the caller's list."""

    indices: list[int]
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    lengths: list[int]

    @property
    def inputs(self) -> dict[str, torch.Tensor]:
        """Keyword inputs for ``model.nnsight.trace(**batch.inputs)``."""
        return {
            name: getattr(self, name) for name in ("input_ids", "attention_mask", "position_ids")
        }

    def pad(self, row: int) -> int:
        """Number of pad tokens in front of ``row``."""
        return self.input_ids.shape[1] - self.lengths[row]

    def rows(self, picked: torch.Tensor) -> Batch:
        """The batch of the given rows (repeats allowed), as wide as this one."""
        chosen = picked.tolist()
        return Batch(
            [self.indices[r] for r in chosen],
            self.input_ids[picked],
            self.attention_mask[picked],
            self.position_ids[picked],
            [self.lengths[r] for r in chosen],
        )


def check_texts(texts: Any, name: str = "text") -> list:
    """The texts as a list, each a string or a list of token ids (raises ``InputError``)."""
    if isinstance(texts, str):
        raise InputError(
            f"pass a list of {name}s, e.g. ['In web accessibility, alt text is'], not a string"
        )
    try:
        texts = list(texts)
    except TypeError:
        raise InputError(
            f"{name}s is a {type(texts).__name__}; pass a list of strings, e.g. ['Alt text is']"
        ) from None
    if not texts:
        raise InputError(f"the list of {name}s is empty; pass at least one prompt")
    for i, text in enumerate(texts):
        check_text(text, f"{name} #{i}")
    return texts


def check_text(text: Any, name: str) -> None:
    """Refuse ``text`` unless it is a string or a list of token ids (``InputError``)."""
    if not isinstance(text, str) and not (
        isinstance(text, (list, tuple)) and all(map(is_whole, text))
    ):
        raise InputError(
            f"{name} is {text!r} ({type(text).__name__}); each text must be a string "
            "(or a list of token ids)"
        )


def token_ids(model: Any, text: str | Sequence[int]) -> list[int]:
    """A text's token ids; a list of token ids is checked and returned (raises ``InputError``)."""
    if isinstance(text, str):
        return model.tokenize(text)
    check_text(text, "the text")
    return [int(t) for t in text]


def check_rows(
    indices: Sequence[int],
    rows: Sequence[Sequence[int]],
    *,
    model_name: str,
    vocab_size: int,
    context_length: int | None,
) -> None:
    """Refuse a row the model cannot run: empty, ids outside the vocabulary, too long."""
    for index, row in zip(indices, rows):
        if not row:
            raise InputError(f"{model_name}: text #{index} tokenizes to nothing")
        bad = [t for t in row if not 0 <= t < vocab_size]
        if bad:
            raise InputError(
                f"{model_name}: text #{index} holds token id(s) {bad[:3]} outside the "
                f"vocabulary (0 to {vocab_size - 1}); pass ids from the model's tokenizer"
            )
        if context_length and len(row) > context_length:
            raise PromptTooLongError(
                f"{model_name}: text #{index} is {len(row)} tokens, longer than the model's "
                f"context window of {context_length}; shorten or split it"
            )


def widened(tensor: torch.Tensor) -> torch.Tensor:
    """Outputs as the API returns them: float32, or float64 from a float64 model."""
    return tensor.to(torch.promote_types(tensor.dtype, torch.float32))


def check_batch_size(
    batch_size: object, name: str = "batch_size", example: int = DEFAULT_BATCH_SIZE
) -> None:
    """Refuse a batch size that is not a positive integer, naming ``name`` and ``example``."""
    whole_number(batch_size, name, f"pass the texts per batch, e.g. {name}={example}", least=1)


def sessions(jobs: Sequence[T], size: int = SESSION_BATCHES) -> Iterator[list[T]]:
    """Consecutive groups of at most ``size`` jobs, one nnsight session each."""
    for start in range(0, len(jobs), size):
        yield list(jobs[start : start + size])


def read_positions(positions: object, *, what: str = "positions") -> tuple[int, ...] | None:
    """``positions=`` of a reading call as a tuple of integers (None: every position)."""
    if positions is None:
        return None
    if is_whole(positions):
        return (int(positions),)
    items = list(positions) if isinstance(positions, (list, tuple, range)) else None
    if not items or not all(map(is_whole, items)):
        raise InputError(
            f"{what}={positions!r} is not a position or a list of them; pass token positions "
            "of the unpadded text, e.g. -1 (the last token) or [0, 5, -1], or None for all"
        )
    return tuple(int(p) for p in items)


def absolute_positions(
    positions: tuple[int, ...], n: int, *, model_name: str, text: str, what: str = "positions"
) -> list[int]:
    """``positions`` of the text named ``text`` of ``n`` tokens, counted from its start."""
    out = [p + n if p < 0 else p for p in positions]
    bad = [p for p, q in zip(positions, out) if not 0 <= q < n]
    if bad:
        raise InputError(
            f"{model_name}: {what} {bad} are outside {text} ({n} tokens: positions "
            f"0..{n - 1}, or -{n}..-1 from the end)"
        )
    return out

"""What the layers below ``bindscope.model`` may use of a model, as typing protocols."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

    from bindscope.batch import Batch
    from bindscope.families import Family

HeadPair = tuple[int, int]


class TraceTarget(Protocol):
    """What trace primitives read of a model: the renamed nnsight model and head geometry."""

    nnsight: Any
    name: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_model: int
    d_mlp: int
    # each layer's attention q.k scale (the scores site; None: 1/sqrt(head_dim))
    attention_scaling: tuple[float | None, ...]
    # the final logit soft-capping after the LM head (None: none)
    logit_softcap: float | None
    # {site: (module, port, index)} in a decoder layer's execution order
    sites: dict[str, tuple[str, str, int]]

    @property
    def capture_mode(self) -> str:
        """``eager`` or ``recompute``."""

    @property
    def knockout_site(self) -> tuple[str, int]:
        """The attention call's ``.source`` label and mask argument index."""

    def check_heads(self, heads: Any) -> tuple[HeadPair, ...]:
        """Validated, sorted ``(layer, head)`` pairs."""


class LanguageModel(TraceTarget, Protocol):
    """What ``bindscope.Model`` offers the layers below it (see the class for each member)."""

    hf: Any
    tokenizer: Any
    family: str
    family_row: Family
    revision: str | None
    remote: bool | str
    prepend_bos: bool
    trace_options: dict
    capture_fallback: str | None
    remote_info: dict | None
    input_error: type[Exception]

    @property
    def dtype(self) -> torch.dtype:
        """The weights' dtype."""

    @property
    def context_length(self) -> int | None:
        """The longest sequence the model takes (None: not stated)."""

    @property
    def attn_implementation(self) -> str:
        """The attention implementation the model runs now."""

    @property
    def capture_method(self) -> str:
        """How capture runs inside ``eager()`` record their probabilities."""

    @property
    def attention_call_label(self) -> str:
        """The ``.source`` label of the attention-function call."""

    def tokenize(self, text: str, *, offsets: bool = False) -> Any:
        """Token ids (and with ``offsets``, character spans) of one text."""

    def encode(self, texts: Sequence[str] | Sequence[Sequence[int]]) -> Batch:
        """Left-pad texts into one batch."""

    def batches(
        self, texts: Sequence[str] | Sequence[Sequence[int]], *, batch_size: int = ...
    ) -> Iterator[Batch]:
        """Left-padded batches of similar-length texts."""

    def pad(self, indices: list[int], rows: list[list[int]]) -> Batch:
        """Left-pad token-id rows into one batch (``indices``: the rows' text indices)."""

    def trace_batch(self, planned: Any, body: Callable[..., Any], **options: Any) -> Any:
        """Run ``body(donors)`` on a planned batch (donor rows first, in their own invoke)."""

    def check_layers(self, layers: Iterable[int] | None) -> list[int]:
        """Validated, sorted layer indices (None: all)."""

    def eager(self) -> AbstractContextManager[None]:
        """Run the body under eager attention."""

    def trace_order_error(self, exc: Exception) -> Exception | None:
        """Nnsight's ``OutOfOrderError`` as an ``InterventionOrderError``."""

    # the high-level calls; their signatures live once, in model/calls.py and generation.py
    attention_probs: Callable[..., list[torch.Tensor]]
    logits: Callable[..., list[torch.Tensor]]
    capture: Callable[..., list[dict[str, dict[int, torch.Tensor]]]]
    generate_ids: Callable[..., list[list[int]]]

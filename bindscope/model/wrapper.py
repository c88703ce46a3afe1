"""The ``Model`` wrapper: one nnsight ``TransformersModel`` plus the family's head geometry."""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch

from bindscope.batch import (
    DEFAULT_BATCH_SIZE,
    Batch,
    check_batch_size,
    check_rows,
    check_texts,
    token_ids,
)
from bindscope.errors import InputError
from bindscope.families import Family, dims_from_config
from bindscope.interventions import head_weights, ops
from bindscope.interventions.head_checks import Head, normalize_heads
from bindscope.model import cache, calls, checks, generation
from bindscope.model.masks import install_float64_padding_fix


class Model:
    """A causal language model wrapped for attention capture and head ablation (`load_model`)."""

    # what trace primitives raise for misuse (a body shipped to NDIF raises ValueError)
    input_error: type[Exception] = InputError

    def __init__(
        self,
        hf_model: Any,
        tokenizer: Any,
        *,
        family: Family,
        name: str,
        revision: str | None = None,
        prepend_bos: bool | None = None,
        nnsight_model: Any = None,
        remote: bool | str = False,
    ) -> None:
        # heavy (about 0.5 s): nnsight loads when a model is built, not for `bindscope --help`
        from nnsight import TransformersModel

        install_float64_padding_fix()
        self.hf = hf_model
        self.family = family.name
        self.family_row = family
        self.name = name
        self.revision = revision
        self._read_dimensions(hf_model.config)
        self._use_tokenizer(tokenizer, prepend_bos)
        # nnsight's transformers pipeline moves the module to the first accelerator it finds
        # (cuda:0, mps) unless told a device: the weights stay where load_model put them
        self.nnsight = nnsight_model or TransformersModel(
            hf_model, tokenizer=tokenizer, rename=dict(family.rename), device=hf_model.device
        )
        self.sites = checks.check_sites(self.nnsight, family, model_name=name)
        self.attention_scaling = checks.attention_scaling(self.nnsight, self.sites)
        self._init_run_state(remote)

    def _read_dimensions(self, config: Any) -> None:
        dims = dims_from_config(config)
        self.n_layers, self.n_heads = dims.n_layers, dims.n_heads
        self.n_kv_heads, self.head_dim = dims.n_kv_heads, dims.head_dim
        self.d_model, self.d_mlp = dims.d_model, dims.d_mlp
        self.logit_softcap: float | None = getattr(config, "final_logit_softcapping", None) or None

    def _use_tokenizer(self, tokenizer: Any, prepend_bos: bool | None) -> None:
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.tokenizer = tokenizer
        probe = tokenizer("a", add_special_tokens=True)["input_ids"]
        bos = tokenizer.bos_token_id
        self.tokenizer_adds_bos = bos is not None and probe[:1] == [bos]
        self.prepend_bos = self.tokenizer_adds_bos if prepend_bos is None else prepend_bos
        if self.prepend_bos and tokenizer.bos_token_id is None:
            raise InputError(f"{self.name}: prepend_bos=True but the tokenizer has no BOS token")

    def _init_run_state(self, remote: bool | str) -> None:
        # bindscope.remote sets the remote fields, load_model the embedded model's provenance
        self.remote: bool | str = remote  # False, "ndif" or "local" (simulated NDIF)
        self.training: str | None = None
        self.weights_sha256: str | None = None
        self._call_label: str | None = None
        self.trace_options: dict = {}  # extra keywords of every trace (the remote backend)
        # why probabilities are recomputed from q and k (None: eager attention works)
        self.capture_fallback: str | None = None
        self.remote_info: dict | None = None

    def tokenize(self, text: str, *, offsets: bool = False):
        """Token ids of one text, BOS per ``prepend_bos`` (``offsets``: also character spans)."""
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=offsets)
        ids = list(enc["input_ids"])
        spans = [tuple(o) for o in enc["offset_mapping"]] if offsets else []
        if self.prepend_bos:
            ids, spans = [self.tokenizer.bos_token_id, *ids], [(0, 0), *spans]
        return (ids, spans) if offsets else ids

    def to_str_tokens(self, text: str | Sequence[int]) -> list[str]:
        """Each token of a text or id list as the string it adds to the decoded prefix."""
        ids = token_ids(self, text)
        prefixes = [self.tokenizer.decode(ids[:end]) for end in range(len(ids) + 1)]
        # commonprefix compares characters, which is what a decoded prefix needs
        common = [len(os.path.commonprefix(pair)) for pair in itertools.pairwise(prefixes)]  # noqa: RUF071
        return [after[n:] for after, n in zip(prefixes[1:], common)]

    def encode(self, texts: Sequence[str] | Sequence[Sequence[int]]) -> Batch:
        """Left-pad texts (or pre-tokenized id lists) into one batch."""
        rows = [token_ids(self, t) for t in check_texts(texts)]
        return self.pad(list(range(len(rows))), rows)

    def pad(self, indices: list[int], rows: list[list[int]]) -> Batch:
        """Left-pad token-id rows into one batch; ``indices`` are the rows' text indices."""
        vocab = self.hf.get_input_embeddings().num_embeddings
        window = self.context_length
        check_rows(indices, rows, model_name=self.name, vocab_size=vocab, context_length=window)
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, width - len(row) :] = torch.tensor(row)
            mask[i, width - len(row) :] = 1
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
        return Batch(indices, ids, mask, position_ids, [len(r) for r in rows])

    def batches(
        self,
        texts: Sequence[str] | Sequence[Sequence[int]],
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> Iterator[Batch]:
        """Yield left-padded batches, grouping texts of similar length to cut padding."""
        check_batch_size(batch_size)
        rows = [token_ids(self, t) for t in check_texts(texts)]
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            yield self.pad(chunk, [rows[i] for i in chunk])

    def check_heads(self, heads: Iterable[Sequence[int]] | None) -> tuple[Head, ...]:
        """Validate ``(layer, head)`` pairs against this model (raises ``HeadSpecError``)."""
        return normalize_heads(
            heads, n_layers=self.n_layers, n_heads=self.n_heads, model_name=self.name
        )

    @property
    def dtype(self) -> torch.dtype:
        """The weights' dtype (the precision every forward runs in)."""
        return next(self.hf.parameters()).dtype

    @property
    def context_length(self) -> int | None:
        """The longest sequence the model takes, from its config (None: not stated)."""
        config = self.hf.config
        for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
            value = getattr(config, name, None)
            if isinstance(value, int) and value > 0:
                return value
        return None

    @property
    def attn_implementation(self) -> str:
        """The attention implementation the model runs now."""
        return self.hf.config._attn_implementation

    @property
    def capture_mode(self) -> str:
        """How a capture would read probabilities *now*: ``eager`` or ``recompute`` (from q, k)."""
        if self.capture_fallback or self.attn_implementation != "eager":
            return "recompute"
        return "eager"

    @property
    def capture_method(self) -> str:
        """How capture runs (inside ``eager()``) record their probabilities."""
        return "recompute" if self.capture_fallback else "eager"

    @contextlib.contextmanager
    def eager(self) -> Iterator[None]:
        """Run the body under eager attention (unless after a capture fallback), then restore."""
        previous = self.attn_implementation
        if previous != "eager" and not self.capture_fallback:
            self.hf.set_attn_implementation("eager")
        try:
            yield
        finally:
            if self.attn_implementation != previous:
                self.hf.set_attn_implementation(previous)

    def _source_labels(self, prefix: str) -> list[str]:
        listing = str(ops.attention_module(self, 0).source)
        return [line.split()[0] for line in listing.splitlines() if line.strip().startswith(prefix)]

    @property
    def knockout_site(self) -> tuple[str, int]:
        """Where ``Knockout`` edits the mask: the attention call's label and mask index."""
        # GPT-2 with reorder_and_upcast_attn runs its own method (mask: 4th argument)
        if self.attn_implementation == "eager" and getattr(
            self.hf.config, "reorder_and_upcast_attn", False
        ):
            labels = self._source_labels("self__upcast_and_reordered_attn_")
            if labels:
                return labels[-1], 3
        return self.attention_call_label, 4

    @property
    def attention_call_label(self) -> str:
        """The ``.source`` label of the attention-function call (version-robust lookup)."""
        if self._call_label is None:
            labels = self._source_labels("attention_interface_")
            if not labels:
                raise RuntimeError(
                    f"{self.name} ({self.family}): no attention_interface call found in "
                    f"{ops.attention_module(self, 0).path}.forward; cannot recompute "
                    "probabilities. Use eager attention (model.eager())."
                )
            self._call_label = labels[-1]  # the last one is the call, earlier ones assignments
        return self._call_label

    check_layers = checks.check_layers
    trace_order_error = checks.order_error
    trace_batch = calls.trace_batch
    attention_probs = calls.attention_probs
    bsi = calls.bsi
    logits = calls.logits
    loss = calls.loss
    capture = calls.capture
    logit_lens = calls.logit_lens
    generate = generation.generate
    generate_ids = generation.generate_ids
    run_with_cache = cache.run_with_cache
    ov_circuit = head_weights.ov_circuit
    qk_circuit = head_weights.qk_circuit

    def __reduce__(self):
        # travels to NDIF as an ops.TraceModel (bindscope is not installed on the server):
        # the nnsight model (by its key, no weights) and head geometry, in its FIELDS order
        shipped: dict[str, object] = {"attention_call_label": None, "knockout_site": None}
        shipped["sites"] = dict(self.sites)
        if self.capture_mode == "recompute":
            with contextlib.suppress(RuntimeError):  # only a recompute capture needs it
                shipped["attention_call_label"] = self.attention_call_label
        with contextlib.suppress(RuntimeError):  # only q, k, v and scores need it
            shipped["knockout_site"] = self.knockout_site
        return ops.TraceModel, tuple(
            shipped[n] if n in shipped else getattr(self, n) for n in ops.TraceModel.FIELDS
        )

    def __repr__(self) -> str:
        rev = f"@{self.revision}" if self.revision else ""
        return (
            f"Model({self.name}{rev}, family={self.family}, layers={self.n_layers}, "
            f"heads={self.n_heads}, kv_heads={self.n_kv_heads}, head_dim={self.head_dim})"
        )


# TransformerLens' weight names (W_Q, W_K, W_V, W_O, W_U, their biases) and kv_head
for _name, _view in head_weights.PROPERTIES.items():
    setattr(Model, _name, _view)

"""The ``Model`` wrapper: one nnsight ``TransformersModel`` plus the family's head geometry."""

from __future__ import annotations

import contextlib
import numbers
import re
import warnings
from collections.abc import Iterable, Iterator, Sequence

import torch

from bindscope.batch import DEFAULT_BATCH_SIZE, Batch, check_batch_size, check_texts
from bindscope.errors import HeadSpecError, InputError, InterventionError, InterventionOrderError
from bindscope.families import Family, dims_from_config
from bindscope.interventions import ops, run_layers
from bindscope.interventions.heads import Head, normalize_heads
from bindscope.interventions.plan import PlannedBatch, plan_batches
from bindscope.interventions.specs import resolve_rows

# Batches per generation session (one request when the model is remote).
SESSION_BATCHES = 8


class Model:
    """A causal language model wrapped for attention capture and head ablation.

    Build it with ``bindscope.load_model``. The uniform layout is
    ``model.nnsight.model.layers[i].self_attn.o_proj`` for every family.
    """

    # What trace primitives (``interventions.ops``, which imports no bindscope module)
    # raise for misuse; a body shipped to NDIF sees a TraceModel and raises ValueError.
    input_error = InputError

    def __init__(
        self,
        hf_model,
        tokenizer,
        *,
        family: Family,
        name: str,
        revision: str | None = None,
        prepend_bos: bool | None = None,
        nnsight_model=None,
        remote: bool | str = False,
    ) -> None:
        from nnsight import TransformersModel

        dims = dims_from_config(hf_model.config)
        self.hf = hf_model
        self.family = family.name
        self.family_row = family
        self.name = name
        self.revision = revision
        # False (local), "ndif" or "local" (the remote path simulated in-process); set by
        # bindscope.remote, which also fills trace_options with the matching backend.
        self.remote: bool | str = remote
        self.n_layers, self.n_heads = dims.n_layers, dims.n_heads
        self.n_kv_heads, self.head_dim = dims.n_kv_heads, dims.head_dim
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.tokenizer = tokenizer
        self.nnsight = nnsight_model or TransformersModel(
            hf_model, tokenizer=tokenizer, rename=dict(family.rename)
        )
        probe = tokenizer("a", add_special_tokens=True)["input_ids"]
        self.tokenizer_adds_bos = tokenizer.bos_token_id is not None and (
            probe[:1] == [tokenizer.bos_token_id]
        )
        self.prepend_bos = self.tokenizer_adds_bos if prepend_bos is None else prepend_bos
        if self.prepend_bos and tokenizer.bos_token_id is None:
            raise InputError(f"{name}: prepend_bos=True but the tokenizer has no BOS token")
        self._call_label: str | None = None
        # Extra keyword arguments for every trace, generate and session call (the remote
        # backend when the model runs on NDIF or its simulation).
        self.trace_options: dict = {}
        # Why probabilities are recomputed from q and k instead of read from eager
        # attention (None: eager works). Set by the remote load-time probe.
        self.capture_fallback: str | None = None

    # -- tokenization -------------------------------------------------------------------

    def tokenize(self, text: str, *, offsets: bool = False):
        """Token ids of one text as the model sees it (BOS handled per ``prepend_bos``).

        With ``offsets=True`` returns ``(ids, [(start, end), ...])`` character offsets; a
        prepended BOS gets ``(0, 0)``.
        """
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=offsets)
        ids = list(enc["input_ids"])
        spans = [tuple(o) for o in enc["offset_mapping"]] if offsets else []
        if self.prepend_bos:
            ids, spans = [self.tokenizer.bos_token_id, *ids], [(0, 0), *spans]
        return (ids, spans) if offsets else ids

    def encode(self, texts: Sequence[str] | Sequence[Sequence[int]]) -> Batch:
        """Left-pad texts (or pre-tokenized id lists) into one batch."""
        rows = [t if not isinstance(t, str) else self.tokenize(t) for t in check_texts(texts)]
        return self._pad(list(range(len(rows))), rows)

    def _pad(self, indices: list[int], rows: list[list[int]]) -> Batch:
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            if not row:
                raise InputError(f"{self.name}: text #{indices[i]} tokenizes to nothing")
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
        rows = [t if not isinstance(t, str) else self.tokenize(t) for t in check_texts(texts)]
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            yield self._pad(chunk, [rows[i] for i in chunk])

    # -- heads and attention implementation ----------------------------------------------

    def check_layers(self, layers: Iterable[int] | None) -> list[int]:
        """Validate layer indices (None: all) and return them sorted (raises ``HeadSpecError``)."""
        if layers is None:
            return list(range(self.n_layers))
        if isinstance(layers, (str, bytes)) or not isinstance(layers, Iterable):
            raise HeadSpecError(
                f"{self.name}: layers={layers!r} is not a list of layer indices; pass e.g. "
                "layers=[0, 2], or None for every layer"
            )
        wanted = list(layers)
        if not wanted:
            raise HeadSpecError(
                f"{self.name}: layers=[] selects no layer; pass at least one index in "
                f"0..{self.n_layers - 1}, or layers=None for every layer"
            )
        for layer in wanted:
            if isinstance(layer, bool) or not isinstance(layer, numbers.Integral):
                raise HeadSpecError(
                    f"{self.name}: layer {layer!r} is a {type(layer).__name__}, not an "
                    f"integer; pass layer indices in 0..{self.n_layers - 1}"
                )
            if not 0 <= layer < self.n_layers:
                raise HeadSpecError(
                    f"{self.name}: layer {layer} is out of range; the model has layers "
                    f"0..{self.n_layers - 1}"
                )
        return sorted({int(layer) for layer in wanted})

    def check_heads(self, heads) -> tuple[Head, ...]:
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
        """``eager`` (weights returned by the module) or ``recompute`` (from q and k)."""
        if self.capture_fallback or self.attn_implementation != "eager":
            return "recompute"
        return "eager"

    @property
    def capture_method(self) -> str:
        """How capture runs (inside ``eager()``) record their probabilities."""
        return "recompute" if self.capture_fallback else "eager"

    @contextlib.contextmanager
    def eager(self) -> Iterator[None]:
        """Run the body under eager attention and restore the previous implementation.

        A remote model sends the implementation with every request, so the server switches
        too. After a capture fallback nothing is switched: probabilities are recomputed.
        """
        previous = self.attn_implementation
        if previous != "eager" and not self.capture_fallback:
            self.hf.set_attn_implementation("eager")
        try:
            yield
        finally:
            if self.attn_implementation != previous:
                self.hf.set_attn_implementation(previous)

    def _source_labels(self, prefix: str) -> list[str]:
        listing = str(self.nnsight.model.layers[0].self_attn.source)
        return [line.split()[0] for line in listing.splitlines() if line.strip().startswith(prefix)]

    @property
    def knockout_site(self) -> tuple[str, int]:
        """Where ``Knockout`` edits the mask: the attention call's label and mask index.

        GPT-2 with ``reorder_and_upcast_attn`` runs its own eager attention method instead
        of the attention interface (mask is its 4th argument, not its 5th).
        """
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
                    f"{self.nnsight.model.layers[0].self_attn.path}.forward; cannot recompute "
                    "probabilities. Use eager attention (model.eager())."
                )
            self._call_label = labels[-1]  # the last one is the call, earlier ones assignments
        return self._call_label

    def trace_order_error(self, exc: Exception) -> Exception | None:
        """Translate nnsight's ``OutOfOrderError`` into an ``InterventionOrderError``.

        Returns None when the exception should propagate unchanged.

        At a generation step past the first, nnsight throws the same error to end an open
        ``tracer.all()`` loop and expects it back unchanged, so only step 0 is translated.
        """
        if type(exc).__name__ != "OutOfOrderError":
            return None
        try:
            from greenlet import getcurrent

            if getcurrent().mediator().iteration != 0:
                return None
        except Exception:  # not inside an nnsight worker: nothing to protect
            pass
        # nnsight names the site: 'model.model.layers.0.self_attn.o_proj.input.i0'
        site = str(exc).split("'")[1] if str(exc).count("'") >= 2 else ""
        found = re.search(r"layers\.(\d+)\.", site)
        layer = found.group(1) if found else "?"
        what = (
            "an ablation (zero_ablate / mean_ablate)"
            if "o_proj.input" in site
            else "a capture (capture_attention)"
        )
        return InterventionOrderError(
            f"{self.name}: {what} of layer {layer} came after the trace had already run past "
            f"layer {layer}: an earlier call in the same trace touched a later layer (e.g. "
            "capture_attention(model, [2]) before zero_ablate(model, [(0, 1)])). Inside one "
            "trace call the primitives in execution order, earlier layers before later ones "
            "and a layer's ablation before its capture; or pass both to one "
            "run_layers(model, capture=..., zero=...) call, which orders them for you"
        )

    # -- high-level calls -----------------------------------------------------------------

    def _rows(self, texts, *, intervene=None, per_row=None, ablate=None, means=None):
        """Checked ops per text (``specs.resolve_rows``)."""
        return resolve_rows(
            self, texts, intervene=intervene, per_row=per_row, ablate=ablate, means=means
        )

    def _trace_batch(self, planned: PlannedBatch, body, **options):
        """Run ``body()`` on a planned batch; donors (if any) run first in their own invoke.

        ``body`` applies the plan (and captures); it must return its result saved.
        """
        # plain dicts of tensors only in the body: it ships by value when remote
        env, plan, inputs, donor_inputs = (
            self.nnsight,
            planned.plan,
            planned.batch.inputs,
            planned.donors,
        )
        if donor_inputs is None:
            with env.trace(**inputs, **options, **self.trace_options) as tracer:
                found = body(None)
                tracer.stop()
            return found
        donors: dict = {}  # filled by the first invoke, read by the second
        with env.trace(**options, **self.trace_options) as tracer:
            with tracer.invoke(**donor_inputs):
                ops.donor_outputs(self, plan["donor_layers"], donors)
            with tracer.invoke(**inputs):
                found = body(donors)
                tracer.stop()
            if "knockout_batch" in plan:
                with tracer.invoke():  # the whole batch, donor rows first
                    ops.knock_out_batch(self, plan["knockout_batch"], plan["site"])
        return found

    @torch.no_grad()
    def attention_probs(
        self,
        texts: Sequence[str],
        *,
        layers: Iterable[int] | None = None,
        intervene=None,
        per_row=None,
        ablate=None,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> list[torch.Tensor]:
        """Post-softmax attention per text: ``[n_layers_selected, H, n, n]`` float32.

        Args:
            texts: Prompts.
            layers: Layer indices to capture (default all), ascending in the output.
            intervene: A spec (``Zero``, ``Mean``, ``Patch``, ``Resample``, ``Knockout``) or
                a list of specs applied to every text.
            per_row: One spec, list of specs or ``None`` per text.
            ablate: ``(layer, head)`` pairs zero-ablated (shorthand for ``Zero``).
            batch_size: Texts per forward pass.
        """
        wanted = self.check_layers(layers)
        texts = check_texts(texts)
        rows = self._rows(texts, intervene=intervene, per_row=per_row, ablate=ablate)
        out: list[torch.Tensor | None] = [None] * len(texts)
        with self.eager():
            for planned in plan_batches(self, texts, rows, batch_size=batch_size):
                batch = planned.batch
                if "knockout_batch" in planned.plan and self.capture_mode == "recompute":
                    raise InterventionError(
                        f"{self.name}: capturing probabilities by recomputation sees the "
                        "mask before a Knockout that shares its batch with a Patch; run "
                        "them in separate calls"
                    )

                def body(donors, plan=planned.plan):
                    # bound to a name: a remote run returns only saved values the body binds
                    found = run_layers(self, capture=wanted, plan=plan, donors=donors)
                    return found

                found = self._trace_batch(planned, body)
                stacked = torch.stack([found[layer] for layer in wanted], 1)  # [b, L', H, n, n]
                for row, index in enumerate(batch.indices):
                    pad = batch.pad(row)
                    out[index] = stacked[row, :, :, pad:, pad:].float().contiguous()
        return out  # type: ignore[return-value]

    def bsi(
        self,
        texts: Sequence[str],
        term: str,
        *,
        intervene=None,
        per_row=None,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> list[torch.Tensor]:
        """BSI ``[L, H]`` of ``term`` in each text (NaN when the term is one token).

        The term is found with ``bindscope.prompts.locate`` (plural and alias forms too);
        ``intervene``/``per_row`` as in `attention_probs`.

        Raises:
            SpanNotFoundError: The term is not in a text (the message names it).
        """
        from bindscope.metrics.binding import bsi_from_probs
        from bindscope.prompts.spans import locate

        texts = check_texts(texts)
        spans = [locate(self, t, term, prompt_id=f"#{i}") for i, t in enumerate(texts)]
        probs = self.attention_probs(
            texts, intervene=intervene, per_row=per_row, batch_size=batch_size
        )
        return [bsi_from_probs(p, span.indices) for p, span in zip(probs, spans)]

    @torch.no_grad()
    def logits(
        self,
        texts: Sequence[str],
        *,
        intervene=None,
        per_row=None,
        ablate=None,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> list[torch.Tensor]:
        """Next-token logits ``[n, vocab]`` per text, padding removed.

        ``intervene``, ``per_row`` and ``ablate`` as in `attention_probs`.
        """
        texts = check_texts(texts)
        rows = self._rows(texts, intervene=intervene, per_row=per_row, ablate=ablate)
        out: list[torch.Tensor | None] = [None] * len(texts)
        for planned in plan_batches(self, texts, rows, batch_size=batch_size):
            batch = planned.batch

            def body(donors, plan=planned.plan):
                if plan:
                    run_layers(self, plan=plan, donors=donors)
                logits = self.nnsight.lm_head.output.save()  # [b, n, V]
                return logits

            logits = self._trace_batch(planned, body)
            for row, index in enumerate(batch.indices):
                out[index] = logits[row, batch.pad(row) :].float()
        return out  # type: ignore[return-value]

    def generate(
        self,
        texts: Sequence[str],
        *,
        max_new_tokens: int,
        intervene=None,
        per_row=None,
        ablate=None,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> list[str]:
        """Greedy continuations (prompt excluded), intervening on every decoding step."""
        return [
            self.tokenizer.decode(ids, skip_special_tokens=True)
            for ids in self.generate_ids(
                texts,
                max_new_tokens=max_new_tokens,
                intervene=intervene,
                per_row=per_row,
                ablate=ablate,
                batch_size=batch_size,
            )
        ]

    @torch.no_grad()
    def generate_ids(
        self,
        texts: Sequence[str] | Sequence[Sequence[int]],
        *,
        max_new_tokens: int,
        intervene=None,
        per_row=None,
        ablate=None,
        means=None,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> list[list[int]]:
        """Greedy new token ids per text, cut at the first end-of-sequence token.

        ``intervene``/``per_row`` take ``Zero``, ``Mean`` and ``Knockout`` (edges within
        the prompt); ``Patch`` and ``Resample`` need fixed-length texts and are refused.
        The old forms still work: ``per_row`` as one head list per text, and ``means``
        (from ``head_means``) turning ``ablate`` and head lists into mean-ablation.
        """
        texts = check_texts(texts)
        check_batch_size(batch_size)
        rows = self._rows(texts, intervene=intervene, per_row=per_row, ablate=ablate, means=means)
        for i, row in enumerate(rows):
            if any(op.kind == "donor" for op in row):
                raise InterventionError(
                    f"{self.name}: text #{i}: Patch and Resample act on fixed-length texts, "
                    "not on generation; use them with logits() or attention_probs()"
                )
        out: list[list[int] | None] = [None] * len(texts)
        eos = self.hf.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos]) | {self.tokenizer.eos_token_id}
        kwargs = {
            "max_new_tokens": max_new_tokens,
            "do_sample": False,
            "pad_token_id": self.tokenizer.pad_token_id,
        }
        jobs = []
        for planned in plan_batches(self, texts, rows, batch_size=batch_size):
            batch = planned.batch
            inputs = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask}
            jobs.append((batch, inputs, planned.plan))
        for start in range(0, len(jobs), SESSION_BATCHES):
            part = jobs[start : start + SESSION_BATCHES]
            results = self._generate_session([(inputs, plan) for _, inputs, plan in part], kwargs)
            for (batch, _, _), result in zip(part, results):
                new = result[:, batch.input_ids.shape[1] :].tolist()
                for row, index in enumerate(batch.indices):
                    ids = []
                    for token in new[row]:
                        if token in eos_ids:
                            break
                        ids.append(token)
                    out[index] = ids
        return out  # type: ignore[return-value]

    def _generate_session(self, jobs, kwargs) -> list[torch.Tensor]:
        """Generate every ``(inputs, plan)`` job in one session.

        Locally a plain session; remotely one request, so several batches share its
        round trip. Only the generated ids ``[b, n + new]`` come back.
        """
        env = self.nnsight
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*was never reached.*")
            with env.session(**self.trace_options):
                results = [].save()
                for inputs, plan in jobs:
                    with env.generate(**kwargs) as tracer:
                        with tracer.invoke(**inputs):
                            if plan:
                                for _ in tracer.all():
                                    ops.run_layers(self, plan=plan)
                        with tracer.invoke():
                            results.append(tracer.result)
        return results

    def __reduce__(self):
        # A Model inside a trace body travels to NDIF as an ops.TraceModel: the nnsight
        # model (named by its key, no weights) and head geometry. bindscope itself is not
        # installed on the server, and the tokenizer and trace options must stay here.
        label = None
        if self.capture_mode == "recompute":
            with contextlib.suppress(RuntimeError):  # only a recompute capture needs it
                label = self.attention_call_label
        return (
            ops.TraceModel,
            (
                self.nnsight,
                self.name,
                self.n_layers,
                self.n_heads,
                self.n_kv_heads,
                self.head_dim,
                self.capture_mode,
                label,
            ),
        )

    def __repr__(self) -> str:
        rev = f"@{self.revision}" if self.revision else ""
        return (
            f"Model({self.name}{rev}, family={self.family}, layers={self.n_layers}, "
            f"heads={self.n_heads}, kv_heads={self.n_kv_heads}, head_dim={self.head_dim})"
        )

"""Attribution patching: every head's intervention effect estimated from one backward pass.

For a metric and an intervention on every listed head (``Zero``, ``Mean``, ``Patch``,
``Resample``: the head's output; ``Knockout`` and `PatternPatch`: its attention pattern),
`head_attribution_patching` returns the first-order estimate of the metric's change when
that head *alone* is intervened on, ``[L, H]`` per text, from one forward pass with
gradients (plus one pass over the donor texts for ``Patch`` and ``Resample``), whatever
the number of heads. ``bindscope.runners.attribution_ops`` holds the maths and the trace
bodies; ``bindscope scan --method attribution`` verifies the top heads exactly.

Where the metric is linear in a head's output (for instance a logit difference, the last
layer's heads and a frozen final norm) the estimate is the exact effect. Elsewhere it is
first order: AtP* (Kramar et al. 2024) recomputes a changed attention pattern exactly
instead of linearising the softmax (``method="atp*"``, the default; ``method="atp"``
linearises it, the plain AtP estimate, for comparison). ``grad_drop=True`` gives
GradDrop's ranking scores instead (the same paper), at ``L`` more backward passes.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from bindscope.errors import InputError
from bindscope.interventions import Knockout, Mean, Patch, Resample, Zero
from bindscope.interventions.resolve import resolve_rows
from bindscope.interventions.rowops import DonorOp, KnockoutOp, ReplaceOp, RowOp
from bindscope.protocols import LanguageModel
from bindscope.runners import attribution_ops
from bindscope.runners.attribution_metrics import (
    LogitDifference,
    TargetLogprob,
    check_metrics,
    metric_terms,
)
from bindscope.runners.behaviour import keeps_logits

__all__ = [
    "METHODS",
    "LogitDifference",
    "PatternPatch",
    "TargetLogprob",
    "attribution_scores",
    "head_attribution_patching",
]

METHODS = ("atp*", "atp")


@dataclass(frozen=True)
class PatternPatch:
    """The heads attend as on ``source`` (its queries and keys), keeping their own values.

    A query/key intervention: its effect goes through the softmax, which AtP* recomputes.
    ``source`` and ``positions`` (query positions whose rows change) as in ``Patch``.
    """

    heads: tuple
    source: tuple = ()
    positions: tuple[int, ...] | None = None

    def as_patch(self) -> Patch:
        """The same heads, sources and positions as a ``Patch`` (checked the same way)."""
        return Patch(self.heads, self.source, positions=self.positions)


def _split(entry) -> tuple[list, list]:
    """One ``intervene``/``per_row`` entry as (head-output and knockout specs, pattern patches)."""
    if entry is None:
        return [], []
    items = [entry] if not isinstance(entry, (list, tuple)) else list(entry)
    patterns = [s for s in items if isinstance(s, PatternPatch)]
    others = [s for s in items if not isinstance(s, PatternPatch)]
    for spec in others:
        if not isinstance(spec, (Zero, Mean, Patch, Resample, Knockout)):
            raise InputError(
                f"intervene= takes specs (Zero, Mean, Patch, Resample, Knockout, PatternPatch), "
                f"not {type(spec).__name__}"
            )
    return others, patterns


def _row_ops(model: LanguageModel, texts: list, intervene, per_row) -> list[list]:
    """Checked ops of every text as ``(RowOp, is_pattern)`` pairs.

    The one place that reads ``bindscope.interventions.resolve.resolve_rows``' ops: the specs'
    checks (lengths, donors drawn with the seed, edges) are the engine's own.
    """
    if intervene is None and per_row is None:
        raise InputError(
            "head_attribution_patching needs intervene= (or per_row=): Zero, Mean, Patch, "
            "Resample, Knockout or PatternPatch over the heads to estimate"
        )
    others, patterns = _split(intervene)
    rows_others = rows_patterns = None
    if per_row is not None:
        if len(per_row) != len(texts):
            raise InputError(f"per_row has {len(per_row)} entries for {len(texts)} texts")
        split = [_split(entry) for entry in per_row]
        rows_others = [o for o, _ in split]
        rows_patterns = [[p.as_patch() for p in ps] for _, ps in split]
    outputs = resolve_rows(model, texts, intervene=others, per_row=rows_others)
    as_patches = [p.as_patch() for p in patterns]
    pattern = resolve_rows(model, texts, intervene=as_patches, per_row=rows_patterns)
    return [
        [(op, False) for op in mine] + [(op, True) for op in theirs]
        for mine, theirs in zip(outputs, pattern)
    ]


class _Plan:
    """One batch's tensors for ``attribution_ops.attribution_pass``."""

    def __init__(self, model: LanguageModel, b: int, width: int, method: str) -> None:
        self.model, self.b, self.width = model, b, width
        self.plan: dict = {"method": method}
        self.chosen = torch.zeros(model.n_layers, b, model.n_heads, dtype=torch.bool)
        self.donors: dict[tuple[int, ...], int] = {}
        self.donor_ops: list[tuple[int, int, RowOp, bool]] = []  # (row, n, op, pattern)

    def _layer(self, kind: str, layer: int, make):
        return self.plan.setdefault(kind, {}).setdefault(layer, make())

    def add(self, r: int, n: int, op: RowOp, pattern: bool = False) -> None:
        """Add one checked ``RowOp`` of batch row ``r`` (``n`` real tokens)."""
        model, width = self.model, self.width
        if op.site != "head_out" or not isinstance(op, (ReplaceOp, DonorOp, KnockoutOp)):
            raise InputError(
                f"attribution patching estimates heads: {op.spec} acts on {op.site}; "
                "give heads to Zero, Mean, Patch, Resample, Knockout or PatternPatch"
            )
        layers = {layer: list(heads) for layer, heads in op.units}
        for layer, heads in layers.items():
            self.chosen[layer, r, heads] = True
        if isinstance(op, ReplaceOp) and op.values is None:  # Zero
            for layer, heads in layers.items():
                self._layer("zero", layer, lambda: torch.zeros(self.b, model.n_heads))[r, heads] = 1
        elif isinstance(op, ReplaceOp):  # Mean: values[layer] is [U, head_dim]
            assert op.values is not None
            for layer, heads in layers.items():
                self._add_means(r, layer, heads, op.values[layer].float())
        elif isinstance(op, DonorOp):
            assert op.donor is not None  # every donor spec sets it
            self.donors.setdefault(op.donor, len(self.donors))
            self.donor_ops.append((r, n, op, pattern))
        else:  # Knockout
            offset = width - n
            q = torch.tensor([offset + a for a, _ in op.edges])[None, :]
            k = torch.tensor([offset + c for _, c in op.edges])[None, :]
            shape = (self.b, model.n_heads, width, width)
            for layer, heads in layers.items():
                removed = self._layer(
                    "knockout", layer, lambda s=shape: torch.zeros(s, dtype=torch.bool)
                )
                removed[r, torch.tensor(heads)[:, None], q, k] = True

    def _add_means(self, r: int, layer: int, heads: list[int], values: torch.Tensor) -> None:
        """Row ``r`` takes ``values`` ([U, head_dim]) at ``heads``: one mean per head and call."""
        n_heads, head_dim = self.model.n_heads, values.shape[-1]
        sel, means = self._layer(
            "mean",
            layer,
            lambda: (torch.zeros(self.b, n_heads), torch.full((n_heads, head_dim), math.nan)),
        )
        for head, value in zip(heads, values):
            if not torch.isnan(means[head]).any() and not torch.equal(means[head], value):
                raise InputError(
                    f"one call takes one mean per head, but L{layer}.H{head} got two; "
                    "estimate the other means in another call"
                )
            means[head] = value
        sel[r, heads] = 1

    def add_donors(self, found: dict, donor_width: int) -> None:
        """Place the donor pass's outputs (``attribution_ops.head_outputs``) end-aligned."""
        model, width = self.model, self.width
        shift = width - donor_width  # text column c is donor column c - shift
        for r, n, op, pattern in self.donor_ops:
            assert op.donor is not None
            d = self.donors[op.donor]
            m = len(op.donor)
            if op.positions is None:
                columns = list(range(width - min(n, m), width))
            else:
                columns = [width - n + p for p in op.positions if p >= n - m]
            cols = torch.tensor(columns, dtype=torch.long)[:, None]  # [C, 1]
            for layer, heads in op.units:
                hs = torch.tensor(heads)
                if pattern:
                    rows, source = self._layer(
                        "pattern", layer,
                        lambda: (torch.zeros(self.b, model.n_heads, width, dtype=torch.bool),
                                 torch.zeros(self.b, model.n_heads, width, width)),
                    )  # fmt: skip
                    block = found[("a", layer)][d, hs, donor_width - n :, donor_width - n :]
                    source[r, hs, width - n :, width - n :] = block.float()
                    rows[r, hs[None, :], cols] = True
                    continue
                where, value = self._layer(
                    "donor", layer,
                    lambda: (torch.zeros(self.b, width, model.n_heads, dtype=torch.bool),
                             torch.zeros(self.b, width, model.n_heads, model.head_dim)),
                )  # fmt: skip
                where[r, cols, hs[None, :]] = True
                value[r, cols, hs[None, :]] = found[("z", layer)][
                    d, cols - shift, hs[None, :]
                ].float()

    def donor_layers(self) -> tuple[list[int], list[int]]:
        outputs = {layer for _, _, op, p in self.donor_ops if not p for layer, _ in op.units}
        patterns = {layer for _, _, op, p in self.donor_ops if p for layer, _ in op.units}
        return sorted(outputs), sorted(patterns)

    def finish(self) -> dict:
        plan = self.plan
        for layer, (sel, means) in plan.get("mean", {}).items():  # heads no row means: unused
            plan["mean"][layer] = (sel, torch.nan_to_num(means, nan=0.0))
        plan["outputs"] = sorted(
            {*plan.get("zero", {}), *plan.get("mean", {}), *plan.get("donor", {})}
        )
        plan["patterns"] = sorted({*plan.get("knockout", {}), *plan.get("pattern", {})})
        return plan


def _donor_pass(model: LanguageModel, planner: _Plan) -> None:
    if not planner.donors:
        return
    outputs, patterns = planner.donor_layers()
    batch = model.encode([list(d) for d in planner.donors])
    with torch.no_grad(), model.nnsight.trace(**batch.inputs, **model.trace_options) as tracer:
        found = attribution_ops.head_outputs(model, outputs, patterns)
        tracer.stop()
    planner.add_donors(found, batch.input_ids.shape[1])


def attribution_scores(model: LanguageModel, texts: Sequence, metric, **options):
    """Clean metric ``[S]`` and estimated change ``[S, L, H]`` (float64; NaN: not intervened).

    Arguments as in `head_attribution_patching`; with ``grad_drop=True`` the GradDrop
    scores ``[S, L, H]`` come third.
    """
    return _estimate(model, list(texts), metric, **options)


def _estimate(
    model: LanguageModel,
    texts: list,
    metric,
    intervene=None,
    per_row=None,
    method: str = "atp*",
    batch_size: int = 16,
    grad_drop: bool = False,
) -> tuple:
    if method not in METHODS:
        raise InputError(f"method must be one of {', '.join(METHODS)}, not {method!r}")
    rows = _row_ops(model, texts, intervene, per_row)
    if method == "atp" and any(isinstance(op, KnockoutOp) for row in rows for op, _ in row):
        raise InputError(
            "method='atp' linearises the softmax, but a Knockout moves its scores to minus "
            "infinity; use method='atp*' (the knocked-out pattern is recomputed)"
        )
    if not getattr(model, "remote", False) and not any(
        p.requires_grad for p in model.hf.parameters()
    ):
        raise InputError(
            f"{model.name}: no parameter requires grad, so no gradient reaches the heads; "
            "call model.hf.requires_grad_(True) (no parameter gradient is stored)"
        )
    lengths = [len(model.tokenize(t)) if isinstance(t, str) else len(t) for t in texts]
    metrics = check_metrics(model, metric, lengths)
    needs_eager = any(p or isinstance(op, KnockoutOp) for row in rows for op, p in row)
    if needs_eager and getattr(model, "capture_fallback", None):
        raise InputError(
            f"{model.name}: pattern estimates need eager attention's probabilities, which this "
            f"model cannot return ({model.capture_fallback}); estimate head outputs only"
        )
    keeps = keeps_logits(model)
    clean = np.zeros(len(texts))
    estimates = np.full((len(texts), model.n_layers, model.n_heads), np.nan)
    dropped = estimates.copy()
    for batch in model.batches(texts, batch_size=batch_size):
        width = batch.input_ids.shape[1]
        part = [metrics[i] for i in batch.indices]
        terms, keep = metric_terms(part, batch.input_ids)
        planner = _Plan(model, len(batch.indices), width, method)
        for r, i in enumerate(batch.indices):
            for op, pattern in rows[i]:
                planner.add(r, batch.lengths[r], op, pattern)
        options = {"logits_to_keep": keep} if keeps else {}
        _donor_pass(model, planner)
        plan = planner.finish()
        plan["grad_drop"] = grad_drop
        if not keeps:
            terms = _shift(terms, width, keep)
        found = _gradient_pass(model, batch, terms, plan, options, needs_eager)
        unchosen = ~planner.chosen.numpy().transpose(1, 0, 2)
        clean[batch.indices] = found["metric"].double().cpu().numpy()
        for key, into in (("estimate", estimates), ("grad_drop", dropped)):
            if key in found:
                got = found[key].double().cpu().numpy().transpose(1, 0, 2)  # [b, L, H]
                got[unchosen] = np.nan
                into[batch.indices] = got
    return (clean, estimates, dropped) if grad_drop else (clean, estimates)


def _shift(terms: dict, width: int, keep: int) -> dict:
    """Terms indexed into all ``width`` logits (a model without ``logits_to_keep``)."""
    return {k: (index + (width - keep), t, w) for k, (index, t, w) in terms.items()}


def _gradient_pass(model, batch, terms, plan, options, eager: bool) -> dict:
    context = model.eager() if eager else contextlib.nullcontext()
    with context, torch.enable_grad():  # noqa: SIM117 (nnsight reads the trace's own block)
        with model.nnsight.trace(**batch.inputs, **options, **model.trace_options):
            found = attribution_ops.attribution_pass(model, terms, plan)
    return found


def head_attribution_patching(
    model: LanguageModel,
    texts: Sequence,
    metric,
    *,
    intervene=None,
    per_row=None,
    method: str = "atp*",
    batch_size: int = 16,
    grad_drop: bool = False,
) -> list[torch.Tensor]:
    """Estimated metric change ``[L, H]`` (float64) per text, each head intervened on alone.

    The estimate is ``sum((z' - z) * dm/dz)`` over positions and the head's width, ``z``
    the head's clean output and ``z'`` its output under the intervention (for a pattern
    intervention the same through the pattern, `bindscope.runners.attribution_ops`).
    Positive: the metric rises. Heads the specs do not list are NaN.

    Args:
        model: A ``bindscope.Model`` (local, or remote: gradients run on the server).
        texts: Texts (strings or token-id lists); with ``TargetLogprob`` they end with the
            target.
        metric: ``TargetLogprob(n_target)`` or ``LogitDifference(correct, wrong)``, or one
            per text.
        intervene: A spec or list of specs naming the heads: ``Zero``, ``Mean``, ``Patch``,
            ``Resample`` (head outputs), ``Knockout``, `PatternPatch` (patterns).
        per_row: One spec, list of specs or ``None`` per text (added to ``intervene``).
        method: ``atp*`` (pattern changes recomputed exactly) or ``atp`` (softmax
            linearised; refuses ``Knockout``).
        batch_size: Texts per forward pass.
        grad_drop: Return GradDrop scores instead (Kramar et al. 2024, against cancelling
            paths): the mean over layers of |estimate| with the gradient through that
            layer's attention and MLP outputs stopped, over the ``L - 1`` layers that leave
            a head some gradient. Unsigned, for ranking heads; ``L`` more backward passes.
    """
    found = _estimate(model, list(texts), metric, intervene, per_row, method, batch_size, grad_drop)
    return [torch.from_numpy(e) for e in found[-1]]


def all_heads(model: LanguageModel) -> list[tuple[int, int]]:
    """Every ``(layer, head)`` of the model (the heads a scan estimates)."""
    return [(layer, h) for layer in range(model.n_layers) for h in range(model.n_heads)]

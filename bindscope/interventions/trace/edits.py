"""The edit engine: a `TracePlan` of edits, applied on the one walk over the layers.

Every edit works on a site's ``[b, s, U, k]`` view through a ``[b, W|1, U]`` mask.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from bindscope.interventions.trace.sites import (
    attention_call,
    attention_module,
    by_layer,
    call_site,
    knock_out,
    layer_filter,
    layer_sites,
    patch_patterns,
    recompute_probs,
    save,
    site,
    unit_view,
)

if TYPE_CHECKING:  # never runs, here or on the server
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from bindscope.interventions.trace.paths import PathPlan
    from bindscope.protocols import TraceTarget

    Heads = Sequence[tuple[int, int]] | dict[int, Sequence[int]]


class Edit:
    """One edit of one site at one layer; ``where`` ``[b, W|1, U]`` marks its cells.

    ``W``: padded columns; ``1``: every position (each generation step too).
    """

    def __init__(self, where: torch.Tensor):
        self.where = where
        # False for some positions even of a one-token text: not a decoding step's column
        self.every_position = where.shape[1] == 1

    def fits(self, view: torch.Tensor, step: int = 0):
        """Whether the edit applies at generation step ``step`` (some positions: step 0 only)."""
        return self.every_position or (step == 0 and self.where.shape[1] == view.shape[1])

    def mask(self, view: torch.Tensor):
        """The mask as ``[b, W|1, U, 1]`` on the view's device."""
        return self.where.to(view.device)[..., None]  # [b, W|1, U, 1]

    def target(self, view: torch.Tensor, donors: Any):
        """What the edited cells become (``donors``: the donor invoke's `site_outputs`)."""
        raise NotImplementedError

    def apply(self, view: torch.Tensor, donors: Any):
        """Edit ``view`` in place."""
        view.copy_(torch.where(self.mask(view), self.target(view, donors), view))

    def delta(self, view: torch.Tensor, donors: Any):
        """``new - view``: what `apply` would change, 0 outside the edited cells."""
        return torch.where(self.mask(view), self.target(view, donors) - view, 0.0)


class ReplaceEdit(Edit):
    """Set edited cells to ``value`` (``[U, k]``; ``None`` for zero)."""

    def __init__(self, where: torch.Tensor, value: torch.Tensor | None = None):
        Edit.__init__(self, where)
        self.value = value

    def target(self, view: torch.Tensor, donors: Any):
        """The value (zero when ``None``), broadcast over rows and positions."""
        if self.value is None:
            return torch.zeros((), dtype=view.dtype, device=view.device)
        return self.value.to(device=view.device, dtype=view.dtype)[None, None]


class DonorEdit(Edit):
    """Set edited cells to a donor row's activations (``donors[key]`` ``[d, W, U, k]``) there."""

    def __init__(self, where: torch.Tensor, key: tuple[str, int], donor_row: torch.Tensor):
        Edit.__init__(self, where)
        self.key = key
        self.donor_row = donor_row  # [b] long

    def target(self, view: torch.Tensor, donors: Any):
        """Each row's donor activations at the same site and padded columns."""
        acts = donors[self.key]
        return acts[self.donor_row.to(acts.device)].to(view.device, view.dtype)


class AddEdit(Edit):
    """Add ``vector`` (``[U, k]``, already scaled) to edited cells."""

    def __init__(self, where: torch.Tensor, vector: torch.Tensor):
        Edit.__init__(self, where)
        self.vector = vector

    def target(self, view: torch.Tensor, donors: Any):
        """The cells plus the vector."""
        return view + self.vector.to(device=view.device, dtype=view.dtype)[None, None]


class HookEdit(Edit):
    """Call a user's ``fn`` on each marked row's unpadded tensor; it may edit or replace it.

    ``fn`` gets ``[1, n, d]`` (``[1, n, H, hd]`` with ``heads``) and returns that shape or None.
    It runs where the trace runs: locally only (``Hook`` refuses remote).
    """

    def __init__(self, where: torch.Tensor, fn: Any, heads: bool, width: int):
        Edit.__init__(self, where)
        self.fn, self.heads, self.width = fn, heads, width
        self.starts = torch.zeros(where.shape[0], dtype=torch.long)  # first real columns

    def apply(self, view: torch.Tensor, donors: Any):
        """Run ``fn`` on each marked row and write back what it returns."""
        prompt = view.shape[1] == self.width  # else a generation step's new column
        for r in self.where.any(-1).any(-1).nonzero().flatten().tolist():
            part = view[r : r + 1, int(self.starts[r]) if prompt else 0 :]  # [1, n, U, k]
            new = self.fn(part if self.heads else part.flatten(2))  # [1, n, d]
            if new is not None:
                part.copy_(new.to(part.dtype).reshape(part.shape))


class TracePlan:
    """Everything a trace body applies, as tensors (built by ``interventions.plan``)."""

    def __init__(
        self,
        edits: dict | None = None,
        donor_keys: Iterable[tuple[str, int]] = (),
        knockout: dict[int, torch.Tensor] | None = None,
        knockout_batch: dict | None = None,
        knockout_site: tuple[str, int] | None = None,
        rows: int | None = None,
        path: PathPlan | None = None,
        pattern_batch: dict | None = None,
    ):
        self.pattern_batch = pattern_batch or {}  # {layer: (where, donor)}, whole batch
        self.patterns_run = False  # set by the caller whose empty invoke applies them
        self.path = path  # a PathPlan: edges patched through scratch rows, or None
        self.rows = rows  # batch rows the plan is for (None: any; its masks broadcast)
        self.edits = edits or {}  # {(site, layer): [Edit]}, disjoint cells, in list order
        self.donor_keys = list(donor_keys)  # what the donor invoke reads, in execution order
        self.knockout = knockout or {}  # {layer: removed [b, H, W, W]} of this invoke's rows
        self.knockout_batch = knockout_batch or {}  # the same over the whole batch
        self.knockout_site = knockout_site  # the attention call's (label, mask_index)

    def reads(self):
        """The ``(site, layer)`` that transcoder edits encode (`FeatureEdit.reads`)."""
        found = (getattr(e, "reads", None) for entries in self.edits.values() for e in entries)
        return {key for key in found if key is not None}

    def __bool__(self):
        return bool(
            self.edits or self.knockout or self.knockout_batch or self.path or self.pattern_batch
        )


def apply_edits(
    model: TraceTarget,
    name: str,
    layer: int,
    x: torch.Tensor,
    plan: TracePlan | None,
    donors: dict | None,
    step: int = 0,
):
    """Apply the plan's edits of one site and layer to its tensor ``x``, in place."""
    entries = plan.edits.get((name, layer)) if plan else None
    if plan is None or not entries:
        return
    view = unit_view(model, name, x)
    if plan.rows is not None and view.shape[0] != plan.rows:
        error = getattr(model, "input_error", None) or ValueError
        raise error(
            f"per_row gives {plan.rows} head lists but the batch at layer {layer} has "
            f"{view.shape[0]} rows; pass exactly one entry per text of the invoke"
        )
    for edit in entries:
        if edit.fits(view, step):
            edit.apply(view, donors)


def site_outputs(
    model: TraceTarget,
    keys: Iterable[tuple[str, int]],
    into: Any,
    call: tuple[str, int] | None = None,
):
    """Fill ``into`` with the donor invoke's activations ``{(site, layer): [d, W, U, k]}``.

    Each site is copied before the patched rows' invoke reaches and writes it; ``call``
    locates q, k and v (the plan's ``knockout_site``).
    """
    for name, layer in keys:
        x = site(model, name, layer, call)
        into[(name, layer)] = unit_view(model, name, x).clone()
    return into


def patch_patterns_batch(model: TraceTarget, plan: TracePlan):
    """Apply the plan's pattern patches across the whole batch (run in an empty invoke)."""
    for layer in sorted(plan.pattern_batch):
        where, donor = plan.pattern_batch[layer]
        attn, scaling = attention_module(model, layer), model.attention_scaling[layer]
        patch_patterns(attn, where, donor, plan.knockout_site, scaling)


def knock_out_batch(
    model: TraceTarget, knockout: dict[int, torch.Tensor], site: tuple[str, int] | None
):
    """Knock edges out across a whole multi-invoke batch (run in an empty invoke).

    One invoke's per-head mask cannot be joined to the others' shared one.
    """
    for layer in sorted(knockout):
        knock_out(attention_module(model, layer), knockout[layer], site)


def run_layers(
    model: TraceTarget,
    *,
    capture: Iterable[int] = (),
    reduce: Callable | None = None,
    sites: Mapping[str, Iterable[int]] | None = None,
    only_layers: Iterable[int] | None = None,
    allow_missing: bool = False,
    plan: TracePlan | None = None,
    donors: dict | None = None,
    step: int = 0,
):
    """Walk the layers once, in execution order, applying a plan and capturing.

    Returns ``{layer: probs}`` of the ``capture`` layers (``reduce(probs)``; ``allow_missing``
    hands it None where no weights came back) and ``{(site, layer): [b, s, U, k]}`` of the
    ``sites`` captures, saved: bind it to a name (a remote run returns only those). Past the
    prompt pass (``step`` > 0) only edits of every position act.
    """
    try:
        return _run_layers(
            model, capture, reduce, sites, only_layers, allow_missing, plan, donors, step
        )
    except Exception as exc:
        # A bindscope.Model explains nnsight's OutOfOrderError (an earlier call in the body
        # touched a later layer); a shipped TraceModel has no translator and re-raises.
        translate = getattr(model, "trace_order_error", None)
        error = translate(exc) if translate is not None else None
        if error is None:
            raise
        raise error from None


def resid_post_at(
    model: TraceTarget,
    layers: Iterable[int],
    rows: torch.Tensor,
    columns: torch.Tensor,
    plan: TracePlan | None = None,
    donors: dict | None = None,
):
    """``{layer: [b, P, d_model]}``, saved: ``resid_post`` at the ``[b, P]`` positions.

    Walks the layers applying ``plan`` (``donors``: its donor invoke's `site_outputs`).
    """
    wanted = {int(layer) for layer in layers}
    found = {}
    for layer in range(max(wanted) + 1):
        run_layers(model, plan=plan, donors=donors, only_layers=[layer])
        if layer in wanted:
            x = site(model, "resid_post", layer)
            found[layer] = save(x[rows.to(x.device), columns.to(x.device)].clone())
    return save(found)


def _run_layers(
    model: TraceTarget,
    capture: Iterable[int],
    reduce: Callable | None,
    sites: Mapping[str, Iterable[int]] | None,
    only_layers: Iterable[int] | None,
    allow_missing: bool,
    plan: TracePlan | None,
    donors: dict | None,
    step: int,
):
    """``run_layers`` itself; the wrapper above only explains errors."""
    capture = set(capture)
    label = _recompute_label(model, capture)
    out: dict = {}  # {layer: probs} and {(site, layer): view}
    plan = plan or TracePlan()
    wanted = {name: set(layers) for name, layers in (sites or {}).items()}
    probs: dict = {}  # {layer: recomputed probabilities}, set at the attention call
    calls: dict = {}  # {layer: {call site: tensor}}, read once at the attention call
    reads, inputs = plan.reads(), {}  # {(site, layer): tensor} that transcoders encode
    for layer, name in layer_sites(model, only_layers):
        if name == "pattern":
            if (name, layer) in plan.edits and not plan.patterns_run:
                raise (getattr(model, "input_error", None) or ValueError)(
                    f"{model.name}: a Patch of the pattern site runs in logits, capture, "
                    "attention_probs, logit_lens and patching_sweep, not in this call"
                )
            if layer in capture:
                out[layer] = save(_pattern(model, layer, probs.get(layer), reduce, allow_missing))
            continue
        at_call = model.sites[name][1] == "call"
        if (at_call or name == "head_out") and layer not in calls:
            recompute = label if layer in capture else None
            calls[layer], probs[layer] = _attention_call(model, layer, plan, recompute, wanted)
        keep = layer in wanted.get(name, ())
        if (name, layer) not in plan.edits and not keep and (name, layer) not in reads:
            continue
        x = calls[layer][name] if at_call else site(model, name, layer)
        if (name, layer) in reads:
            inputs[(name, layer)] = x  # edited in place below: what the MLP reads
        apply_edits(model, name, layer, x, plan, {**(donors or {}), "inputs": inputs}, step)
        if keep:  # the scores as [b, H, q, k], like the pattern
            view = x if name == "scores" else unit_view(model, name, x)
            out[(name, layer)] = save(view.clone())
    return save(out)


def _pattern(
    model: TraceTarget,
    layer: int,
    probs: torch.Tensor | None,
    reduce: Callable | None,
    allow_missing: bool,
):
    """One layer's captured probabilities (or ``reduce`` of them)."""
    if probs is None:
        probs = site(model, "pattern", layer)  # [b, H, n, n]
    if probs is None and not allow_missing:
        raise RuntimeError(
            f"{model.name}: layer {layer}'s attention returned no weights although eager "
            "attention was requested; reload it so the load-time probe can recompute them"
        )
    if reduce is not None:
        return reduce(probs)
    return probs.to(torch.promote_types(probs.dtype, torch.float32))  # float64 stays float64


def _recompute_label(model: TraceTarget, capture: Iterable[int]):
    """The attention call's ``.source`` label when captures recompute probabilities, else None."""
    if not capture or model.capture_mode != "recompute":
        return None
    label = model.attention_call_label  # type: ignore[attr-defined]  # a Model's, a TraceModel's
    if label is None:
        raise RuntimeError(
            f"{model.name}: no attention_interface call in the attention forward, so "
            "probabilities cannot be recomputed; capture under eager attention instead"
        )
    return label


def _attention_call(
    model: TraceTarget, layer: int, plan: TracePlan, label: str | None, wanted: dict
):
    """One layer's attention call: knockout, then its call sites; recompute probabilities."""
    names = [
        name
        for name, where in model.sites.items()
        if where[1] == "call" and ((name, layer) in plan.edits or layer in wanted.get(name, ()))
    ]
    if layer not in plan.knockout and label is None and not names:
        return {}, None
    where = plan.knockout_site or ((label, 4) if label else model.knockout_site)
    if layer in plan.knockout:
        args, kwargs = knock_out(attention_module(model, layer), plan.knockout[layer], where)
    else:
        args, kwargs = attention_call(model, layer, where[0]).inputs
    found = {name: call_site(model, name, layer, args, kwargs, where[1]) for name in names}
    return found, None if label is None else recompute_probs(args, kwargs)


def head_plan(
    model: TraceTarget,
    heads: Heads | None = None,
    *,
    per_row: Sequence[Heads] | None = None,
    means: Any = None,
):
    """A plan zeroing (with ``means``: mean-ablating) heads of every row, or of each ``per_row``."""
    if heads is not None and per_row is not None:
        raise ValueError("pass either heads= or per_row=, not both")
    rows = [model.check_heads(r) for r in ([heads] if per_row is None else per_row)]
    edits: dict = {}
    for r, row in enumerate(rows):
        for layer, hs in by_layer(row).items():
            if means is not None and layer not in means.means:
                raise ValueError(
                    f"no reference means for layer {layer}; include it in head_means()"
                )
            if ("head_out", layer) not in edits:  # one edit per layer, every row's heads
                where = torch.zeros(len(rows), 1, model.n_heads, dtype=torch.bool)
                value = None if means is None else means.means[layer]
                edits[("head_out", layer)] = [ReplaceEdit(where, value)]
            edits[("head_out", layer)][0].where[r, 0, hs] = True
    return TracePlan(edits, rows=None if per_row is None else len(rows))


def mean_ablate(
    model: TraceTarget,
    heads: Heads | None = None,
    means: Any = None,
    *,
    per_row: Sequence[Heads] | None = None,
    layers: Iterable[int] | None = None,
):
    """Replace heads' pre-projection outputs by their means from ``head_means``."""
    if means is None:
        raise ValueError("mean_ablate needs means=head_means(model, reference_texts, heads)")
    plan = head_plan(model, heads, per_row=per_row, means=means)
    run_layers(model, plan=plan, only_layers=layers)


def capture_probs(
    model: TraceTarget, layers: Iterable[int] | None = None, *, reduce: Callable | None = None
):
    """Capture post-softmax attention probabilities ``{layer: [b, H, n, n]}`` (or ``reduce``'s)."""
    wanted = sorted(layer_filter(layers, model.n_layers))
    return run_layers(model, capture=wanted, reduce=reduce, only_layers=wanted)

"""Code that runs inside an nnsight trace, locally or on NDIF.

Everything a trace body calls lives here, and this module imports only ``torch`` and
``math``: for remote runs ``bindscope.remote`` registers it with ``nnsight.register``, so
its source travels with each request and is rebuilt inside NDIF's sandbox, which refuses
other imports (``tests/remote/test_shipping.py`` enforces this). Inside a shipped body a
``bindscope.Model`` arrives as a `TraceModel` and ``HeadMeans`` as a `TraceMeans`; heads
are validated before the trace, in ``bindscope.interventions.heads``.

A remote run returns only saved values that the body binds to a name, so helpers here
return their results saved (``found = run_layers(...)``) rather than only filling a
container. Tensors passed in (masks, indices) are moved to the activations' device, since
the server's model lives on a GPU.

No ``from __future__`` import here: it would be one more module for the sandbox to refuse.
For the same reason signatures carry no annotations (they would be evaluated when the
module is rebuilt); the model these functions take is ``bindscope.protocols.TraceTarget``.

The module is longer than the package's ~400-line guideline on purpose: it is shipped whole
(``bindscope.remote.shipping.SHIPPED_MODULES``), and its functions call one another as
module globals that travel with it. Splitting it would mean more shipped modules, each
registered with nnsight, audited and pickled into every request; keep it one file.
"""

import math

import torch


class TraceModel:
    """What a shipped trace body sees of a ``bindscope.Model``.

    A ``Model`` pickles as one of these (``Model.__reduce__``): the renamed nnsight model
    and the head geometry, never the weights, tokenizer, trace options or credentials.
    """

    def __init__(
        self,
        envoy,
        name,
        n_layers,
        n_heads,
        n_kv_heads,
        head_dim,
        capture_mode,
        attention_call_label=None,
    ):
        self.nnsight = envoy
        self.name = name
        self.n_layers = n_layers
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.head_dim = head_dim
        self.capture_mode = capture_mode
        self.attention_call_label = attention_call_label

    def check_heads(self, heads):
        """Sorted ``(layer, head)`` pairs; they were validated before the trace was sent."""
        return normalize_pairs(heads)


class TraceMeans:
    """What a shipped trace body sees of ``HeadMeans``: ``{layer: [H, hd]}`` means."""

    def __init__(self, means, n_positions):
        self.means = means
        self.n_positions = n_positions


class ShippedModule:
    """This module as a shipped body sees it: its functions and classes as attributes.

    Bodies call ``ops.f(...)``, so the module object itself travels. Pickled as a module
    it would carry its import-machinery spec and loader, which the sandbox refuses;
    ``bindscope.remote.register_shipped`` makes it pickle as one of these instead.
    """

    def __init__(self, name, members):
        self.name = name
        for key in members:
            setattr(self, key, members[key])


def save(value):
    """Mark a value to come back from the trace (``nnsight.save`` without the import)."""
    return value.save()


def normalize_pairs(heads):
    """``(layer, head)`` pairs (or ``{layer: [heads]}``) as a sorted tuple of int pairs."""
    if heads is None:
        return ()
    if isinstance(heads, dict):
        heads = [(layer, head) for layer in heads for head in heads[layer]]
    return tuple(sorted({(int(layer), int(head)) for layer, head in heads}))


def by_layer(heads):
    """Group sorted pairs as ``{layer: [heads]}`` in ascending layer order."""
    grouped: dict = {}
    for layer, head in sorted(heads):
        grouped.setdefault(layer, []).append(head)
    return grouped


def row_masks(per_row, n_heads):
    """Per-layer ``[b, H]`` keep masks (1 keep, 0 ablate) for different heads per row."""
    layers = sorted({layer for row in per_row for layer, _ in row})
    masks = {layer: torch.ones(len(per_row), n_heads) for layer in layers}
    for r, row in enumerate(per_row):
        for layer, head in row:
            masks[layer][r, head] = 0.0
    return masks


def attention_module(envoy, layer):
    """The uniform attention envoy of one decoder layer."""
    return envoy.model.layers[layer].self_attn


def head_view(x, n_heads, head_dim):
    """View an output-projection input ``[b, s, H*hd]`` as ``[b, s, H, hd]``."""
    return x.view(*x.shape[:-1], n_heads, head_dim)


def _check_rows(mask, view, layer, error):
    """A per-row mask must have one row per batch row (``error`` is the class raised)."""
    if mask.shape[0] != view.shape[0]:
        raise error(
            f"per_row gives {mask.shape[0]} head lists but the batch at layer {layer} has "
            f"{view.shape[0]} rows; pass exactly one head list per text of the invoke"
        )


def zero_heads(envoy, layer, heads, n_heads, head_dim, keep=None, error=ValueError):
    """Zero heads' slices of the output-projection input of ``layer``, in place.

    Args:
        envoy: The renamed nnsight model.
        layer: Decoder layer index.
        heads: Head indices zeroed in every row (ignored when ``keep`` is given).
        n_heads: Query heads per layer.
        head_dim: Width of one head.
        keep: Optional ``[b, H]`` float mask, 0 where a row's head is ablated. Rows whose
            mask is all ones are multiplied by 1.0 and stay bit-identical.
        error: Exception class raised when ``keep`` has a different number of rows.
    """
    x = attention_module(envoy, layer).o_proj.input  # [b, s, H*hd]
    view = head_view(x, n_heads, head_dim)  # [b, s, H, hd]
    if keep is None:
        view[..., heads, :] = 0
    else:
        _check_rows(keep, view, layer, error)
        view.mul_(keep.to(device=view.device, dtype=view.dtype)[:, None, :, None])


def mean_heads(envoy, layer, heads, n_heads, head_dim, means, replace=None, error=ValueError):
    """Replace heads' slices of the output-projection input by their reference means.

    Args:
        envoy: The renamed nnsight model.
        layer: Decoder layer index.
        heads: Head indices replaced in every row (ignored when ``replace`` is given).
        n_heads: Query heads per layer.
        head_dim: Width of one head's slice.
        means: ``[H, hd]`` mean of every head's slice over a reference set.
        replace: Optional ``[b, H]`` bool mask, True where a row's head is replaced.
        error: Exception class raised when ``replace`` has the wrong number of rows.
    """
    x = attention_module(envoy, layer).o_proj.input  # [b, s, H*hd]
    view = head_view(x, n_heads, head_dim)  # [b, s, H, hd]
    means = means.to(device=view.device, dtype=view.dtype)
    if replace is None:
        view[..., heads, :] = means[heads]
    else:
        _check_rows(replace, view, layer, error)
        mixed = torch.where(replace.to(view.device)[:, None, :, None], means[None, None], view)
        view.copy_(mixed)


def donor_outputs(model, layers, into):
    """Fill ``into`` with the donor invoke's per-head outputs ``{layer: [d, W, H, hd]}``.

    Runs in an earlier invoke of the same trace as the patched texts: at each layer the
    donor rows are read (and copied into ``into`` at once, before the next layer runs)
    before the patched rows' invoke reaches that layer and writes.
    """
    for layer in layers:
        x = attention_module(model.nnsight, layer).o_proj.input  # [d, W, H*hd]
        into[layer] = head_view(x, model.n_heads, model.head_dim).clone()


def knock_out_batch(model, knockout, site):
    """Knock edges out across a whole multi-invoke batch (run in an empty invoke).

    With donor rows in their own invoke, the mask must be replaced for all rows at once:
    one invoke's per-head mask cannot be joined to the others' shared one.
    """
    for layer in sorted(knockout):
        knock_out(attention_module(model.nnsight, layer), knockout[layer], site)


def patch_view(view, entries, acts):
    """Write donor rows' head outputs into ``view`` ``[b, W, H, hd]`` where masked.

    Args:
        view: Head view of the output-projection input, edited in place.
        entries: ``[(where [b, W, H] bool, donor_row [b] long), ...]``, applied in order.
        acts: ``[d, W, H, hd]`` donor outputs of this layer.
    """
    for where, donor_row in entries:
        source = acts[donor_row.to(acts.device)].to(view.dtype)  # [b, W, H, hd]
        view.copy_(torch.where(where.to(view.device)[..., None], source, view))


def knock_out(attn, removed, site):
    """Remove attention edges before the softmax by editing the attention call's mask.

    Args:
        attn: The attention envoy of one layer.
        removed: ``[b, H, W, W]`` bool, True on removed (query, key) edges (padded columns).
        site: ``(label, mask_index)``: the ``.source`` label of the attention call and where
            its mask sits among the positional arguments (queries at ``mask_index - 3``).

    Returns:
        The call's ``(args, kwargs)`` as the model now sees them. A decoding step (a query
        or key count other than ``W``) is left alone: its new query has no listed edge.
    """
    label, index = site
    call = getattr(attn.source, label)
    args, kwargs = call.inputs
    query, key = args[index - 3], args[index - 2]
    n_q, n_k = query.shape[-2], key.shape[-2]
    if n_q != removed.shape[-2] or n_k != removed.shape[-1]:
        return args, kwargs
    in_args = len(args) > index
    mask = args[index] if in_args else kwargs.get("attention_mask")
    removed = removed.to(query.device)
    shape = (removed.shape[0], removed.shape[1], n_q, n_k)
    if mask is None:  # causal fast path: build the causal mask it stands for
        causal = torch.ones(n_q, n_k, dtype=torch.bool, device=query.device).tril(n_k - n_q)
        mask = torch.zeros(n_q, n_k, dtype=query.dtype, device=query.device)
        mask = mask.masked_fill(~causal, float("-inf"))
    if mask.dtype == torch.bool:
        new = mask[..., :n_q, :n_k].expand(shape) & ~removed
    else:
        new = mask[..., :n_q, :n_k].expand(shape).masked_fill(removed, float("-inf"))
    if in_args:
        args = (*args[:index], new, *args[index + 1 :])
    else:
        kwargs = dict(kwargs)
        kwargs["attention_mask"] = new
    call.inputs = (args, kwargs)
    return args, kwargs


def apply_plan(model, layer, plan, donors):
    """Apply one layer's patch, mean and zero entries of a plan (in that order)."""
    patch = plan.get("patch", {})
    mean = plan.get("mean", {})
    zero = plan.get("zero", {})
    if layer not in patch and layer not in mean and layer not in zero:
        return
    x = attention_module(model.nnsight, layer).o_proj.input  # [b, W, H*hd]
    view = head_view(x, model.n_heads, model.head_dim)  # [b, W, H, hd]
    if layer in patch:
        patch_view(view, patch[layer], donors[layer])
    for replace, means in mean.get(layer, []):
        means = means.to(device=view.device, dtype=view.dtype)
        mixed = torch.where(replace.to(view.device)[:, None, :, None], means[None, None], view)
        view.copy_(mixed)
    if layer in zero:
        view.mul_(zero[layer].to(device=view.device, dtype=view.dtype)[:, None, :, None])


def recompute_probs(args, kwargs):
    """Attention probabilities from the attention function's inputs.

    Used when the attention implementation returns no weights (sdpa, flash). Handles the
    three mask forms transformers passes: None (causal fast path), bool, additive float.

    Args:
        args: Positional inputs of the attention-interface call: (module, q, k, v, mask, ...).
        kwargs: Its keyword inputs (``scaling``, ``attention_mask``, ``sliding_window``).

    Returns:
        ``[b, H, q, k]`` probabilities, float32 (float64 for float64 inputs).
    """
    q, k = args[1], args[2]
    wide = torch.promote_types(q.dtype, torch.float32)
    mask = args[4] if len(args) > 4 else kwargs.get("attention_mask")
    scaling = kwargs.get("scaling")
    if scaling is None:
        scaling = 1.0 / math.sqrt(q.shape[-1])
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)  # GQA, same as repeat_kv
    scores = (q.to(wide) @ k.to(wide).transpose(-1, -2)) * scaling  # [b, H, q, k]
    softcap = kwargs.get("softcap")
    if softcap:  # Gemma 2 caps the logits before the mask
        scores = torch.tanh(scores / softcap) * softcap
    n_q, n_k = scores.shape[-2:]
    if mask is None:
        causal = torch.ones(n_q, n_k, dtype=torch.bool, device=scores.device).tril(n_k - n_q)
        scores = scores.masked_fill(~causal, float("-inf"))
    elif mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask[..., :n_q, :n_k], float("-inf"))
    else:
        scores = scores + mask[..., :n_q, :n_k].to(wide)
    window = kwargs.get("sliding_window")
    if window:
        rows = torch.arange(n_q, device=scores.device)[:, None] + (n_k - n_q)
        cols = torch.arange(n_k, device=scores.device)[None, :]
        scores = scores.masked_fill(rows - cols >= window, float("-inf"))
    probs = scores.softmax(-1)
    return torch.nan_to_num(probs, nan=0.0)  # fully masked (pad) query rows


def span_pair_bsi(probs, query_index, key_index, pair_weight):
    """Mean attention over each row's within-span (later -> earlier) token pairs.

    Args:
        probs: ``[b, H, n, n]`` probabilities of one layer.
        query_index: ``[b, P]`` long, padded-sequence index of each pair's later token.
        key_index: ``[b, P]`` long, index of each pair's earlier token.
        pair_weight: ``[b, P]`` float, 1/|pairs| for real pairs, 0 for padding pairs.

    Returns:
        ``[b, H]`` float32 BSI per row and head (0 for rows without pairs; the caller
        turns those into NaN outside the trace).
    """
    device = probs.device
    rows = torch.arange(probs.shape[0], device=device)[:, None]  # [b, 1]
    picked = probs[rows, :, query_index.to(device), key_index.to(device)]  # [b, P, H]
    return (picked.float() * pair_weight.to(device)[:, :, None]).sum(1)  # [b, H]


def participation_ratio(probs, query_weight):
    """Weighted mean over queries of ``1 / sum_k p^2``, the effective number of attended keys.

    Args:
        probs: ``[b, H, n, n]`` probabilities of one layer.
        query_weight: ``[b, n]`` float, the weight of each query (0 for padding and any
            query left out; each row's weights sum to 1).

    Returns:
        ``[b, H]`` float32.
    """
    p = probs.float()
    weight = query_weight.to(p.device)[:, None, :]  # [b, 1, n]
    squares = (p * p).sum(-1)  # [b, H, n]; 0 (or NaN) on padded queries, weighted 0
    ratio = torch.where(weight > 0, 1.0 / squares.clamp_min(1e-30), torch.zeros_like(squares))
    return (ratio * weight).sum(-1)


def choice_logprob_sums(logits, target_index, target_ids, target_weight):
    """Sum (weighted) log-probabilities of target tokens at given positions.

    Args:
        logits: ``[b, n, V]``.
        target_index: ``[b, T]`` long, the position whose prediction scores each target.
        target_ids: ``[b, T]`` long, the target token ids.
        target_weight: ``[b, T]`` float, 1/|choice| for real targets, 0 for padding.

    Returns:
        ``[b]`` float32 weighted sums (the mean log-prob per choice token when weights are 1/|c|).
    """
    device = logits.device
    rows = torch.arange(logits.shape[0], device=device)[:, None]
    picked = logits[rows, target_index.to(device)].float()  # [b, T, V]
    logp = picked.log_softmax(-1).gather(-1, target_ids.to(device)[:, :, None]).squeeze(-1)
    return (logp * target_weight.to(device)).sum(-1)  # [b]


def head_sums(x, mask, n_heads, head_dim):
    """Each head's pre-projection output summed over real positions: ``[H, hd]`` float32.

    Args:
        x: Output-projection input ``[b, s, H*hd]``.
        mask: ``[b, s]`` bool, True on real (non-pad) tokens.
        n_heads: Query heads per layer.
        head_dim: Width of one head's slice.
    """
    view = head_view(x, n_heads, head_dim).float()  # [b, s, H, hd]
    return view[mask.to(view.device)].sum(0)


def collect_head_sums(model, layers, mask, into):
    """Save ``head_sums`` of each listed layer into ``into`` (``{layer: [H, hd]}``)."""
    for layer in layers:
        x = attention_module(model.nnsight, layer).o_proj.input
        into[layer] = save(head_sums(x, mask, model.n_heads, model.head_dim))
    return save(into)


def last_position_inputs(model, final_norm):
    """Save every layer's output-projection input and the final norm's input at the last column.

    The last column is the last token of every left-padded row; the result is
    ``{layer: [b, H*hd], "final": [b, d]}``.
    """
    env = model.nnsight
    found: dict = {}  # a local annotation is never evaluated: nothing to import
    for layer in range(model.n_layers):
        found[layer] = save(attention_module(env, layer).o_proj.input[:, -1].clone())
    found["final"] = save(getattr(env.model, final_norm).input[:, -1].clone())
    return save(found)


def probe_stats(probs):
    """``[3]`` float32 check of one layer's attention weights.

    The three values: present (1 or 0), max row-sum error, largest weight above the diagonal.
    """
    if probs is None:
        return torch.tensor([0.0, float("nan"), float("nan")])
    p = probs.float()
    row_error = (p.sum(-1) - 1).abs().max()
    upper = p.triu(1).abs().max()
    return torch.stack([torch.ones((), device=p.device), row_error, upper]).cpu()


def probe(model):
    """The remote load-time check on a batch of two copies of one prompt.

    Row 1 has head (0, 0) ablated. Returns ``{"stats": [L, 3], "effect": []}``: per-layer
    ``probe_stats`` and the largest logit change the ablation caused.
    """
    found = run_layers(
        model,
        capture=range(model.n_layers),
        reduce=probe_stats,
        zero_per_row=[(), ((0, 0),)],
        allow_missing=True,
    )
    logits = model.nnsight.lm_head.output  # [2, n, V]
    effect = (logits[0].float() - logits[1].float()).abs().max().cpu()
    stats = torch.stack([found[layer] for layer in range(model.n_layers)])
    return save({"stats": stats, "effect": effect})


def _layer_filter(layers, n_layers):
    return set(range(n_layers)) if layers is None else {int(x) for x in layers}


def _per_row(model, per_row):
    return [model.check_heads(row) for row in per_row]


def run_layers(
    model,
    *,
    capture=(),
    reduce=None,
    zero=None,
    zero_per_row=None,
    mean=None,
    mean_per_row=None,
    means=None,
    only_layers=None,
    into=None,
    allow_missing=False,
    plan=None,
    donors=None,
):
    """Walk the layers once, in execution order, applying ablations and captures.

    This is the single place that orders requests, so captures and ablations of any layers
    compose in one forward pass. Returns ``{layer: saved value}`` for captured layers (into
    ``into`` when given), marked saved. Bind it in the body (``found = run_layers(...)``):
    a remote run returns only saved values the body binds to a name, never a container it
    merely filled. ``allow_missing`` hands ``None`` to ``reduce`` when the module returned
    no weights (the load-time probe) instead of failing. ``plan`` is a plan from
    ``bindscope.interventions.plan`` (``Zero``/``Mean``/``Patch``/``Resample``/``Knockout``
    as tensors); ``donors`` the ``donor_outputs`` of its donor invoke.
    """
    try:
        return _run_layers(
            model,
            capture=capture,
            reduce=reduce,
            zero=zero,
            zero_per_row=zero_per_row,
            mean=mean,
            mean_per_row=mean_per_row,
            means=means,
            only_layers=only_layers,
            into=into,
            allow_missing=allow_missing,
            plan=plan,
            donors=donors,
        )
    except Exception as exc:
        # A bindscope.Model explains nnsight's OutOfOrderError (an earlier call in the body
        # touched a later layer); a shipped TraceModel has no translator and re-raises.
        translate = getattr(model, "trace_order_error", None)
        error = translate(exc) if translate is not None else None
        if error is None:
            raise
        raise error from None


def _run_layers(
    model,
    *,
    capture=(),
    reduce=None,
    zero=None,
    zero_per_row=None,
    mean=None,
    mean_per_row=None,
    means=None,
    only_layers=None,
    into=None,
    allow_missing=False,
    plan=None,
    donors=None,
):
    """``run_layers`` itself; the wrapper above only explains errors."""
    edits = _head_edits(model, zero, zero_per_row, mean, mean_per_row, means)
    capture = set(capture)
    label = _recompute_label(model, capture)
    out = {} if into is None else into
    allowed = _layer_filter(only_layers, model.n_layers)
    plan = plan or {}
    for layer in range(model.n_layers):
        if layer not in allowed:
            continue
        # the order of envoy accesses below is the layer's execution order
        attn, probs = _edit_layer(
            model, layer, plan, donors, edits, label if layer in capture else None
        )
        if layer in capture:
            if probs is None:
                probs = attn.output[1]  # [b, H, n, n]
            if probs is None and not allow_missing:
                raise RuntimeError(
                    f"{model.name}: layer {layer}'s attention returned no weights although "
                    "eager attention was requested; the model may not support switching "
                    "(reload it so the load-time probe can fall back to recomputing them)"
                )
            value = (
                reduce(probs)
                if reduce is not None
                else probs.to(torch.promote_types(probs.dtype, torch.float32))
            )
            out[layer] = save(value)
    return save(out)


def _head_edits(model, zero, zero_per_row, mean, mean_per_row, means):
    """Checked head ablations by layer: ``(zero, keep, mean, replace, means)``.

    ``zero`` and ``mean`` map a layer to its heads; ``keep`` and ``replace`` to per-row
    ``[b, H]`` masks.
    """
    if zero is not None and zero_per_row is not None:
        raise ValueError("pass either heads= or per_row= to zero_ablate, not both")
    n_heads = model.n_heads
    zero_layers = by_layer(model.check_heads(zero)) if zero is not None else {}
    keep = row_masks(_per_row(model, zero_per_row), n_heads) if zero_per_row else {}
    mean_layers = by_layer(model.check_heads(mean)) if mean is not None else {}
    replace = {}
    if mean_per_row:
        masks = row_masks(_per_row(model, mean_per_row), n_heads)
        replace = {layer: masks[layer] == 0 for layer in masks}
    if (mean_layers or replace) and means is None:
        raise ValueError("mean_ablate needs means=head_means(model, reference_texts, heads)")
    for layer in list(mean_layers) + list(replace):
        if layer not in means.means:
            raise ValueError(f"no reference means for layer {layer}; include it in head_means()")
    return zero_layers, keep, mean_layers, replace, means


def _recompute_label(model, capture):
    """The attention call's ``.source`` label when captures recompute probabilities, else None."""
    if not capture or model.capture_mode != "recompute":
        return None
    label = model.attention_call_label
    if label is None:
        raise RuntimeError(
            f"{model.name}: no attention_interface call in the attention forward, so "
            "probabilities cannot be recomputed; capture under eager attention instead"
        )
    return label


def _edit_layer(model, layer, plan, donors, edits, label):
    """Apply one layer's knockout, plan and head ablations, in execution order.

    With ``label`` (a recompute capture of this layer) the probabilities are recomputed
    from the attention call's inputs, after any knockout edited its mask.

    Returns:
        ``(attention envoy, recomputed probabilities or None)``.
    """
    env, n_heads, head_dim = model.nnsight, model.n_heads, model.head_dim
    zero_layers, keep, mean_layers, replace, means = edits
    attn = attention_module(env, layer)
    probs = None
    args = None
    knockout = plan.get("knockout", {})
    if layer in knockout:
        args, kwargs = knock_out(attn, knockout[layer], plan["site"])
    if label is not None:
        if args is None:
            args, kwargs = getattr(attn.source, label).inputs
        probs = recompute_probs(args, kwargs)
    apply_plan(model, layer, plan, donors)
    rows = getattr(model, "input_error", None) or ValueError
    if layer in zero_layers:
        zero_heads(env, layer, zero_layers[layer], n_heads, head_dim)
    if layer in keep:
        zero_heads(env, layer, None, n_heads, head_dim, keep=keep[layer], error=rows)
    if layer in mean_layers:
        mean_heads(env, layer, mean_layers[layer], n_heads, head_dim, means.means[layer])
    if layer in replace:
        mean_heads(env, layer, None, n_heads, head_dim, means.means[layer], replace[layer], rows)
    return attn, probs


def zero_ablate(model, heads=None, *, per_row=None, layers=None):
    """Zero-ablate heads in the current trace or invoke.

    The head's slice of the output projection's *input* is set to zero, so the head
    contributes nothing, exactly as if its attention probabilities were zero.

    Args:
        model: A ``bindscope.Model``.
        heads: ``(layer, head)`` pairs ablated in every row.
        per_row: Instead of ``heads``, one list of pairs per batch row of the invoke.
        layers: Only touch these layers (to interleave with captures).
    """
    run_layers(model, zero=heads, zero_per_row=per_row, only_layers=layers)


def mean_ablate(model, heads=None, means=None, *, per_row=None, layers=None):
    """Replace heads' pre-projection outputs by their means from ``head_means``.

    Same argument order as every primitive (model, heads, then what the heads get);
    the older ``mean_ablate(model, means, heads)`` order is still accepted.
    """
    if hasattr(heads, "means"):
        heads, means = means, heads  # the older (model, means, heads) order
    run_layers(model, mean=heads, mean_per_row=per_row, means=means, only_layers=layers)


def capture_probs(model, layers=None, *, reduce=None):
    """Capture post-softmax attention probabilities, keyed by layer.

    Like `capture_attention` (same ``layers=``: act only on these layers), but returns
    ``{layer: [b, H, n, n]}`` (or ``reduce(probs)``), as `run_layers` does.
    """
    wanted = sorted(_layer_filter(layers, model.n_layers))
    found = run_layers(model, capture=wanted, reduce=reduce, only_layers=wanted)
    return found


def capture_attention(model, layers=None, *, reduce=None):
    """Capture post-softmax attention probabilities ``[b, H, n, n]`` per requested layer.

    Under eager attention this is the attention module's own weights output; otherwise the
    probabilities are recomputed from the attention function's inputs. ``reduce`` maps a
    layer's probabilities to something smaller before it is saved (e.g. BSI ``[b, H]``).

    Returns:
        A list with one saved tensor per requested layer, ascending (`capture_probs`
        returns the same keyed by layer).
    """
    wanted = sorted(_layer_filter(layers, model.n_layers))
    found = run_layers(model, capture=wanted, reduce=reduce, only_layers=wanted)
    return save([found[layer] for layer in wanted])  # the list itself must outlive the trace


def ablate_rows(model, rows, means=None):
    """Zero-ablate (or, with ``means``, mean-ablate) each batch row's own heads."""
    if not any(rows):
        return
    same = all(r == rows[0] for r in rows)
    if means is None and same:
        run_layers(model, zero=rows[0])
    elif means is None:
        run_layers(model, zero_per_row=rows)
    elif same:
        run_layers(model, mean=rows[0], means=means)
    else:
        run_layers(model, mean_per_row=rows, means=means)

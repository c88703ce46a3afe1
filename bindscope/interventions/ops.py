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
        sites=None,
        d_model=0,
        logit_softcap=None,
    ):
        self.nnsight = envoy
        self.logit_softcap = logit_softcap
        self.sites = sites or {}  # {site: (module, port, index)} in execution order
        self.d_model = d_model
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


def attention_module(envoy, layer):
    """The uniform attention envoy of one decoder layer."""
    return envoy.model.layers[layer].self_attn


def head_view(x, n_heads, head_dim):
    """View an output-projection input ``[b, s, H*hd]`` as ``[b, s, H, hd]``."""
    return x.view(*x.shape[:-1], n_heads, head_dim)


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


def scored_token_sums(logits, owner, target_ids, weight, n_rows: int):
    """Weighted log-probabilities of scored tokens, summed per sequence.

    Args:
        logits: ``[T, V]``, one row per scored token.
        owner: ``[T]`` long, the sequence each token belongs to.
        target_ids: ``[T]`` long, the token scored.
        weight: ``[T]`` float, each token's weight (1/|choice| for a mean per choice token).
        n_rows: Number of sequences.

    Returns:
        ``[n_rows]`` float32 sums (0 for a sequence without scored tokens).
    """
    device = logits.device
    logp = logits.float().log_softmax(-1).gather(-1, target_ids.to(device)[:, None])[:, 0]
    out = torch.zeros(n_rows, dtype=torch.float32, device=device)
    return out.index_add(0, owner.to(device), logp * weight.to(device))


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
        plan=head_plan(model, per_row=[(), ((0, 0),)]),
        allow_missing=True,
    )
    logits = final_logits(model)  # [2, n, V]
    effect = (logits[0].float() - logits[1].float()).abs().max().cpu()
    stats = torch.stack([found[layer] for layer in range(model.n_layers)])
    return save({"stats": stats, "effect": effect})


def soft_capped(logits, cap):
    """``cap * tanh(logits / cap)``: the final logit soft-capping (Gemma 2); None: none."""
    if not cap:
        return logits
    return torch.tanh(logits / cap) * cap


def final_logits(model):
    """The logits the causal-LM forward returns (the LM head's output, then soft-capping).

    The forward caps after the head (Gemma 2, ``model.logit_softcap``), so the head's own
    output is not what the model predicts there.
    """
    return soft_capped(model.nnsight.lm_head.output, model.logit_softcap)


# -- the engine: sites, edits, plans ---------------------------------------------------------


def site_module(envoy, layer, module):
    """The envoy at dotted path ``module`` under decoder layer ``layer`` (``""``: the layer)."""
    found = envoy.model.layers[layer]
    for part in module.split(".") if module else ():
        found = getattr(found, part)
    return found


def site_tensor(envoy, layer, where):
    """The tensor at a site of one layer: ``where`` is ``(module, port, index)``.

    A tuple (a decoder layer or attention module's output in some families) is read at
    ``index``; in-place edits of the returned tensor are what the model computes with.
    """
    module, port, index = where
    found = site_module(envoy, layer, module)
    value = found.input if port == "input" else found.output
    if isinstance(value, (tuple, list)):
        value = value[index]
    return value


def unit_view(model, name, x):
    """A site's tensor as ``[b, s, U, k]``: U heads of head_dim for head_out, else 1 x d."""
    if name == "head_out":
        return head_view(x, model.n_heads, model.head_dim)
    return x.view(*x.shape[:-1], 1, x.shape[-1])


class Edit:
    """One edit of one site at one layer, on the site's ``[b, s, U, k]`` view.

    Attributes:
        where: ``[b, W, U]`` bool, True where a row's unit is edited at a position (padded
            columns), or ``[b, 1, U]`` for every position (each generation step too).
    """

    def __init__(self, where):
        self.where = where
        # False for an edit of some positions, even of a one-token text: a decoding step's
        # single column is then not one of them
        self.every_position = where.shape[1] == 1

    def fits(self, view, step=0):
        """Whether the edit applies to this view at generation step ``step``.

        Step 0 is the prompt pass; an edit of some positions acts on it only.
        """
        return self.every_position or (step == 0 and self.where.shape[1] == view.shape[1])

    def mask(self, view):
        """The mask as ``[b, W|1, U, 1]`` on the view's device."""
        return self.where.to(view.device)[..., None]  # [b, W|1, U, 1]


class ReplaceEdit(Edit):
    """Set edited cells to ``value`` (``[U, k]``; ``None`` for zero)."""

    def __init__(self, where, value=None):
        Edit.__init__(self, where)
        self.value = value

    def apply(self, view, donors):
        """Edit ``view`` in place (``donors``: the donor invoke's `site_outputs`)."""
        if self.value is None:
            value = torch.zeros((), dtype=view.dtype, device=view.device)
        else:
            value = self.value.to(device=view.device, dtype=view.dtype)[None, None]
        view.copy_(torch.where(self.mask(view), value, view))


class DonorEdit(Edit):
    """Set edited cells to a donor row's activations at the same site and padded column.

    Attributes:
        key: ``(site, layer)`` of the donor activations (``donors[key]`` is ``[d, W, U, k]``).
        donor_row: ``[b]`` long, each row's donor row.
    """

    def __init__(self, where, key, donor_row):
        Edit.__init__(self, where)
        self.key = key
        self.donor_row = donor_row

    def apply(self, view, donors):
        """Edit ``view`` in place (``donors``: the donor invoke's `site_outputs`)."""
        acts = donors[self.key]
        source = acts[self.donor_row.to(acts.device)].to(view.device, view.dtype)
        view.copy_(torch.where(self.mask(view), source, view))


class AddEdit(Edit):
    """Add ``vector`` (``[U, k]``, already scaled) to edited cells."""

    def __init__(self, where, vector):
        Edit.__init__(self, where)
        self.vector = vector

    def apply(self, view, donors):
        """Edit ``view`` in place (``donors``: the donor invoke's `site_outputs`)."""
        vector = self.vector.to(device=view.device, dtype=view.dtype)[None, None]
        view.copy_(torch.where(self.mask(view), view + vector, view))


class TracePlan:
    """Everything a trace body applies, as tensors (built by ``interventions.plan``).

    Attributes:
        edits: ``{(site, layer): [Edit, ...]}``, applied in list order (a text's edits
            touch disjoint cells: ``resolve.resolve_rows`` refuses two specs on one unit).
        donor_keys: ``(site, layer)`` pairs the donor invoke reads, in execution order.
        knockout: ``{layer: removed [b, H, W, W] bool}`` for this invoke's rows.
        knockout_batch: The same over donor and patched rows together (an empty invoke).
        knockout_site: ``(label, mask_index)`` of the attention call (see `knock_out`).
    """

    def __init__(
        self,
        edits=None,
        donor_keys=(),
        knockout=None,
        knockout_batch=None,
        knockout_site=None,
        rows=None,
    ):
        self.rows = rows  # batch rows the plan is for (None: any; its masks broadcast)
        self.edits = edits or {}
        self.donor_keys = list(donor_keys)
        self.knockout = knockout or {}
        self.knockout_batch = knockout_batch or {}
        self.knockout_site = knockout_site

    def __bool__(self):
        return bool(self.edits or self.knockout or self.knockout_batch)


def apply_edits(model, name, layer, x, plan, donors, step=0):
    """Apply the plan's edits of one site and layer to its tensor ``x``, in place."""
    entries = plan.edits.get((name, layer)) if plan else None
    if not entries:
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


def site_outputs(model, keys, into):
    """Fill ``into`` with the donor invoke's activations ``{(site, layer): [d, W, U, k]}``.

    Runs in an earlier invoke of the same trace as the patched texts: each site is read
    (and copied at once) before the patched rows' invoke reaches it and writes.
    """
    env = model.nnsight
    for name, layer in keys:
        x = site_tensor(env, layer, model.sites[name])
        into[(name, layer)] = unit_view(model, name, x).clone()


def knock_out_batch(model, knockout, site):
    """Knock edges out across a whole multi-invoke batch (run in an empty invoke).

    With donor rows in their own invoke, the mask must be replaced for all rows at once:
    one invoke's per-head mask cannot be joined to the others' shared one.
    """
    for layer in sorted(knockout):
        knock_out(attention_module(model.nnsight, layer), knockout[layer], site)


def _layer_filter(layers, n_layers):
    return set(range(n_layers)) if layers is None else {int(x) for x in layers}


def run_layers(
    model,
    *,
    capture=(),
    reduce=None,
    sites=None,
    only_layers=None,
    into=None,
    allow_missing=False,
    plan=None,
    donors=None,
    step=0,
):
    """Walk the layers once, in execution order, applying a plan and capturing.

    This is the single place that orders requests, so captures and edits of any sites and
    layers compose in one forward pass. Returns ``{layer: saved value}`` for the attention
    probabilities of the ``capture`` layers (``reduce(probs)`` when given) and
    ``{(site, layer): [b, s, U, k]}`` for the ``sites`` captures (``{site: layers}``), into
    ``into`` when given, marked saved. Bind it in the body (``found = run_layers(...)``):
    a remote run returns only saved values the body binds to a name, never a container it
    merely filled. ``allow_missing`` hands ``None`` to ``reduce`` when the module returned
    no weights (the load-time probe) instead of failing. ``plan`` is a `TracePlan` (from
    ``bindscope.interventions.plan``, or `head_plan` here); ``donors`` the `site_outputs`
    of its donor invoke; ``step`` the generation step (``for step in tracer.all()``):
    past the prompt pass (step 0) only edits of every position act.
    """
    try:
        return _run_layers(
            model,
            capture,
            reduce,
            sites or {},
            only_layers,
            into,
            allow_missing,
            plan,
            donors,
            step,
        )
    except Exception as exc:
        # A bindscope.Model explains nnsight's OutOfOrderError (an earlier call in the body
        # touched a later layer); a shipped TraceModel has no translator and re-raises.
        translate = getattr(model, "trace_order_error", None)
        error = translate(exc) if translate is not None else None
        if error is None:
            raise
        raise error from None


def resid_post_at(model, layers, rows, columns, plan=None, donors=None):
    """Walk the layers applying ``plan``; save ``resid_post`` of ``layers`` at some positions.

    Only the selected positions come back (a logit lens or a sweep's metric reads a few
    positions of a long text). ``resid_post`` is the last site of a layer, so reading it
    after `run_layers` of that layer keeps execution order.

    Args:
        model: The model (``TraceTarget``).
        layers: Layer indices to read.
        rows: ``[b, P]`` long, the batch row of each selected position.
        columns: ``[b, P]`` long, its padded column.
        plan: A `TracePlan` applied on the way (None: none).
        donors: The donor invoke's `site_outputs`, when the plan patches.

    Returns:
        ``{layer: [b, P, d_model]}``, saved.
    """
    wanted = {int(layer) for layer in layers}
    found = {}
    for layer in range(max(wanted) + 1):
        run_layers(model, plan=plan, donors=donors, only_layers=[layer])
        if layer in wanted:
            x = site_tensor(model.nnsight, layer, model.sites["resid_post"])
            found[layer] = save(x[rows.to(x.device), columns.to(x.device)].clone())
    return save(found)


def _run_layers(
    model, capture, reduce, sites, only_layers, into, allow_missing, plan, donors, step
):
    """``run_layers`` itself; the wrapper above only explains errors."""
    capture = set(capture)
    label = _recompute_label(model, capture)
    out = {} if into is None else into
    allowed = _layer_filter(only_layers, model.n_layers)
    plan = plan or TracePlan()
    wanted = {name: set(layers) for name, layers in sites.items()}
    for layer in range(model.n_layers):
        if layer not in allowed:
            continue
        probs = None
        # model.sites lists the sites in a decoder layer's execution order
        for name, where in model.sites.items():
            if name == "pattern":
                if layer in capture:
                    out[layer] = save(_pattern(model, layer, probs, reduce, allow_missing))
                continue
            if name == "head_out":  # the attention call comes before the output projection
                probs = _attention_call(model, layer, plan, label if layer in capture else None)
            keep = layer in wanted.get(name, ())
            if (name, layer) not in plan.edits and not keep:
                continue
            x = site_tensor(model.nnsight, layer, where)
            apply_edits(model, name, layer, x, plan, donors, step)
            if keep:
                out[(name, layer)] = save(unit_view(model, name, x).clone())
    return save(out)


def _pattern(model, layer, probs, reduce, allow_missing):
    """One layer's captured probabilities (or ``reduce`` of them)."""
    if probs is None:
        probs = site_tensor(model.nnsight, layer, model.sites["pattern"])  # [b, H, n, n]
    if probs is None and not allow_missing:
        raise RuntimeError(
            f"{model.name}: layer {layer}'s attention returned no weights although "
            "eager attention was requested; the model may not support switching "
            "(reload it so the load-time probe can fall back to recomputing them)"
        )
    if reduce is not None:
        return reduce(probs)
    return probs.to(torch.promote_types(probs.dtype, torch.float32))  # float64 stays float64


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


def _attention_call(model, layer, plan, label):
    """Apply one layer's knockout at the attention call; recompute probabilities if asked.

    With ``label`` (a recompute capture of this layer) the probabilities are recomputed
    from the attention call's inputs, after any knockout edited its mask.

    Returns:
        The recomputed probabilities, or None.
    """
    if layer not in plan.knockout and label is None:
        return None
    attn = attention_module(model.nnsight, layer)
    args = None
    if layer in plan.knockout:
        args, kwargs = knock_out(attn, plan.knockout[layer], plan.knockout_site)
    if label is None:
        return None
    if args is None:
        args, kwargs = getattr(attn.source, label).inputs
    return recompute_probs(args, kwargs)


def head_plan(model, heads=None, *, per_row=None, means=None):
    """A plan zeroing (with ``means``: mean-ablating) heads of every row, or of each row.

    For the primitives below, which run inside a trace the caller opened: ``heads`` act
    on every row (a ``[1, 1, H]`` mask broadcasts over the batch), ``per_row`` gives one
    head list per batch row.
    """
    if heads is not None and per_row is not None:
        raise ValueError("pass either heads= or per_row=, not both")
    rows = (
        [model.check_heads(heads)] if per_row is None else [model.check_heads(r) for r in per_row]
    )
    edits: dict = {}
    for r, row in enumerate(rows):
        for layer, hs in by_layer(row).items():
            if means is not None and layer not in means.means:
                raise ValueError(
                    f"no reference means for layer {layer}; include it in head_means()"
                )
            entries = edits.setdefault(("head_out", layer), [])
            if not entries:
                value = None if means is None else means.means[layer]
                entries.append(
                    ReplaceEdit(torch.zeros(len(rows), 1, model.n_heads, dtype=torch.bool), value)
                )
            entries[0].where[r, 0, hs] = True
    return TracePlan(edits, rows=None if per_row is None else len(rows))


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
    run_layers(model, plan=head_plan(model, heads, per_row=per_row), only_layers=layers)


def mean_ablate(model, heads=None, means=None, *, per_row=None, layers=None):
    """Replace heads' pre-projection outputs by their means from ``head_means``.

    Same argument order as every primitive (model, heads, then what the heads get);
    the older ``mean_ablate(model, means, heads)`` order is still accepted.
    """
    if hasattr(heads, "means"):
        heads, means = means, heads  # the older (model, means, heads) order
    if means is None:
        raise ValueError("mean_ablate needs means=head_means(model, reference_texts, heads)")
    plan = head_plan(model, heads, per_row=per_row, means=means)
    run_layers(model, plan=plan, only_layers=layers)


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
    per_row = None if all(r == rows[0] for r in rows) else rows
    plan = head_plan(model, rows[0] if per_row is None else None, per_row=per_row, means=means)
    run_layers(model, plan=plan)

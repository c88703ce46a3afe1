"""Code that runs inside an nnsight trace, locally or on NDIF.

Everything a trace body calls lives here, and this module imports only ``torch`` and
``math``: for remote runs ``bindscope.remote`` registers it with ``nnsight.register``, so
its source travels with each request and is rebuilt inside NDIF's sandbox, which refuses
other imports (``tests/remote/test_shipping.py`` enforces this). Inside a shipped body a
``bindscope.Model`` arrives as a `TraceModel` and ``HeadMeans`` as a `TraceMeans`; heads
are validated before the trace, in ``bindscope.interventions.head_checks``.

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
        """Pairs (or ``{layer: [heads]}``) sorted; they were validated before the trace was sent."""
        if isinstance(heads, dict):
            heads = [(layer, head) for layer in heads for head in heads[layer]]
        return tuple(sorted({(int(layer), int(head)) for layer, head in heads or ()}))


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
        self.__dict__.update(members)


def save(value):
    """Mark a value to come back from the trace (``nnsight.save`` without the import)."""
    return value.save()


def by_layer(heads):
    """Group sorted pairs as ``{layer: [heads]}`` in ascending layer order."""
    grouped: dict = {}
    for layer, head in sorted(heads):
        grouped.setdefault(layer, []).append(head)
    return grouped


def site(model, name, layer):
    """The tensor at site ``name`` of decoder layer ``layer``, where the family keeps it.

    The one accessor of a site (``families.Sites``, checked at load as ``model.sites``):
    every read and write of a head output, pattern, residual or block output goes
    through it, the engine's own included.
    """
    return site_tensor(model.nnsight, layer, model.sites[name])


def attention_module(model, layer):
    """The attention envoy of one layer: the module whose output holds the pattern."""
    return site_module(model.nnsight, layer, model.sites["pattern"][0])


def head_view(x, n_heads, head_dim):
    """View an output-projection input ``[b, s, H*hd]`` as ``[b, s, H, hd]``."""
    return x.view(*x.shape[:-1], n_heads, head_dim)


def end_aligned(x, keep, width):
    """Rows of ``x`` ``[b, W', ...]`` aligned from the end into ``width`` positions.

    Row ``r`` takes its last ``keep[r]`` positions into its last ``keep[r]``; the others
    are zeros (``[b, width, ...]``). A resample donor's outputs meet their row this way.
    """
    out = torch.zeros(x.shape[0], width, *x.shape[2:], dtype=x.dtype, device=x.device)
    for r in range(len(keep)):
        out[r, width - keep[r] :] = x[r, x.shape[1] - keep[r] :]
    return out


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
        kwargs = {**kwargs, "attention_mask": new}
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
    return metric_values(logits, {"logprob": (target_index, target_ids, target_weight)})


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


def collect_head_sums(model, layers, mask):
    """Save each listed layer's heads' pre-projection outputs summed over real positions.

    ``mask`` ``[b, s]`` bool is True on real (non-pad) tokens; the result is
    ``{layer: [H, hd]}`` float32.
    """
    found = {}
    for layer in layers:
        view = head_view(site(model, "head_out", layer), model.n_heads, model.head_dim).float()
        found[layer] = save(view[mask.to(view.device)].sum(0))  # [H, hd]
    return save(found)


def last_position_inputs(model, final_norm):
    """Save every layer's output-projection input and the final norm's input at the last column.

    The last column is the last token of every left-padded row; the result is
    ``{layer: [b, H*hd], "final": [b, d]}``.
    """
    found: dict = {}  # a local annotation is never evaluated: nothing to import
    for layer in range(model.n_layers):
        found[layer] = save(site(model, "head_out", layer)[:, -1].clone())
    found["final"] = save(getattr(model.nnsight.model, final_norm).input[:, -1].clone())
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


def keep_outputs(model, n_layers, into):
    """Append the outputs ``[b, n, d]`` of the layers below ``n_layers`` to ``into``.

    A clean pass keeps its residual stream this way, for passes that start higher up.
    """
    layers = model.nnsight.model.layers
    for i in range(n_layers):
        into.append(layers[i].output)
    return into


def start_at(model, start, residual):
    """Start the pass at layer ``start``: the layers below are skipped (nnsight ``skip``).

    ``residual`` (``[b, n, d]``) is a clean pass's output of layer ``start - 1`` for these
    rows; what the skipped layers would compute, if nothing the pass changes lies below
    ``start``.
    """
    layers = model.nnsight.model.layers
    for i in range(start):
        layers[i].skip(residual)


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
    """A site's tensor as ``[b, s, U, k]``: U heads of head_dim for head_out, else 1 x d.

    The pattern ``[b, H, q, k]`` is seen as ``[b, q, H, k]``: a query row is a position,
    each head a unit, the keys its width (pattern edits exist for estimates only).
    """
    if name == "head_out":
        return head_view(x, model.n_heads, model.head_dim)
    if name == "pattern":
        return x.transpose(1, 2)
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

    def target(self, view, donors):
        """What the edited cells become (``donors``: the donor invoke's `site_outputs`)."""
        raise NotImplementedError

    def apply(self, view, donors):
        """Edit ``view`` in place."""
        view.copy_(torch.where(self.mask(view), self.target(view, donors), view))

    def delta(self, view, donors):
        """``new - view``: what `apply` would change, 0 outside the edited cells."""
        return torch.where(self.mask(view), self.target(view, donors) - view, 0.0)


class ReplaceEdit(Edit):
    """Set edited cells to ``value`` (``[U, k]``; ``None`` for zero)."""

    def __init__(self, where, value=None):
        Edit.__init__(self, where)
        self.value = value

    def target(self, view, donors):
        """The value (zero when ``None``), broadcast over rows and positions."""
        if self.value is None:
            return torch.zeros((), dtype=view.dtype, device=view.device)
        return self.value.to(device=view.device, dtype=view.dtype)[None, None]


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

    def target(self, view, donors):
        """Each row's donor activations at the same site and padded columns."""
        acts = donors[self.key]
        return acts[self.donor_row.to(acts.device)].to(view.device, view.dtype)


class AddEdit(Edit):
    """Add ``vector`` (``[U, k]``, already scaled) to edited cells."""

    def __init__(self, where, vector):
        Edit.__init__(self, where)
        self.vector = vector

    def target(self, view, donors):
        """The cells plus the vector."""
        return view + self.vector.to(device=view.device, dtype=view.dtype)[None, None]


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
        path=None,
    ):
        self.path = path  # a PathPlan: edges patched through scratch rows, or None
        self.rows = rows  # batch rows the plan is for (None: any; its masks broadcast)
        self.edits = edits or {}
        self.donor_keys = list(donor_keys)
        self.knockout = knockout or {}
        self.knockout_batch = knockout_batch or {}
        self.knockout_site = knockout_site

    def __bool__(self):
        return bool(self.edits or self.knockout or self.knockout_batch or self.path)


class PathPlan:
    """Path patching of one batch (``PathPatch``): edges patched through scratch rows.

    The trace's batch is the donor (corrupted) rows, then the ``b`` texts, then ``slots``
    scratch rows per text (copies of it); `path_patch` runs in an empty invoke that sees
    them all. At each layer a receiver of text ``a`` gets a scratch row whose residual is
    text ``a``'s plus the ``corrupted - current`` outputs of the receiver's patched
    senders; the receiver's query, key or value (or MLP output) is then copied from that
    row, so only that receiver sees the change. The rows are reset at every layer.

    Attributes:
        geo: ``graph.edge_geometry`` of the model.
        n_donors: Donor rows before the texts; ``b``: texts; ``slots``: scratch rows per text.
        donor_row: ``[b]`` long, each text's donor row.
        mask: ``[b, R', S]`` 0/1, each text's patched edges over the ``R'`` receivers that
            have any (in the graph's order) and every sender.
        first_head: ``{layer: sender index of head 0}`` of layers whose heads send.
        mlp: ``{layer: sender index}`` of MLPs that send.
        at: ``{layer: [(slot, kind, unit, r)]}``: each receiver of the layer (``kind`` q, k,
            v or mlp; ``unit`` the head or group; ``r`` its index in ``mask``; ``slot``
            ``[b]`` long, its scratch row in each text that patches it).
        fills: ``{layer: [[b] long, ...]}``: per scratch row, the receiver whose residual
            each text's row carries (a text's rows are numbered among its own receivers).
        logits: The index of the logits receiver in ``mask``, or -1.
        means: With mean ablation, each sender's mean output (``"embed"`` ``[d]``,
            ``("z", l)`` ``[H*hd]``, ``("mlp", l)`` ``[d]``) in place of the donor rows'.
        donor_inputs: Keyword inputs of the donor invoke; ``scratch_inputs`` of the scratch
            rows' invoke (set by the planner; each text's rows are consecutive).
    """

    def __init__(
        self, geo, n_donors, b, slots, donor_row, mask, first_head, mlp, at, fills, logits,
        means=None,
    ):  # fmt: skip
        self.means = means  # {"embed", ("z", l), ("mlp", l)}: senders take means, not donors
        self.geo, self.n_donors, self.b, self.slots = geo, n_donors, b, slots
        self.donor_row, self.mask = donor_row, mask
        self.first_head, self.mlp, self.at, self.logits = first_head, mlp, at, logits
        self.fills = fills
        self.donor_inputs = None  # keyword inputs of the donor and scratch invokes
        self.scratch_inputs = None


def path_patch(model, path):
    """Apply a `PathPlan` in the current (empty) invoke, layer by layer.

    Reads the sender outputs of the donor rows (corrupted) and of the texts (current, so
    patched edges upstream propagate), fills each layer's scratch rows and copies each
    receiver's input from its row. Returns nothing: the texts' own invoke reads the result.
    """
    b, d, slots = path.b, path.n_donors, path.slots
    n_heads, texts = model.n_heads, slice(d, d + b)
    sent = joint = None
    for layer in range(model.n_layers):
        receivers = path.at.get(layer, [])
        x = site(model, "resid_pre", layer)
        scratch = d + b + torch.arange(b, device=x.device) * slots  # slot 0 of each text
        if sent is None:  # the senders' changes [S, b, s, d]
            sent = x.new_zeros(path.mask.shape[2], *x[texts].shape)
            if path.geo["post"]:  # through a sandwich norm: the heads' per receiver [R', ...]
                joint = x.new_zeros(path.mask.shape[1], *x[texts].shape)
            sent[0] = _sender_change(path, "embed", x)  # the embedding
        for slot, receiver in enumerate(path.fills.get(layer, ())):
            x[scratch + slot] = x[texts] + _received(path, sent, joint, receiver)
        attention = [entry for entry in receivers if entry[1] != "mlp"]
        if attention:
            _receive_attention(model, path, layer, attention, scratch)
        if layer in path.first_head:
            first = path.first_head[layer]
            z = site(model, "head_out", layer)
            dz = _sender_change(path, ("z", layer), z)
            if joint is None:  # each head's change alone: they add up
                sent[first : first + n_heads] = heads_through(model, path.geo, layer, dz, texts)
            else:  # through the norm: the heads of each receiver's set together
                sets = path.mask[:, :, first : first + n_heads]  # [b, R', H]
                joint += heads_through(model, path.geo, layer, dz, texts, sets)
        mlp = [entry for entry in receivers if entry[1] == "mlp"]
        if mlp or layer in path.mlp:
            _receive_mlp(model, path, layer, mlp[0] if mlp else None, sent, joint, scratch)
    if path.logits >= 0 and sent is not None:
        final = site(model, "resid_post", model.n_layers - 1)
        final[texts] = final[texts] + _received(path, sent, joint, path.logits)


def _receive_mlp(model, path, layer, entry, sent, joint, scratch):
    """The texts' MLP output from its receiver's scratch row; its change as a sender."""
    d, b = path.n_donors, path.b
    row = None if entry is None else scratch + entry[0].to(scratch.device)
    if row is not None and path.geo["mlp_reads"] == "resid_mid":
        xm = site(model, "resid_mid", layer)
        xm[row] = xm[d : d + b] + _received(path, sent, joint, entry[3])
    y = site(model, "mlp_out", layer)
    if row is not None:
        y[d : d + b] = _from_scratch(path, entry[3], y[row], y[d : d + b])
    if layer in path.mlp:
        sent[path.mlp[layer]] = _sender_change(path, ("mlp", layer), y)


def _received(path, sent, joint, r):
    """``[b, s, d]``: the sum of receiver ``r``'s patched senders' changes, per text.

    ``r`` is one receiver, or ``[b]`` long: one per text.
    """
    rows = torch.arange(path.b)
    if not isinstance(r, int):
        r = r.to(rows.device)
    weights = path.mask[rows, r].to(sent.device, sent.dtype)  # [b, S]
    total = torch.einsum("bs,sbtd->btd", weights, sent)
    if joint is None:
        return total
    return total + joint[r if isinstance(r, int) else r.to(joint.device), rows.to(joint.device)]


def _receive_attention(model, path, layer, entries, scratch):
    """Each receiver's query, key or value of the texts taken from its scratch row.

    Edited in place: the key and value the attention call gets are the cache's own
    tensors, so a generation's later steps read the patched prompt keys and values.
    """
    d, b = path.n_donors, path.b
    call = getattr(attention_module(model, layer).source, path.geo["label"])
    args, _ = call.inputs
    first = path.geo["qkv"]
    for slot, kind, unit, r in entries:
        t = args[first + "qkv".index(kind)]  # [rows, H|KV, s, hd]
        row = scratch + slot.to(scratch.device)
        t[d : d + b, unit] = _from_scratch(path, r, t[row, unit], t[d : d + b, unit])


def _from_scratch(path, r, patched, own):
    """``patched`` in the texts that patch an edge into receiver ``r``, ``own`` elsewhere.

    A text of the batch without such an edge keeps its own value: it may carry another
    spec, whose edits its scratch rows do not see.
    """
    reads = path.mask[:, r].to(own.device).sum(-1) > 0  # [b]
    return torch.where(reads.view(-1, *([1] * (own.dim() - 1))), patched, own)


def _sender_change(path, key, x):
    """``[b, ...]``: a sender's ablated output (donor rows' or mean ``key``) minus the texts'."""
    own = x[path.n_donors : path.n_donors + path.b]
    if path.means is None:
        return x[path.donor_row.to(x.device)] - own
    return path.means[key].to(x.device, x.dtype).expand_as(own) - own


def heads_through(model, geo, layer, dz, rows, sets=None):
    """``[G, b, s, d]``: the change of ``attn_out`` when each set's heads move by ``dz``.

    Args:
        model: The model.
        geo: ``graph.edge_geometry`` of the model.
        layer: The heads' layer.
        dz: ``[b, s, H*hd]`` the change of the output projection's input.
        rows: The batch rows ``dz`` belongs to (a slice: the texts, after any donor rows).
        sets: ``[b, G, H]`` 0/1, the heads of each set; None: each head alone (``G = H``).

    Without a norm after the projection the sets' changes add up head by head; with one
    (OLMo 2, Gemma 2/3) each set's sum goes through the norm, so a set of every head gives
    exactly the ablated ``attn_out``.
    """
    if geo["post"]:  # the projection's output and attn_out, read before it is called below
        o = site_tensor(model.nnsight, layer, (geo["head_out"], "output", 0))[rows]
        a = site(model, "attn_out", layer)[rows]
    # each head's slice alone through the output projection (the bias cancels), run where
    # the weights are: no projection matrix leaves the server
    proj = site_module(model.nnsight, layer, geo["head_out"])
    alone = torch.eye(model.n_heads, dtype=dz.dtype, device=dz.device)
    alone = alone.repeat_interleave(model.head_dim, 1)[:, None, None]  # [H, 1, 1, H*hd]
    per_head = proj(dz[None] * alone) - proj(torch.zeros_like(dz[:1, :1]))  # [H, b, s, d]
    joint = per_head
    if sets is not None:
        joint = torch.einsum("bgh,hbsd->gbsd", sets.to(dz.device, dz.dtype), per_head)
    if not geo["post"]:
        return joint
    norm = site_module(model.nnsight, layer, geo["post"])
    return norm(o[None] + joint) - a[None]


# -- edge attribution (EAP, EAP-IG): the gradient at each receiver's own input -----------------


def edge_metric(model, terms):
    """The metric of every row from the final logits (soft-capped as the forward returns them).

    ``terms`` is ``{"keep": K, "terms": ...}`` (`metric_values` of the last ``K``
    positions), or ``{"fn": f, "rows": [pair indices]}`` for a user function
    ``f(logits [b, V] at the last position, rows) -> [b]`` (local models only).
    """
    logits = final_logits(model)
    if "terms" not in terms:
        return terms["fn"](logits[:, -1].float(), terms["rows"])
    return metric_values(logits[:, -terms["keep"] :], terms["terms"])


def edge_sender_outputs(model, into):
    """Fill ``into`` with every edge sender's raw output (the donor pass of EAP).

    ``{("resid_pre", 0), ("head_out", l), ("mlp_out", l)}`` as `site_outputs` reads them.
    """
    sites = ("head_out", "mlp_out")
    keys = [("resid_pre", 0)] + [(name, i) for i in range(model.n_layers) for name in sites]
    return site_outputs(model, keys, into)


def edge_attribution_pass(model, terms, path, donors, mask, alpha=1.0, state=None, last=True):
    """One forward and backward pass: every edge's gradient at one integration step.

    Walks the layers through `site` like `path_patch` (whose `PathPlan` gives the layout):
    the gradient of the metric at each receiver's query, key, value (per head or group),
    MLP output and the final residual, pulled back through that receiver alone to the
    residual it reads, in one backward pass and one batched vector-Jacobian product per
    layer and kind, times each sender's ``corrupted - clean`` output, over real positions.

    Args:
        model: The model (a ``TraceModel`` when shipped).
        terms: The metric's terms (`edge_metric`).
        path: The batch's `PathPlan` (its ``geo``).
        donors: `edge_sender_outputs` of the corrupted texts, one row per text.
        mask: ``[b, s]`` the attention mask (1 on real tokens).
        alpha: Layer 0's input is moved to ``cor + alpha (clean - cor)`` (EAP-IG, inputs).
        state: ``(deltas, gradients, passes)`` of the earlier passes of these texts, or None
            in the first, which must be the ``alpha = 1`` pass (it computes the deltas).
        last: Whether this is the last step: its pass multiplies the receivers' gradients,
            summed over the steps, by the senders' changes once (the deltas do not move
            between steps, so one product serves every step).

    Returns:
        ``({"metric": [b], and when ``last`` "scores": [b, S, R]} saved, state)``: scores
        in the graph's order, averaged over steps; the state (the senders' changes
        ``[S, b, s, d]`` on real positions, the gradients summed so far as ``[R_i, b, s, d]``
        parts in the graph's order, the passes) stays where the pass ran, for a later pass.
    """
    geo, n_layers, n_heads = path.geo, model.n_layers, model.n_heads
    x0 = site(model, "resid_pre", 0)
    cor = _donor_like(donors, ("resid_pre", 0), x0)
    if alpha != 1.0:
        x0.copy_(cor + alpha * (x0 - cor))
    if not x0.requires_grad:  # NDIF serves frozen weights: track gradients from here
        x0.requires_grad_(True)
    sent = [(cor - x0)[None].detach()] if state is None else None
    inputs, qkv, mlp_in, mlp_out = [], [], [], []
    for layer in range(n_layers):
        x = x0 if layer == 0 else site(model, "resid_pre", layer)
        inputs.append(x)
        args, _ = getattr(attention_module(model, layer).source, geo["label"]).inputs
        qkv.append(tuple(args[geo["qkv"] : geo["qkv"] + 3]))
        if sent is not None:
            z = site(model, "head_out", layer)
            dz = _donor_like(donors, ("head_out", layer), z) - z
            sent.append(heads_through(model, geo, layer, dz, slice(None)).detach())
        mlp_in.append(site(model, "resid_mid", layer) if geo["mlp_reads"] == "resid_mid" else x)
        y = site(model, "mlp_out", layer)
        mlp_out.append(y)
        if sent is not None:
            sent.append((_donor_like(donors, ("mlp_out", layer), y) - y)[None].detach())
    final = site(model, "resid_post", n_layers - 1)
    metric = edge_metric(model, terms)
    wrt = [t for triple in qkv for t in triple] + mlp_out + [final]
    grads = _gradients(metric.sum(), wrt, True, start=x0)  # kept for the pullbacks below
    found = []
    for layer in range(n_layers):
        for j, units in ((0, n_heads), (1, model.n_kv_heads), (2, model.n_kv_heads)):
            found.append(_per_unit_vjp(qkv[layer][j], inputs[layer], grads[3 * layer + j], units))
        found.append(_per_unit_vjp(mlp_out[layer], mlp_in[layer], grads[3 * n_layers + layer], 1))
    g = grads[-1]
    found.append((torch.zeros_like(final) if g is None else g)[None].detach())
    if state is None:
        deltas = torch.cat(sent or [])
        state = (deltas * mask.to(deltas.device, deltas.dtype)[None, :, :, None], found, 0)
    else:  # this pass's gradients added in place, part by part (no copy)
        for total, part in zip(state[1], found):
            total.add_(part)
    deltas, summed, passes = state = (state[0], state[1], state[2] + 1)
    out = {"metric": metric.detach()}
    if last:
        scores = torch.einsum("rbsd,tbsd->btr", torch.cat(summed).float(), deltas.float())
        out["scores"] = scores / passes
    return save(out), state


def _donor_like(donors, key, x):
    """The donor pass's ``[b, W, U, k]`` activations of ``key`` shaped like ``x``."""
    return donors[key].reshape(x.shape).to(x.device, x.dtype)


def _per_unit_vjp(output, wrt, grad, units):
    """``[U, b, s, d]``: ``grad`` of each unit (dim 1 of ``output``) pulled back alone."""
    if grad is None:
        return torch.zeros(units, *wrt.shape, dtype=wrt.dtype, device=wrt.device)
    eye = torch.eye(units, dtype=grad.dtype, device=grad.device)
    masks = eye.view(units, 1, units, *([1] * (grad.dim() - 2)))
    cot = masks * grad[None]
    (found,) = torch.autograd.grad(
        output, wrt, grad_outputs=cot, is_grads_batched=True, retain_graph=True
    )
    return found.detach()


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
    for name, layer in keys:
        x = site(model, name, layer)
        into[(name, layer)] = unit_view(model, name, x).clone()
    return into


def knock_out_batch(model, knockout, site):
    """Knock edges out across a whole multi-invoke batch (run in an empty invoke).

    With donor rows in their own invoke, the mask must be replaced for all rows at once:
    one invoke's per-head mask cannot be joined to the others' shared one.
    """
    for layer in sorted(knockout):
        knock_out(attention_module(model, layer), knockout[layer], site)


def _layer_filter(layers, n_layers):
    return set(range(n_layers)) if layers is None else {int(x) for x in layers}


def run_layers(
    model,
    *,
    capture=(),
    reduce=None,
    sites=None,
    only_layers=None,
    allow_missing=False,
    plan=None,
    donors=None,
    step=0,
):
    """Walk the layers once, in execution order, applying a plan and capturing.

    This is the single place that orders requests, so captures and edits of any sites and
    layers compose in one forward pass. Returns ``{layer: saved value}`` for the attention
    probabilities of the ``capture`` layers (``reduce(probs)`` when given) and
    ``{(site, layer): [b, s, U, k]}`` for the ``sites`` captures (``{site: layers}``),
    marked saved. Bind it in the body (``found = run_layers(...)``): a remote run returns
    only saved values the body binds to a name. ``allow_missing`` hands ``None`` to
    ``reduce`` when the module returned no weights (the load-time probe) instead of
    failing. ``plan`` is a `TracePlan` (from
    ``bindscope.interventions.plan``, or `head_plan` here); ``donors`` the `site_outputs`
    of its donor invoke; ``step`` the generation step (``for step in tracer.all()``):
    past the prompt pass (step 0) only edits of every position act.
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
            x = site(model, "resid_post", layer)
            found[layer] = save(x[rows.to(x.device), columns.to(x.device)].clone())
    return save(found)


def _run_layers(model, capture, reduce, sites, only_layers, allow_missing, plan, donors, step):
    """``run_layers`` itself; the wrapper above only explains errors."""
    capture = set(capture)
    label = _recompute_label(model, capture)
    out: dict = {}  # {layer: probs} and {(site, layer): view}
    allowed = _layer_filter(only_layers, model.n_layers)
    plan = plan or TracePlan()
    wanted = {name: set(layers) for name, layers in (sites or {}).items()}
    for layer in range(model.n_layers):
        if layer not in allowed:
            continue
        probs = None
        # model.sites lists the sites in a decoder layer's execution order
        for name in model.sites:
            if name == "pattern":
                if (name, layer) in plan.edits:
                    raise ValueError("a pattern edit is estimated (attribution_pass), not run")
                if layer in capture:
                    out[layer] = save(_pattern(model, layer, probs, reduce, allow_missing))
                continue
            if name == "head_out":  # the attention call comes before the output projection
                probs = _attention_call(model, layer, plan, label if layer in capture else None)
            keep = layer in wanted.get(name, ())
            if (name, layer) not in plan.edits and not keep:
                continue
            x = site(model, name, layer)
            apply_edits(model, name, layer, x, plan, donors, step)
            if keep:
                out[(name, layer)] = save(unit_view(model, name, x).clone())
    return save(out)


def _pattern(model, layer, probs, reduce, allow_missing):
    """One layer's captured probabilities (or ``reduce`` of them)."""
    if probs is None:
        probs = site(model, "pattern", layer)  # [b, H, n, n]
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
    call = None
    if layer in plan.knockout:
        call = knock_out(attention_module(model, layer), plan.knockout[layer], plan.knockout_site)
    if label is None:
        return None
    return recompute_probs(*(call or getattr(attention_module(model, layer).source, label).inputs))


def head_plan(model, heads=None, *, per_row=None, means=None):
    """A plan zeroing (with ``means``: mean-ablating) heads of every row, or of each row.

    For the primitives below, which run inside a trace the caller opened: ``heads`` act
    on every row (a ``[1, 1, H]`` mask broadcasts over the batch), ``per_row`` gives one
    head list per batch row.
    """
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
    return run_layers(model, capture=wanted, reduce=reduce, only_layers=wanted)


def capture_attention(model, layers=None, *, reduce=None):
    """Capture post-softmax attention probabilities ``[b, H, n, n]`` per requested layer.

    Under eager attention this is the attention module's own weights output; otherwise the
    probabilities are recomputed from the attention function's inputs. ``reduce`` maps a
    layer's probabilities to something smaller before it is saved (e.g. BSI ``[b, H]``).

    Returns:
        A list with one saved tensor per requested layer, ascending (`capture_probs`
        returns the same keyed by layer).
    """
    found = capture_probs(model, layers, reduce=reduce)
    return save([found[layer] for layer in sorted(found)])  # the list must outlive the trace


# -- attribution patching: the same plans, estimated to first order ---------------------------
#
# For a metric ``m`` and an edit that would move a site's tensor from ``x`` to ``x'``, the
# first-order estimate of the metric's change is ``sum((x' - x) * dm/dx)`` over the edited
# cells (Nanda 2023; Syed, Rager and Conmy 2023; Kramar et al. 2024, "AtP*"), from one clean
# forward pass and one backward pass for every edit at once. The pass walks a `TracePlan`
# through the same site accessor as `run_layers` and asks each edit for its `Edit.delta`, so
# whatever a plan can apply it can estimate, at any site.
#
# A pattern change (``Knockout``, a pattern copied from a donor) reaches the metric through
# ``z = A v``, linear in the probabilities ``A``: ``sum((A' - A) * dm/dA)`` is exact in the
# pattern (AtP* recomputes ``A'``, first order only above the head). The linearised estimate
# (plain AtP, ``method="atp"``) instead takes the score change ``ds`` through the softmax to
# first order, ``sum(ds * dm/ds)``, which misses a head whose softmax is saturated.

# A probability that underflows is read as this much when its log is needed (the
# linearised estimate's score change); log(1e-30) = -69, far past any saturation.
TINY = 1e-30


def metric_values(logits, terms):
    """The metric of every row: weighted log-probabilities plus weighted logits.

    Args:
        logits: ``[b, K, V]`` (the last ``K`` positions' logits).
        terms: ``{"logprob": (index, target, weight), "logit": (index, target, weight)}``
            (either may be missing), each ``[b, T]``: the kept position that predicts,
            the token id, and its weight (0 on padding).

    Returns:
        ``[b]`` float32.
    """
    device = logits.device
    rows = torch.arange(logits.shape[0], device=device)[:, None]
    value = torch.zeros(logits.shape[0], device=device)
    for kind in [kind for kind in ("logprob", "logit") if kind in terms]:
        index, target, weight = terms[kind]
        picked = logits[rows, index.to(device)].float()  # [b, T, V]
        if kind == "logprob":
            picked = picked.log_softmax(-1)
        chosen = picked.gather(-1, target.to(device)[:, :, None]).squeeze(-1)  # [b, T]
        value = value + (chosen * weight.to(device)).sum(-1)
    return value


def knockout_pattern(probs, removed):
    """The probabilities after removing edges: each query row renormalised over the rest.

    A softmax with minus infinity on some scores is the softmax of the others, so this is
    the exact pattern the knockout gives (the head's inputs left as they are).
    """
    kept = probs * (~removed.to(probs.device)).to(probs.dtype)
    total = kept.sum(-1, keepdim=True)
    return kept / torch.where(total > 0, total, torch.ones_like(total))


def pattern_estimate(probs, grad, new, rows, method):
    """``[b, H]`` estimate of a pattern change ``probs -> new`` on the query ``rows``.

    Args:
        probs: ``[b, H, W, W]`` clean probabilities.
        grad: ``dm/dprobs``, same shape.
        new: The intervened probabilities, same shape.
        rows: ``[b, H, W]`` bool, the query rows that change.
        method: ``atp*`` (exact pattern, ``sum((new - probs) * grad)``) or ``atp``
            (softmax linearised in the scores: ``ds = log new - log probs``).
    """
    rows = rows.to(probs.device)[..., None]
    p, g, q = probs.float(), grad.float(), new.float()
    if method == "atp*":
        return torch.where(rows, (q - p) * g, 0.0).sum((-1, -2))
    # dm/ds of a softmax row: p * (g - sum_k p g); the row's shift of s cancels in it
    dm_ds = p * (g - (p * g).sum(-1, keepdim=True))
    live = (p > 0) | (q > 0)  # causal, unpadded entries
    ds = torch.log(q.clamp_min(TINY)) - torch.log(p.clamp_min(TINY))
    return torch.where(rows & live, ds * dm_ds, 0.0).sum((-1, -2))


def _site_estimate(model, name, layer, x, g, plan, donors, method):
    """``[b, U]`` estimate of every edit of one site and layer (``g``: ``dm/dx``)."""
    view, grad = unit_view(model, name, x), unit_view(model, name, g)
    total = torch.zeros(view.shape[0], view.shape[2], device=x.device)
    if name == "pattern" and layer in plan.knockout:
        removed = plan.knockout[layer].to(x.device)  # [b, H, W, W]
        total += pattern_estimate(x, g, knockout_pattern(x, removed), removed.any(-1), method)
    for edit in plan.edits.get((name, layer), ()):
        if not edit.fits(view):
            continue
        if name != "pattern":
            total += (edit.delta(view, donors).float() * grad.float()).sum((1, 3))
            continue
        # a pattern comes from a donor of the text's length (Patch): the same keys
        mask = edit.mask(view)  # [b, W, H, 1]
        new = torch.where(mask, edit.target(view, donors), view)
        rows = mask[..., 0].transpose(1, 2)  # [b, H, W]
        total += pattern_estimate(x, g, new.transpose(1, 2), rows, method)
    return total


def _estimates(model, taps, grads, plan, donors, method):
    """``{(site, layer): [b, U]}`` from one set of gradients (``grads``: one per live tap).

    A site that nothing reaches the metric from estimates 0; one that no parameter
    reaches (a constant: it is not in the graph) has no gradient, and estimates NaN.
    """
    out, grads = {}, iter(grads)
    for (name, layer), x in taps.items():
        g = next(grads) if x.requires_grad else math.nan
        x = x.detach()
        if g is None or g is math.nan:
            units = unit_view(model, name, x).shape[2]
            out[(name, layer)] = torch.full((x.shape[0], units), 0.0 if g is None else g)
            continue
        out[(name, layer)] = _site_estimate(model, name, layer, x, g, plan, donors, method)
    return out


def _gradients(total, wrt, retain, start):
    """``d total / d x`` for each tensor of ``wrt`` (None where it does not reach).

    The gradient at ``start`` (layer 0's input) is taken too, and must exist
    (`reached_input`).
    """
    *found, at_start = torch.autograd.grad(
        total, [*wrt, start], allow_unused=True, retain_graph=retain
    )
    reached_input(at_start)
    return found


def reached_input(grad):
    """Refuse a backward pass that never reached layer 0's input.

    Every layer reads layer 0's input, so in one autograd graph the metric always has a
    gradient there. None means the graph was cut between them, and every gradient past
    the cut would read as zero: that is what happens in ndif 0.1.2's sandbox (untrusted
    requests), which runs the trace body in another process and hands it copies of the
    model's tensors, so no gradient flows from the metric back into the model.
    """
    if grad is None:
        raise RuntimeError(
            "the metric's gradient did not reach layer 0's input: the autograd graph is cut "
            "between the model and this code (on NDIF: the request ran in the server's "
            "sandbox, untrusted, where gradients do not cross into the model's process), "
            "so every gradient method would read zeros; run it locally or on a server "
            "that runs your requests trusted"
        )


def attribution_pass(model, terms, plan, donors=None, method="atp*", grad_drop=False):
    """One clean forward pass with gradients: the metric and every planned edit's estimate.

    Walks the layers like `run_layers`, reading each site the plan edits (and, for a
    knockout, the pattern) through `site` without applying anything, then the metric from
    the logits and its gradients with ``torch.autograd.grad`` (no parameter gradient is
    accumulated). Only estimates and ``[b]`` metric values come back.

    Args:
        model: The model (a ``TraceModel`` when shipped).
        terms: The metric's terms (`metric_values`).
        plan: The batch's `TracePlan` (``knockout`` for these rows, not ``knockout_batch``).
        donors: The donor pass's `site_outputs` when the plan copies donors.
        method: ``atp*`` or ``atp`` (`pattern_estimate`).
        grad_drop: Also return GradDrop scores (Kramar et al. 2024).

    Returns:
        ``{"metric": [b], "estimate": {(site, layer): [b, U]}}`` float32, saved; with
        ``grad_drop`` also ``"grad_drop"`` in the same form.
    """
    taps, blocks = {}, []
    stream = site(model, "resid_pre", 0)  # [b, W, d]
    if not stream.requires_grad:  # NDIF serves frozen weights: track gradients from here
        stream.requires_grad_(True)
    for layer in range(model.n_layers):
        for name in model.sites:  # in execution order
            if (name, layer) in plan.edits or (name == "pattern" and layer in plan.knockout):
                first = (name, layer) == ("resid_pre", 0)  # read once: a second read would wait
                taps[(name, layer)] = stream if first else site(model, name, layer)
            if grad_drop and name in ("attn_out", "mlp_out"):
                blocks.append(site(model, name, layer))
    metric = metric_values(final_logits(model), terms)
    wrt = [x for x in taps.values() if x.requires_grad]
    total = metric.sum()
    grads = _gradients(total, wrt, grad_drop, start=stream)
    estimate = _estimates(model, taps, grads, plan, donors, method)
    found = {"metric": metric.detach(), "estimate": {k: v.detach() for k, v in estimate.items()}}
    if grad_drop:
        # GradDrop: the estimate again with the gradient through one layer's residual
        # contributions (attention, then MLP) stopped, for every layer; the mean |estimate|
        # over the L - 1 layers that leave a head's gradient (its own layer stops all of it)
        score = {k: torch.zeros_like(v) for k, v in estimate.items()}
        for layer in range(model.n_layers):
            # a hook returning zeros stops the gradient through the dropped layer's blocks
            hooks = [b.register_hook(torch.zeros_like) for b in blocks[2 * layer : 2 * layer + 2]]
            dropped = _gradients(total, wrt, layer < model.n_layers - 1, stream)
            for hook in hooks:
                hook.remove()
            for k, v in _estimates(model, taps, dropped, plan, donors, method).items():
                score[k] += v.abs()
        found["grad_drop"] = {
            k: (v / max(model.n_layers - 1, 1)).detach() for k, v in score.items()
        }
    return save(found)

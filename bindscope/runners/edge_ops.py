"""Trace bodies of edge attribution (EAP, EAP-IG) and exact path patching: torch only.

Like ``bindscope.interventions.ops`` this module imports only ``torch``, carries no
annotations and no ``from __future__`` import, so it can ship to NDIF as it is. Every
tensor is read through the family's site table (``model.sites``: ``(module, port,
index)`` per site) and the attention call's ``.source`` label, never a fixed module path.

The graph (``bindscope.runners.edges.EdgeGraph``): senders are the input embedding, every
head and every MLP; receivers every head's query, every key/value group's key and value
(the ones the model computes: no ungrouping), every MLP and the logits. An edge's value is
what its sender writes into the residual stream, read by its receiver through the
receiver's own copy of the pre-norm residual (its layer input for q/k/v, the MLP's
input residual, the final residual for the logits).

``geo`` (built by ``edges.py``): ``w_o`` ``{layer: [H, hd, d]}``, the output projection of
each head as a matrix; ``post``, the module after the output projection whose output is
``attn_out`` (a sandwich norm), or ``""``; ``head_out`` and ``attn_out`` module paths;
``label``, the attention call (``qkv``: the index of its query argument);
``mlp_reads``, ``"resid_mid"`` or ``"resid_pre"`` (a parallel residual).
"""

import torch


def save(value):
    """Mark a value to come back from the trace."""
    return value.save()


def at(model, layer, name):
    """The tensor at site ``name`` of ``layer`` (the family's ``(module, port, index)``)."""
    return at_module(model, layer, model.sites[name])


def at_module(model, layer, where):
    """The tensor at ``(module, port, index)`` under decoder layer ``layer``."""
    module, port, index = where
    found = model.nnsight.model.layers[layer]
    for part in module.split(".") if module else ():
        found = getattr(found, part)
    value = found.input if port == "input" else found.output
    if isinstance(value, (tuple, list)):
        value = value[index]
    return value


def submodule(model, layer, path):
    """The envoy at ``path`` under decoder layer ``layer`` (callable inside the trace)."""
    found = model.nnsight.model.layers[layer]
    for part in path.split("."):
        found = getattr(found, part)
    return found


def head_deltas(model, geo, layer, z_cur, z_cor, sets, o_cur=None, a_cur=None):
    """``[G, b, s, d]``: the change of ``attn_out`` when each set's heads take ``z_cor``.

    Args:
        model: The model (a ``TraceModel`` when shipped).
        geo: The layout (module docstring).
        layer: The heads' layer.
        z_cur: ``[b, s, H*hd]`` the heads' outputs in this run (the output projection's input).
        z_cor: The same on the corrupted texts.
        sets: ``[G, H]`` 0/1, the heads of each set.
        o_cur: ``[b, s, d]`` the output projection's output (with a sandwich norm only).
        a_cur: ``[b, s, d]`` ``attn_out`` in this run (with a sandwich norm only).

    Without a norm after the projection, the sets' changes add up head by head; with one
    (OLMo 2, Gemma 2/3) each set's sum goes through the norm, so a set of every head gives
    exactly the corrupted ``attn_out``.
    """
    n_heads, head_dim = model.n_heads, model.head_dim
    dz = z_cor.to(z_cur.device, z_cur.dtype) - z_cur
    dz = dz.view(*dz.shape[:-1], n_heads, head_dim)  # [b, s, H, hd]
    w_o = geo["w_o"][layer].to(dz.device, dz.dtype)  # [H, hd, d]
    per_head = torch.einsum("bshk,hkd->hbsd", dz, w_o)
    joint = torch.einsum("gh,hbsd->gbsd", sets.to(dz.device, dz.dtype), per_head)
    if not geo["post"]:
        return joint
    norm = submodule(model, layer, geo["post"])
    return norm(o_cur[None] + joint) - a_cur[None]


def attention_qkv(model, geo, layer):
    """The attention call of ``layer``, its inputs, and where its query, key and value are.

    Query, key and value (``[b, H|KV, s, hd]``) are ``args[first : first + 3]``.
    """
    attn = model.nnsight.model.layers[layer].self_attn
    call = getattr(attn.source, geo["label"])
    args, kwargs = call.inputs
    return call, args, kwargs, geo["qkv"]


def _interpolate(model, geo, plan):
    """Layer 0's input moved to ``cor + alpha * (clean - cor)`` (EAP-IG, inputs variant)."""
    x = at(model, 0, "resid_pre")
    alpha = plan["alpha"]
    if alpha != 1.0:
        cor = plan["embed"].to(x.device, x.dtype)
        x.copy_(cor + alpha * (x - cor))
    return x


def edge_gradients(model, geo, plan, terms):
    """One forward and backward pass: each receiver's gradient at its own input copy.

    Args:
        model: The model.
        geo: The layout (module docstring).
        plan: ``{"alpha": float, "embed": [b, s, d]}`` (the corrupted embedding, for
            ``alpha`` below 1), and with ``"corrupt"`` (``{"embed", ("z", l), ("mlp", l)}``)
            the senders' activation differences are computed too (on a clean pass).
        terms: The metric's terms (``ops.metric_values``).

    Returns:
        ``{"metric": [b], "grads": [R, b, s, d], "deltas": [S, b, s, d]}`` (deltas only
        with ``plan["corrupt"]``), in the graph's receiver and sender order.
    """
    corrupt = plan.get("corrupt")
    n_layers = model.n_layers
    inputs, qkv, mlp_in, mlp_out, deltas = [], [], [], [], []
    for layer in range(n_layers):
        x = _interpolate(model, geo, plan) if layer == 0 else at(model, layer, "resid_pre")
        if layer == 0 and corrupt is not None:
            deltas.append((corrupt["embed"].to(x.device, x.dtype) - x)[None].detach())
        inputs.append(x)
        _, args, _, first = attention_qkv(model, geo, layer)
        qkv.append(tuple(args[first : first + 3]))
        if corrupt is not None:
            sets = torch.eye(model.n_heads)
            found = layer_head_deltas(model, geo, layer, None, corrupt[("z", layer)], sets)
            deltas.append(found.detach())
        reads = at(model, layer, geo["mlp_reads"]) if geo["mlp_reads"] == "resid_mid" else x
        mlp_in.append(reads)
        y = at(model, layer, "mlp_out")
        mlp_out.append(y)
        if corrupt is not None:
            deltas.append((corrupt[("mlp", layer)].to(y.device, y.dtype) - y)[None].detach())
    final = at(model, n_layers - 1, "resid_post")
    logits = model.nnsight.lm_head.output
    metric = metric_of(model, logits, terms)
    wrt = [t for triple in qkv for t in triple] + mlp_out + [final]
    grads = torch.autograd.grad(metric.sum(), wrt, allow_unused=True, retain_graph=True)
    found = []
    for layer in range(n_layers):
        for j, units in ((0, model.n_heads), (1, model.n_kv_heads), (2, model.n_kv_heads)):
            found.append(_per_unit_vjp(qkv[layer][j], inputs[layer], grads[3 * layer + j], units))
        g = grads[3 * n_layers + layer]
        found.append(_vjp(mlp_out[layer], mlp_in[layer], g)[None])
    g = grads[-1]
    found.append((torch.zeros_like(final) if g is None else g)[None].detach())
    out = {"metric": metric.detach(), "grads": torch.cat(found)}
    if deltas:
        out["deltas"] = torch.cat(deltas)
    return save(out)


def _vjp(output, wrt, grad):
    """``grad`` pulled back from ``output`` to ``wrt`` (zeros where nothing flows)."""
    if grad is None:
        return torch.zeros_like(wrt).detach()
    (found,) = torch.autograd.grad(output, wrt, grad_outputs=grad, retain_graph=True)
    return found.detach()


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


def metric_of(model, logits, terms):
    """The metric of every row from the logits (soft-capped as the forward returns them).

    ``terms`` is ``{"fn": metric_values, "keep": K, "terms": ...}`` (``fn`` is
    ``interventions.ops.metric_values``, passed in so that this module imports only torch),
    or ``{"fn": f, "rows": [pair indices]}`` for a user function
    ``f(logits [b, V] at the last position, rows) -> [b]``.
    """
    cap = model.logit_softcap
    if cap:
        logits = torch.tanh(logits / cap) * cap
    if "terms" not in terms:
        return terms["fn"](logits[:, -1].float(), terms["rows"])
    return terms["fn"](logits[:, -terms["keep"] :], terms["terms"])


def path_patched(model, geo, plan, terms):
    """The metric with a set of edges patched exactly: each receiver reads its own input.

    The batch is ``b`` texts followed by ``slots`` scratch rows per text (copies of it;
    as many as the plan's receivers use).
    At each layer a receiver of text ``a`` gets a scratch row whose residual is text
    ``a``'s plus the receiver's patched edges' ``corrupted - current`` sender outputs; the
    receiver's query, key or value (or MLP output) is then taken from that row, so only
    that receiver sees the change. The scratch rows are reset at every layer.

    Args:
        model: The model.
        geo: The layout (module docstring).
        plan: ``{"b": int, "slots": int, "corrupt": {...}, "mask": [R, S], "heads": {l: [R, H]},
            "first_head": {l: s}, "mlp": {l: s}, "at": {l: [(slot, kind, unit, r)]},
            "logits": r or -1}``: the patched edges as a 0/1 mask over the ``R`` receivers
            that have any and every sender; the layers whose heads send (with the sender
            index of their first head) and whose MLP sends (its sender index).
        terms: The metric's terms.

    Returns:
        ``{"metric": [b]}`` saved.
    """
    b, slots, corrupt = plan["b"], plan["slots"], plan["corrupt"]
    sent = joint = None
    for layer in range(model.n_layers):
        x = at(model, layer, "resid_pre")
        if sent is None:
            sent, joint = _sender_buffers(geo, plan, x[:b])
            sent[0] = corrupt["embed"].to(x.device, x.dtype) - x[:b]
        receivers = plan["at"].get(layer, [])
        rows = torch.arange(b, device=x.device) * slots + b
        filled = set()  # receivers sharing a row read equal copies: fill it once
        for slot, kind, _, r in receivers:
            if (kind != "mlp" or geo["mlp_reads"] == "resid_pre") and slot not in filled:
                x[rows + slot] = x[:b] + received(plan, sent, joint, r)
                filled.add(slot)
        attention = [entry for entry in receivers if entry[1] != "mlp"]
        if attention:
            _receive_attention(model, geo, layer, attention, rows, b)
        if layer in plan["heads"]:
            sets = plan["heads"][layer]
            if joint is None:  # each head's change alone: they add up
                first = plan["first_head"][layer]
                eye = torch.eye(model.n_heads)
                found = layer_head_deltas(model, geo, layer, b, corrupt[("z", layer)], eye)
                sent[first : first + model.n_heads] = found
            else:  # through the norm: the heads of each receiver's set together
                joint += layer_head_deltas(model, geo, layer, b, corrupt[("z", layer)], sets)
        mlp = [entry for entry in receivers if entry[1] == "mlp"]
        if mlp or layer in plan["mlp"]:
            entry = mlp[0] if mlp else None
            y = _receive_mlp(model, geo, layer, entry, rows, b, plan, sent, joint)
            if layer in plan["mlp"]:
                sent[plan["mlp"][layer]] = corrupt[("mlp", layer)].to(y.device, y.dtype) - y[:b]
    if plan["logits"] >= 0 and sent is not None:
        final = at(model, model.n_layers - 1, "resid_post")
        final[:b] = final[:b] + received(plan, sent, joint, plan["logits"])
    logits = model.nnsight.lm_head.output[:b]
    metric = metric_of(model, logits, terms)
    return save({"metric": metric.detach()})


def _sender_buffers(geo, plan, x):
    """Zeros for the senders' changes ``[S, b, s, d]``, and for the heads' changes.

    The second, ``[R, b, s, d]`` per receiver, only with a sandwich norm (else None).
    """
    mask = plan["mask"]
    sent = torch.zeros(mask.shape[1], *x.shape, dtype=x.dtype, device=x.device)
    joint = None
    if geo["post"]:
        joint = torch.zeros(mask.shape[0], *x.shape, dtype=x.dtype, device=x.device)
    return sent, joint


def received(plan, sent, joint, r):
    """``[b, s, d]``: the sum of receiver ``r``'s patched senders' changes."""
    weights = plan["mask"][r].to(sent.device, sent.dtype)  # [S]
    total = torch.einsum("s,sbtd->btd", weights, sent)
    return total if joint is None else total + joint[r]


def _receive_attention(model, geo, layer, entries, rows, b):
    """Each receiver's query, key or value of text ``a`` taken from its scratch row."""
    call, args, kwargs, first = attention_qkv(model, geo, layer)
    new = [t.clone() for t in args[first : first + 3]]
    for slot, kind, unit, _ in entries:
        t = new["qkv".index(kind)]
        t[:b, unit] = t[rows + slot, unit]
    call.inputs = ((*args[:first], *new, *args[first + 3 :]), kwargs)


def _receive_mlp(model, geo, layer, entry, rows, b, plan, sent, joint):
    """The MLP output of the texts, taken from the scratch row of ``entry`` if given."""
    if entry is not None and geo["mlp_reads"] == "resid_mid":
        xm = at(model, layer, "resid_mid")
        xm[rows + entry[0]] = xm[:b] + received(plan, sent, joint, entry[3])
    y = at(model, layer, "mlp_out")
    if entry is not None:
        y[:b] = y[rows + entry[0]]
    return y


def layer_head_deltas(model, geo, layer, b, z_cor, sets):
    """`head_deltas` of the first ``b`` rows of ``layer`` (``b`` None: every row)."""
    z = at(model, layer, "head_out")[:b]
    o = a = None
    if geo["post"]:
        o = at_module(model, layer, (geo["head_out"], "output", 0))[:b]
        a = at(model, layer, "attn_out")[:b]
    return head_deltas(model, geo, layer, z, z_cor, sets, o, a)


def corrupted_activations(model, geo):
    """The corrupted texts' sender outputs and metric inputs, detached.

    Returns:
        ``{"embed": [b, s, d], ("z", l): [b, s, H*hd], ("mlp", l): [b, s, d]}`` saved.
    """
    found: dict = {}  # a local annotation is never evaluated: nothing to import
    for layer in range(model.n_layers):
        if layer == 0:
            found["embed"] = at(model, 0, "resid_pre").detach().clone()
        found[("z", layer)] = at(model, layer, "head_out").detach().clone()
        found[("mlp", layer)] = at(model, layer, "mlp_out").detach().clone()
    return save(found)

"""Trace bodies of attribution patching: torch and math only, shipped by value to NDIF.

Like ``bindscope.interventions.ops`` this module is registered with ``nnsight.register``
(``bindscope.remote.shipping.SHIPPED_MODULES``), so the same bodies run locally and in
NDIF's sandbox. No ``from __future__`` import and no annotations, for the same reason.

The maths (Nanda 2023; Syed, Rager and Conmy 2023; Kramar et al. 2024, "AtP*"). For a
metric ``m`` and a head whose output ``z`` (the head's slice of the output projection's
input, ``[positions, head_dim]``) an intervention would set to ``z'``, the first-order
estimate of the metric's change is ``sum((z' - z) * dm/dz)`` over positions and the
head's width, from one clean forward pass and one backward pass for every head at once.

For an intervention on the attention pattern (``Knockout``, or a head attending as on a
source text), the head's output is ``z = A v`` with ``v`` its values, linear in the
probabilities ``A``, so ``sum((A' - A) * dm/dA)`` over (query, key) equals
``sum((z' - z) * dm/dz)``: the AtP* estimate computes ``A'`` exactly (the softmax is
recomputed, not linearised) and is first order only in what lies above the head. The
linearised estimate (plain AtP) instead takes the score change ``ds`` to first order
through the softmax, ``sum(ds * dm/ds)``, which misses a head whose softmax is
saturated (``dA/ds = A (1 - A)`` is near zero there).
"""

import torch

# A probability that underflows is read as this much when its log is needed (the
# linearised estimate's score change); log(1e-30) = -69, far past any saturation.
TINY = 1e-30


def save(value):
    """Mark a value to come back from the trace."""
    return value.save()


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
    for kind in ("logprob", "logit"):
        if kind not in terms:
            continue
        index, target, weight = terms[kind]
        picked = logits[rows, index.to(device)].float()  # [b, T, V]
        if kind == "logprob":
            picked = picked.log_softmax(-1)
        chosen = picked.gather(-1, target.to(device)[:, :, None]).squeeze(-1)  # [b, T]
        value = value + (chosen * weight.to(device)).sum(-1)
    return value


def head_outputs(model, layers, patterns):
    """Every listed layer's per-head outputs ``[b, W, H, hd]`` (and patterns), detached.

    The pass for the intervened values (a patch or resample donor). ``patterns`` lists the
    layers whose attention probabilities ``[b, H, W, W]`` are kept too (eager attention).
    """
    env = model.nnsight
    found = {}
    for layer in range(model.n_layers):
        if layer not in layers and layer not in patterns:
            continue
        attn = env.model.layers[layer].self_attn
        if layer in layers:
            x = attn.o_proj.input
            found[("z", layer)] = x.detach().view(*x.shape[:-1], model.n_heads, model.head_dim)
        if layer in patterns:
            found[("a", layer)] = attn.output[1].detach()
    return save(found)


def output_delta(z, layer, plan):
    """``z' - z`` per head ``[b, W, H, hd]`` for the head-output interventions of ``plan``."""
    delta = torch.zeros_like(z)
    device = z.device
    if layer in plan.get("zero", {}):
        chosen = plan["zero"][layer].to(device=device, dtype=z.dtype)  # [b, H]
        delta = delta - z * chosen[:, None, :, None]
    if layer in plan.get("mean", {}):
        chosen, means = plan["mean"][layer]  # [b, H], [H, hd]
        chosen = chosen.to(device=device, dtype=z.dtype)
        delta = delta + (means.to(device=device, dtype=z.dtype) - z) * chosen[:, None, :, None]
    if layer in plan.get("donor", {}):
        where, value = plan["donor"][layer]  # [b, W, H] bool, [b, W, H, hd]
        where = where.to(device)[..., None]
        delta = delta + torch.where(where, value.to(device=device, dtype=z.dtype) - z, 0.0)
    return delta


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


def _pattern_changes(layer, probs, plan):
    """``[(new probabilities, changed query rows [b, H, W])]`` of one layer's pattern plan."""
    changes = []
    if layer in plan.get("knockout", {}):
        removed = plan["knockout"][layer].to(probs.device)  # [b, H, W, W]
        changes.append((knockout_pattern(probs, removed), removed.any(-1)))
    if layer in plan.get("pattern", {}):
        rows, source = plan["pattern"][layer]  # [b, H, W] bool, [b, H, W, W]
        changes.append((source.to(device=probs.device, dtype=probs.dtype), rows))
    return changes


def zero_grad(grad):
    """A tensor hook that stops the gradient (GradDrop's dropped layer)."""
    return torch.zeros_like(grad)


def _estimates(model, zs, probs, grads, plan, b, device):
    """``[L, b, H]`` estimates from one set of gradients (``grads`` in ``wrt`` order)."""
    keys = [("z", k) for k in sorted(zs)] + [("a", k) for k in sorted(probs)]
    grad_of = dict(zip(keys, grads))
    estimate = torch.zeros(model.n_layers, b, model.n_heads, device=device)
    for layer in sorted(zs):
        g = grad_of[("z", layer)]
        if g is None:  # nothing above this layer reaches the metric
            continue
        z = zs[layer].detach()
        z = z.view(*z.shape[:-1], model.n_heads, model.head_dim)
        g = g.view(*g.shape[:-1], model.n_heads, model.head_dim)
        delta = output_delta(z, layer, plan)
        estimate[layer] += (delta.float() * g.float()).sum((1, 3))
    for layer in sorted(probs):
        p, g = probs[layer].detach(), grad_of[("a", layer)]
        if g is None:
            continue
        for new, rows in _pattern_changes(layer, p, plan):
            estimate[layer] += pattern_estimate(p, g, new, rows, plan["method"])
    return estimate


def attribution_pass(model, terms, plan):
    """One clean forward pass with gradients: the metric and every head's estimate.

    Reads each layer's head outputs (and, where the plan changes patterns, probabilities),
    the metric from the logits, and their gradients with ``torch.autograd.grad`` (no
    parameter gradient is accumulated). Only ``[L, b, H]`` estimates and ``[b]`` metric
    values come back: memory is the forward's own, O(b x W x d) per layer.

    Args:
        model: The model (a ``TraceModel`` when shipped).
        terms: The metric's terms (`metric_values`).
        plan: ``{"outputs": [layers], "patterns": [layers], "method": ..., "zero": ...}``
            (``bindscope.runners.attribution_patching`` builds it).

    Returns:
        ``{"metric": [b], "estimate": [L, b, H]}`` float32, saved; with
        ``plan["grad_drop"]`` also ``"grad_drop"`` ``[L, b, H]`` (GradDrop scores).
    """
    env = model.nnsight
    outputs, patterns = plan["outputs"], plan["patterns"]
    drop = plan.get("grad_drop", False)
    zs, probs, blocks = {}, {}, []
    stream = env.model.layers[0].input  # [b, W, d]
    if not stream.requires_grad:  # NDIF serves frozen weights: track gradients from here
        stream.requires_grad_(True)
    for layer in range(model.n_layers):
        if layer not in outputs and layer not in patterns and not drop:
            continue
        attn = env.model.layers[layer].self_attn
        if layer in outputs:  # the output projection runs before the module returns
            zs[layer] = attn.o_proj.input  # [b, W, H*hd]
        if layer in patterns:
            probs[layer] = attn.output[1]  # [b, H, W, W]
        if drop:  # what the layer adds to the residual stream: attention, then MLP
            blocks.append((attn.output[0], env.model.layers[layer].mlp.output))
    logits = env.lm_head.output
    cap = model.logit_softcap
    if cap:  # the forward's final soft-capping (Gemma 2), as ops.soft_capped
        logits = torch.tanh(logits / cap) * cap
    metric = metric_values(logits, terms)
    wrt = [zs[k] for k in sorted(zs)] + [probs[k] for k in sorted(probs)]
    total = metric.sum()
    grads = torch.autograd.grad(total, wrt, allow_unused=True, retain_graph=drop)
    b = metric.shape[0]
    estimate = _estimates(model, zs, probs, grads, plan, b, metric.device)
    found = {"metric": metric.detach(), "estimate": estimate.detach()}
    if drop:
        # GradDrop (Kramar et al. 2024): the estimate again with the gradient through one
        # layer's residual contributions stopped, for every layer; the mean |estimate| over
        # the L - 1 layers that leave a head's gradient (its own layer stops all of it)
        score = torch.zeros_like(estimate)
        for layer, (attention, mlp) in enumerate(blocks):
            hooks = [attention.register_hook(zero_grad), mlp.register_hook(zero_grad)]
            last = layer == len(blocks) - 1
            dropped = torch.autograd.grad(total, wrt, allow_unused=True, retain_graph=not last)
            for hook in hooks:
                hook.remove()
            score += _estimates(model, zs, probs, dropped, plan, b, metric.device).abs()
        found["grad_drop"] = (score / max(model.n_layers - 1, 1)).detach()
    return save(found)

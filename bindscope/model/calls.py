"""The traced forward passes behind ``Model``'s high-level calls, bound as its methods."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from bindscope.batch import (
    DEFAULT_BATCH_SIZE,
    Batch,
    absolute_positions,
    check_texts,
    read_positions,
    token_ids,
    widened,
)
from bindscope.errors import InterventionError, true_or_false
from bindscope.families import FINAL_SITES, HEAD_SITES, site_names
from bindscope.interventions import ops, run_layers
from bindscope.interventions.plan import PlannedBatch, attention_call, plan_batches
from bindscope.interventions.resolve import HeadList, Intervention, PerRow, resolve_rows
from bindscope.metrics.binding import bsi_from_probs
from bindscope.metrics.patching import token_loss
from bindscope.nnsight_private import underlying_module
from bindscope.prompts.spans import locate
from bindscope.protocols import LanguageModel


def trace_batch(
    model: LanguageModel, planned: PlannedBatch, body: Callable[[Any], Any], **options: Any
):
    """Run ``body(donors)`` (returning its result saved) on a planned batch, donors first."""
    # plain dicts of tensors only in the body: it ships by value when remote
    env, plan, path = model.nnsight, planned.plan, planned.plan.path
    inputs, donor_inputs = planned.batch.inputs, planned.donors
    plan.patterns_run = bool(plan.pattern_batch)  # applied below, in an invoke of their own
    if donor_inputs is None and path is None:
        with env.trace(**inputs, **options, **model.trace_options) as tracer:
            found = body(None)
            tracer.stop()
        return on_cpu(found)
    donors: dict = {}  # filled by the first invoke, read by the second
    with env.trace(**options, **model.trace_options) as tracer:
        if donor_inputs is not None:
            with tracer.invoke(**donor_inputs):  # a pattern patch reads no donor site
                keys = [key for key in plan.donor_keys if key[0] != "pattern"]
                ops.site_outputs(model, keys, donors, plan.knockout_site)
        if path is not None:
            with tracer.invoke():  # every row, before the texts': their captures see it
                ops.path_patch(model, path)
        with tracer.invoke(**inputs):
            found = body(donors)  # no early stop: the other invokes may read later layers
        if path is not None and path.slots:
            with tracer.invoke(**path.scratch_inputs):  # a path patch's scratch rows
                pass
        if plan.knockout_batch:
            with tracer.invoke():  # the whole batch, donor rows first
                ops.knock_out_batch(model, plan.knockout_batch, plan.knockout_site)
        if plan.pattern_batch:
            with tracer.invoke():  # the whole batch: donor rows' patterns at the same call
                ops.patch_patterns_batch(model, plan)
    return on_cpu(found)


def on_cpu(found: Any) -> Any:
    """Saved values (a tensor, or dicts, lists and tuples of them) moved to the CPU."""
    if isinstance(found, torch.Tensor):
        return found.cpu()
    if isinstance(found, dict):
        return {key: on_cpu(value) for key, value in found.items()}
    if isinstance(found, (list, tuple)):
        return type(found)(on_cpu(value) for value in found)
    return found


@torch.no_grad()
def attention_probs(
    model: LanguageModel,
    texts: Sequence[str],
    *,
    layers: Iterable[int] | None = None,
    intervene: Intervention = None,
    per_row: PerRow = None,
    ablate: HeadList | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> list[torch.Tensor]:
    """Post-softmax attention per text: ``[n_layers_selected, H, n, n]``, layers ascending."""
    wanted = model.check_layers(layers)
    texts = check_texts(texts)
    rows = resolve_rows(model, texts, intervene=intervene, per_row=per_row, ablate=ablate)
    got = _captured(model, texts, rows, ["pattern"], wanted, batch_size, widened)
    return [torch.stack([each["pattern"][layer] for layer in wanted]) for each in got]


def _check_recompute(model: LanguageModel, plan: ops.TracePlan) -> None:
    if (plan.knockout_batch or plan.pattern_batch) and model.capture_mode == "recompute":
        raise InterventionError(
            f"{model.name}: capturing probabilities by recomputation sees the mask before "
            "a pattern Patch, or a Knockout that shares its batch with a Patch; run them "
            "in separate calls"
        )


def bsi(
    model: LanguageModel,
    texts: Sequence[str],
    term: str,
    *,
    intervene: Intervention = None,
    per_row: PerRow = None,
    ablate: HeadList | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> list[torch.Tensor]:
    """BSI ``[L, H]`` of ``term`` (found by `bindscope.prompts.locate`) in each text."""
    texts = check_texts(texts)
    spans = [locate(model, t, term, prompt_id=f"#{i}") for i, t in enumerate(texts)]
    probs = attention_probs(
        model, texts, intervene=intervene, per_row=per_row, ablate=ablate, batch_size=batch_size
    )
    return [bsi_from_probs(p, span.indices) for p, span in zip(probs, spans)]


@torch.no_grad()
def logits(
    model: LanguageModel,
    texts: Sequence[str],
    *,
    intervene: Intervention = None,
    per_row: PerRow = None,
    ablate: HeadList | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> list[torch.Tensor]:
    """Next-token logits ``[n, vocab]`` per text, padding removed."""
    texts = check_texts(texts)
    rows = resolve_rows(model, texts, intervene=intervene, per_row=per_row, ablate=ablate)
    out: list[torch.Tensor | None] = [None] * len(texts)
    for planned in plan_batches(model, texts, rows, batch_size=batch_size):
        batch = planned.batch

        def body(donors: dict | None, plan: ops.TracePlan = planned.plan):
            if plan:
                run_layers(model, plan=plan, donors=donors)
            logits = ops.final_logits(model).save()  # [b, n, V]
            return logits

        found = trace_batch(model, planned, body)
        for row, index in enumerate(batch.indices):
            out[index] = widened(found[row, batch.pad(row) :])
    return out  # type: ignore[return-value]


def loss(
    model: LanguageModel,
    texts: Sequence[str],
    *,
    per_token: bool = False,
    intervene: Intervention = None,
    per_row: PerRow = None,
    ablate: HeadList | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> list[torch.Tensor]:
    """Each text's mean next-token cross-entropy (``per_token``: ``[n - 1]`` per token)."""
    true_or_false(per_token, "per_token")
    texts = check_texts(texts)
    found = logits(
        model, texts, intervene=intervene, per_row=per_row, ablate=ablate, batch_size=batch_size
    )
    ids = [token_ids(model, t) for t in texts]
    losses = [token_loss(row, text_ids) for row, text_ids in zip(found, ids)]
    return losses if per_token else [row.mean() for row in losses]


@torch.no_grad()
def capture(
    model: LanguageModel,
    texts: Sequence[str],
    sites: str | Sequence[str],
    layers: Iterable[int] | None = None,
    *,
    intervene: Intervention = None,
    per_row: PerRow = None,
    ablate: HeadList | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> list[dict[str, dict[int, torch.Tensor]]]:
    """Activations ``got[i][site][layer]`` at ``sites`` (or ``"all"``), float32, unpadded.

    The README's "Sites" gives each site's shape.
    """
    wanted = model.check_layers(layers)
    names = _check_capture_sites(model, sites)
    texts = check_texts(texts)
    rows = resolve_rows(model, texts, intervene=intervene, per_row=per_row, ablate=ablate)
    got = _captured(model, texts, rows, names, wanted, batch_size, torch.Tensor.float)
    return [{name: each[name] for name in names} for each in got]  # in execution order


def _captured(
    model: LanguageModel,
    texts: list,
    rows: list,
    names: list[str],
    wanted: list[int],
    batch_size: int,
    cast: Callable[[torch.Tensor], torch.Tensor],
) -> list[dict[str, dict[int, torch.Tensor]]]:
    out: list[dict[str, dict[int, torch.Tensor]]] = [{} for _ in texts]
    probs = "pattern" in names
    others = {n: wanted for n in names if n not in ("pattern", *FINAL_SITES)}
    norm = _final_norm_form(model) if "ln_final_scale" in names else None
    # (site, layer, key of the body's result) of every tensor a text gets
    keys: list[tuple[str, int, Any]] = [("pattern", layer, layer) for layer in wanted if probs]
    keys += [(name, layer, (name, layer)) for layer in wanted for name in others]
    if norm is not None:  # keyed by the last layer, whose output the norm reads
        keys.append(("ln_final_scale", model.n_layers - 1, "ln_final_scale"))
    with model.eager() if probs else contextlib.nullcontext():
        call = _call_sites(model, others)
        for planned in plan_batches(model, texts, rows, batch_size=batch_size):
            batch = planned.batch
            if probs:
                _check_recompute(model, planned.plan)
            planned.plan.knockout_site = planned.plan.knockout_site or call
            body = _capture_body(model, planned.plan, wanted if probs else [], others, norm)
            found = trace_batch(model, planned, body)
            for row, index in enumerate(batch.indices):
                out[index] = _unpadded(found, row, batch.pad(row), keys, cast)
    return out


def _capture_body(
    model: LanguageModel,
    plan: ops.TracePlan,
    probs: list[int],
    others: dict[str, list[int]],
    norm: tuple[bool, float] | None,
) -> Callable[[dict | None], Any]:
    final_norm = model.family_row.final_norm  # a shipped body's model has no family row

    def body(donors: dict | None):
        found = run_layers(model, capture=probs, sites=others, plan=plan, donors=donors)
        if norm is not None:
            x = getattr(model.nnsight.model, final_norm).input
            found["ln_final_scale"] = ops.save(ops.norm_scale(x, *norm))
        return found

    return body


def _call_sites(model: LanguageModel, names: Iterable[str]) -> tuple[str, int] | None:
    at_call = [name for name in names if model.sites[name][1] == "call"]
    if "scores" in at_call and None in model.attention_scaling:
        raise InterventionError(
            f"{model.name} ({model.family}): the attention modules carry no `scaling`, so "
            "the scores cannot be computed as the model computes them; capture q and k"
        )
    return attention_call(model, at_call)


def _final_norm_form(model: LanguageModel) -> tuple[bool, float]:
    norm = underlying_module(getattr(model.nnsight.model, model.family_row.final_norm))
    eps = model.family_row.final_norm_eps
    for name in ("variance_epsilon", "eps"):
        eps = getattr(norm, name, None) if eps is None else eps
    if not isinstance(eps, float):
        raise InterventionError(
            f"{model.name} ({model.family}): the final norm {type(norm).__name__} carries no "
            "epsilon (variance_epsilon or eps), so ln_final_scale cannot be computed; give "
            "the family row final_norm_eps=..."
        )
    return "LayerNorm" in type(norm).__name__, eps


def _unpadded(
    found: dict,
    row: int,
    pad: int,
    keys: list[tuple[str, int, Any]],
    cast: Callable[[torch.Tensor], torch.Tensor],
) -> dict[str, dict[int, torch.Tensor]]:
    got: dict[str, dict[int, torch.Tensor]] = {}
    for name, layer, key in keys:
        got.setdefault(name, {})[layer] = cast(_cut(name, found[key][row], pad)).contiguous()
    return got


def _cut(name: str, value: torch.Tensor, pad: int) -> torch.Tensor:
    if name in ("pattern", "scores"):  # [H, q, k]
        return value[:, pad:, pad:]
    if name == "mlp_post":
        return value[pad:, ..., 0]  # [n, d_mlp]
    if name in (*HEAD_SITES, "ln_final_scale"):
        return value[pad:]  # [n, U, k] or [n]
    return value[pad:, 0]  # [n, d_model]


def _check_capture_sites(model: LanguageModel, sites: str | Sequence[str]) -> list[str]:
    every = [*model.sites, *FINAL_SITES]
    names = every if isinstance(sites, str) and sites == "all" else site_names(sites, model.name)
    if not names:
        raise InterventionError(f"{model.name}: sites=[] captures nothing; name some sites")
    for name in names:
        if name not in every:
            raise InterventionError(
                f"{model.name} ({model.family}): no site {name!r}; its sites are "
                f"{', '.join(every)} (or sites='all')"
            )
    return sorted(set(names), key=every.index)


@torch.no_grad()
def logit_lens(
    model: LanguageModel,
    texts: Sequence[str],
    layers: Iterable[int] | None = None,
    *,
    positions: int | Sequence[int] | None = -1,
    intervene: Intervention = None,
    per_row: PerRow = None,
    ablate: HeadList | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> list[torch.Tensor]:
    """``[layers, positions, vocab]`` per text: ``resid_post`` unembedded (``None``: all)."""
    wanted = model.check_layers(layers)
    chosen = read_positions(positions)
    texts, picked = _check_lens(model, texts, chosen)
    rows = resolve_rows(model, texts, intervene=intervene, per_row=per_row, ablate=ablate)
    norm = underlying_module(getattr(model.nnsight.model, model.family_row.final_norm))
    head = underlying_module(model.nnsight.lm_head)
    out: list[torch.Tensor | None] = [None] * len(texts)
    for planned in plan_batches(model, texts, rows, batch_size=batch_size):
        batch = planned.batch
        index_rows, columns = _columns(batch, picked)

        def body(
            donors: dict | None,
            plan: ops.TracePlan = planned.plan,
            index_rows: torch.Tensor = index_rows,
            columns: torch.Tensor = columns,
        ):
            found = ops.resid_post_at(model, wanted, index_rows, columns, plan, donors)
            return found

        found = trace_batch(model, planned, body)
        for row, index in enumerate(batch.indices):
            resid = torch.stack([found[layer][row] for layer in wanted])  # [L, P, d]
            if chosen is None:
                resid = resid[:, batch.pad(row) :]
            logits = head(norm(resid.to(model.dtype)))
            out[index] = ops.soft_capped(logits, model.logit_softcap).float()
    return out  # type: ignore[return-value]


def _check_lens(
    model: LanguageModel, texts: Sequence[str], chosen: tuple[int, ...] | None
) -> tuple[list, list[list[int]] | None]:
    if model.dtype is not None and next(model.hf.parameters()).device.type == "meta":
        raise InterventionError(
            f"{model.name}: logit_lens applies the final norm and unembedding here, but this "
            "model's weights stay on the server (meta device); capture resid_post with "
            "model.capture(texts, sites=['resid_post']) and unembed with local weights"
        )
    texts = check_texts(texts)
    if chosen is None:
        return texts, None
    lengths = [len(token_ids(model, t)) for t in texts]
    return texts, [  # every text's positions, before any trace
        absolute_positions(chosen, n, model_name=model.name, text=f"text #{i}")
        for i, n in enumerate(lengths)
    ]


def _columns(batch: Batch, picked: list[list[int]] | None) -> tuple[torch.Tensor, torch.Tensor]:
    width = batch.input_ids.shape[1]
    if picked is None:
        columns = torch.arange(width).expand(len(batch.indices), width)
    else:
        shifted = [[batch.pad(r) + p for p in picked[i]] for r, i in enumerate(batch.indices)]
        columns = torch.tensor(shifted)
    rows = torch.arange(columns.shape[0])[:, None].expand_as(columns)
    return rows, columns

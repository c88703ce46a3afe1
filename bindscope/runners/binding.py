"""The binding runner: BSI, EB and EB* of every prompt of a set, in batched forward passes."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from tqdm.auto import tqdm

from bindscope.errors import InputError, PromptTooLongError, SpanNotFoundError
from bindscope.interventions import ops, run_layers
from bindscope.interventions.plan import PlannedBatch, plan_batches
from bindscope.interventions.resolve import HeadList, Intervention, resolve_rows
from bindscope.metrics.binding import BindingResult, pair_index, span_pairs, summarize
from bindscope.prompts.context import length_problem
from bindscope.prompts.prompt_sets import PromptRecord
from bindscope.prompts.spans import Span, locate
from bindscope.protocols import LanguageModel

#: The ``skipped`` reason of a span that starts on the attention sink (position 0, no BOS).
SINK_SKIP = "at_position_0"
#: The flag of a prompt whose span lies past the model's context window (as ``audit``'s).
TOO_LONG = "too_long"


def _result(
    record: PromptRecord,
    bsi: torch.Tensor,
    span: Span | None,
    *,
    skipped: str | None = None,
    flags: Sequence[str] = (),
):
    flags = (*(span.flags if span else ("not_found",)), *flags)
    about = (record.key, record.prompt_id, record.term, record.task, record.control_group)
    indices, tokens = (span.indices, span.tokens) if span else ((), ())
    numbers = vars(summarize(bsi))  # eb, eb_star, eb_star_norm, best_layer, entropy
    return BindingResult(
        *about, **numbers, bsi=bsi, span=indices, span_tokens=tokens, flags=flags, skipped=skipped
    )


def binding(
    model: LanguageModel,
    records: Iterable[PromptRecord],
    *,
    batch_size: int = 32,
    ablate: HeadList | None = None,
    intervene: Intervention = None,
    on_missing: str = "error",
    on_sink: str = "skip",
    progress: bool = False,
) -> list[BindingResult]:
    """BSI/EB/EB* of every record, one result each (``on_missing``, ``on_sink``: docs/internals.md).

    Positions of the specs count tokens of the prompt cut after the term's span.
    """
    if on_missing not in ("error", "skip"):
        raise ValueError("on_missing must be 'error' or 'skip'")
    if on_sink not in ("skip", "keep"):
        raise InputError(f"on_sink={on_sink!r}: pass 'skip' (default) or 'keep'")
    records = list(records)
    spec = (model.check_heads(ablate), intervene)
    nan = torch.full((model.n_layers, model.n_heads), float("nan"))
    results: list[BindingResult | None] = [None] * len(records)
    prefixes = _group_by_prefix(model, records, results, nan, on_missing, on_sink)
    unique, spans = list(prefixes), [found[0][1] for found in prefixes.values()]
    bsi_by_prefix = _batched_bsi(model, [u[0] for u in unique], spans, batch_size, spec, progress)
    for computation, bsi in zip(unique, bsi_by_prefix):
        for i, span in prefixes[computation]:
            results[i] = _result(records[i], bsi, span)
    return results  # type: ignore[return-value]


#: One computation: the tokens up to the span's end, and the span; the records that share it.
_Prefixes = dict[tuple[tuple[int, ...], tuple[int, ...]], list[tuple[int, Span]]]


def _group_by_prefix(
    model: LanguageModel,
    records: list[PromptRecord],
    results: list[BindingResult | None],
    nan: torch.Tensor,
    on_missing: str,
    on_sink: str,
) -> _Prefixes:
    # a nested term is another span, so another BSI; unmeasured records get results here
    prefixes: _Prefixes = {}
    for i, record in enumerate(records):
        span = _span_to_measure(model, record, nan, on_missing=on_missing, on_sink=on_sink)
        if isinstance(span, BindingResult):
            results[i] = span
            continue
        ids = tuple(model.tokenize(record.template)[: span.indices[-1] + 1])
        prefixes.setdefault((ids, tuple(span.indices)), []).append((i, span))
    return prefixes


def _span_to_measure(
    model: LanguageModel, record: PromptRecord, nan: torch.Tensor, *, on_missing: str, on_sink: str
) -> Span | BindingResult:
    try:
        span = locate(model, record.template, record.term, prompt_id=record.key)
    except SpanNotFoundError as exc:
        if on_missing == "error":
            raise
        return _result(record, nan, None, skipped=str(exc))
    too_long = length_problem(model, record, n_tokens=span.n_tokens)
    if too_long:  # the term is there: the context window is the reason
        if on_missing == "error":
            raise PromptTooLongError(too_long)
        return _result(record, nan, span, skipped=too_long, flags=(TOO_LONG,))
    if len(span.indices) < 2:
        return _result(record, nan, span)
    if on_sink == "skip" and "at_position_0" in span.flags:
        return _result(record, nan, span, skipped=SINK_SKIP)
    return span


def _batched_bsi(
    model: LanguageModel,
    prefixes: Sequence[Sequence[int]],
    spans: Sequence[Span],
    batch_size: int,
    spec: Any,
    progress: bool,
) -> list[torch.Tensor]:
    if not prefixes:  # every record skipped (e.g. all on the sink): nothing to run
        return []
    out: list[torch.Tensor | None] = [None] * len(prefixes)
    texts = [list(p) for p in prefixes]
    ablate, intervene = spec
    rows = resolve_rows(model, texts, ablate=ablate, intervene=intervene)
    with model.eager(), torch.no_grad():
        # planned under eager(): a Knockout's site is the call eager attention makes (GPT-2's
        # reorder_and_upcast_attn runs its own method there, not sdpa's attention_interface)
        planned = list(plan_batches(model, texts, rows, batch_size=batch_size))
        for item in tqdm(planned, desc="binding", unit="batch", disable=not progress):
            batch = item.batch
            query, key, weight = pair_index(
                [
                    span_pairs([batch.pad(r) + i for i in spans[index].indices])
                    for r, index in enumerate(batch.indices)
                ]
            )

            def reduce(
                probs: torch.Tensor,
                query: torch.Tensor = query,
                key: torch.Tensor = key,
                weight: torch.Tensor = weight,
            ):
                return ops.span_pair_bsi(probs, query, key, weight)

            stacked = layer_reductions(model, item, reduce)  # [b, L, H]
            for r, index in enumerate(batch.indices):
                out[index] = stacked[r].float().clone()
    return out  # type: ignore[return-value]


def layer_reductions(
    model: LanguageModel, item: PlannedBatch, reduce: Callable[[torch.Tensor], torch.Tensor]
) -> torch.Tensor:
    """``[b, L, ...]``: ``reduce`` of each layer's attention probabilities, in one trace."""

    def body(donors: Any, reduce: Callable[[torch.Tensor], Any] = reduce, plan: Any = item.plan):
        # bound to a name: a remote run returns only saved values the body binds
        found = run_layers(
            model, capture=range(model.n_layers), reduce=reduce, plan=plan, donors=donors
        )
        return found

    found = model.trace_batch(item, body)
    return torch.stack([found[layer] for layer in range(model.n_layers)], 1)

"""BSI, EB and EB*: how strongly heads bind a term's tokens to each other.

* BSI(l, h): mean attention from each later span token to each earlier span token.
* EB(l) = max_h BSI - mean_h BSI; EB* = max_l EB, best layer = first arg-max.
* Entropy (nats) of the normalised BSI at the best layer.
* ``eb_star_norm = EB* / (1 - 1/H)``: EB's ceiling depends on the head count.

BSI is reduced inside the trace from the span rows only, so a prompt costs O(L x H) to
keep, and one forward pass serves a whole batch. BSI depends only on tokens up to the
span's end, so each prompt is cut there and identical prefixes run once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch

from bindscope.errors import PromptTooLongError, SpanNotFoundError
from bindscope.interventions import ops, run_layers
from bindscope.interventions.plan import plan_batches
from bindscope.interventions.specs import resolve_rows
from bindscope.prompts.context import length_problem
from bindscope.prompts.records import PromptRecord
from bindscope.prompts.spans import Span, locate


def span_pairs(span: Sequence[int]) -> list[tuple[int, int]]:
    """All (later, earlier) index pairs inside a span."""
    return [(span[i], span[j]) for i in range(len(span)) for j in range(i)]


def span_pair_index(
    spans: Sequence[Sequence[int]],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The within-span pairs of several rows as padded tensors for ``ops.span_pair_bsi``.

    Args:
        spans: One span (token positions in the padded batch) per row.

    Returns:
        ``query_index``, ``key_index`` ``[b, P]`` long and ``pair_weight`` ``[b, P]``
        (1/|pairs| for real pairs, 0 for padding), P the most pairs of any row.
    """
    pairs = [span_pairs(span) for span in spans]
    width = max(len(p) for p in pairs)
    query = torch.zeros(len(pairs), width, dtype=torch.long)
    key = torch.zeros(len(pairs), width, dtype=torch.long)
    weight = torch.zeros(len(pairs), width)
    for r, row in enumerate(pairs):
        for c, (a, b) in enumerate(row):
            query[r, c], key[r, c], weight[r, c] = a, b, 1.0 / len(row)
    return query, key, weight


def bsi_from_probs(probs: torch.Tensor, span: Sequence[int]) -> torch.Tensor:
    """BSI ``[L, H]`` from full probabilities ``[L, H, n, n]`` (NaN for spans < 2 tokens)."""
    pairs = span_pairs(span)
    if not pairs:
        return torch.full(probs.shape[:2], float("nan"))
    q = torch.tensor([a for a, _ in pairs])
    k = torch.tensor([b for _, b in pairs])
    return probs[:, :, q, k].float().mean(-1)


@dataclass(frozen=True)
class LayerSummary:
    """EB per layer and the summaries derived from it."""

    eb: torch.Tensor  # [L]
    eb_star: float
    eb_star_norm: float
    best_layer: int
    entropy: float


def summarize(bsi: torch.Tensor) -> LayerSummary:
    """EB, EB*, normalised EB*, best layer and entropy from BSI ``[L, H]``."""
    n_heads = bsi.shape[1]
    if torch.isnan(bsi).any():
        nan = float("nan")
        return LayerSummary(torch.full(bsi.shape[:1], nan), nan, nan, -1, nan)
    eb = bsi.max(1).values - bsi.mean(1)  # [L]
    best = int(torch.argmax(eb))  # first arg-max
    eb_star = float(eb[best])
    q = bsi[best].clamp(min=1e-10)
    p = q / q.sum()
    entropy = float(-(p * p.log()).sum())
    return LayerSummary(eb, eb_star, eb_star / (1 - 1 / n_heads), best, entropy)


@dataclass(frozen=True)
class BindingResult:
    """EB* and its parts for one prompt record.

    ``skipped`` holds the reason when the record could not be measured (then the numbers
    are NaN); ``flags`` holds audit flags such as ``single_token`` (BSI undefined: NaN,
    never 0) and ``at_position_0`` (the term starts on the attention sink).
    """

    key: str
    prompt_id: str
    term: str
    task: str
    control_group: str | None
    eb_star: float
    eb_star_norm: float
    best_layer: int
    eb: torch.Tensor
    bsi: torch.Tensor
    entropy: float
    span: tuple[int, ...]
    span_tokens: tuple[str, ...]
    flags: tuple[str, ...] = ()
    skipped: str | None = None
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def n_span(self) -> int:
        return len(self.span)

    def to_dict(self) -> dict:
        """JSON-ready dict (NaN becomes null)."""

        def num(x):
            return None if x is None or (isinstance(x, float) and math.isnan(x)) else x

        return {
            "key": self.key,
            "prompt_id": self.prompt_id,
            "term": self.term,
            "task": self.task,
            "control_group": self.control_group,
            "eb_star": num(self.eb_star),
            "eb_star_norm": num(self.eb_star_norm),
            "best_layer": self.best_layer,
            "entropy": num(self.entropy),
            "n_span": self.n_span,
            "span": list(self.span),
            "span_tokens": list(self.span_tokens),
            "flags": list(self.flags),
            "skipped": self.skipped,
            "eb": [num(float(x)) for x in self.eb],
            "bsi": [[num(float(x)) for x in row] for row in self.bsi],
        }


def _result(record: PromptRecord, bsi: torch.Tensor, span: Span | None, *, skipped=None):
    s = summarize(bsi)
    flags = span.flags if span else ("not_found",)
    return BindingResult(
        record.key,
        record.prompt_id,
        record.term,
        record.task,
        record.control_group,
        s.eb_star,
        s.eb_star_norm,
        s.best_layer,
        s.eb,
        bsi,
        s.entropy,
        span.indices if span else (),
        span.tokens if span else (),
        flags,
        skipped,
    )


def binding(
    model,
    records: Iterable[PromptRecord],
    *,
    batch_size: int = 32,
    ablate=None,
    intervene=None,
    on_missing: str = "error",
    progress: bool = False,
) -> list[BindingResult]:
    """Measure BSI/EB/EB* for every record in batched forward passes.

    Args:
        model: A ``bindscope.Model``.
        records: Prompt records (``bindscope.prompts.load(...)``).
        batch_size: Prompts per forward pass.
        ablate: ``(layer, head)`` pairs zero-ablated while measuring.
        intervene: Spec(s) applied to every record while measuring (``Zero``, ``Mean``,
            ``Knockout``, ``Resample``; positions count tokens of the prompt cut after
            the term's span, since BSI never looks further).
        on_missing: ``error`` raises ``SpanNotFoundError`` (or ``PromptTooLongError`` for a
            prompt longer than the context window); ``skip`` returns a result with
            ``skipped`` set to the reason and NaN numbers.
        progress: Show a progress bar.

    Returns:
        One result per record, in input order.
    """
    if on_missing not in ("error", "skip"):
        raise ValueError("on_missing must be 'error' or 'skip'")
    records = list(records)
    spec = (model.check_heads(ablate), intervene)
    nan = torch.full((model.n_layers, model.n_heads), float("nan"))
    results: list[BindingResult | None] = [None] * len(records)
    # Prompts that share the tokens up to the span's end AND the span itself are one
    # computation (causal attention ignores what follows); a nested term in the same prefix
    # ("screen reader" in "test a screen reader") is another span, so another BSI.
    prefixes: dict[tuple[tuple[int, ...], tuple[int, ...]], list[tuple[int, Span]]] = {}
    for i, record in enumerate(records):
        try:
            span = locate(model, record.template, record.term, prompt_id=record.key)
            too_long = length_problem(model, record, n_tokens=span.n_tokens)
            if too_long:
                raise PromptTooLongError(too_long)
        except (SpanNotFoundError, PromptTooLongError) as exc:
            if on_missing == "error":
                raise
            results[i] = _result(record, nan, None, skipped=str(exc))
            continue
        if len(span.indices) < 2:
            results[i] = _result(record, nan, span)
            continue
        ids = tuple(model.tokenize(record.template)[: span.indices[-1] + 1])
        prefixes.setdefault((ids, tuple(span.indices)), []).append((i, span))
    unique = list(prefixes)
    bsi_by_prefix = _batched_bsi(
        model,
        [u[0] for u in unique],
        [prefixes[u][0][1] for u in unique],
        batch_size,
        spec,
        progress,
    )
    for computation, bsi in zip(unique, bsi_by_prefix):
        for i, span in prefixes[computation]:
            results[i] = _result(records[i], bsi, span)
    return results  # type: ignore[return-value]


def _batched_bsi(model, prefixes, spans, batch_size, spec, progress) -> list[torch.Tensor]:
    from tqdm.auto import tqdm

    out: list[torch.Tensor | None] = [None] * len(prefixes)
    texts = [list(p) for p in prefixes]
    ablate, intervene = spec
    rows = resolve_rows(model, texts, ablate=ablate, intervene=intervene) if texts else []
    planned = list(plan_batches(model, texts, rows, batch_size=batch_size))
    with model.eager(), torch.no_grad():
        for item in tqdm(planned, desc="binding", unit="batch", disable=not progress):
            batch = item.batch
            query, key, weight = span_pair_index(
                [
                    [batch.pad(r) + i for i in spans[index].indices]
                    for r, index in enumerate(batch.indices)
                ]
            )

            def reduce(probs, query=query, key=key, weight=weight):
                return ops.span_pair_bsi(probs, query, key, weight)

            def body(donors, reduce=reduce, plan=item.plan):
                # bound to a name: a remote run returns only saved values the body binds
                found = run_layers(
                    model, capture=range(model.n_layers), reduce=reduce, plan=plan, donors=donors
                )
                return found

            found = model._trace_batch(item, body)
            stacked = torch.stack([found[layer] for layer in range(model.n_layers)], 1)  # [b, L, H]
            for r, index in enumerate(batch.indices):
                out[index] = stacked[r].float().clone()
    return out  # type: ignore[return-value]

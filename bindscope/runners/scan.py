"""Score sequences under many single-head (or single-layer) ablations in few forward passes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from bindscope.batch import Batch
from bindscope.errors import InputError
from bindscope.interventions import Mean, SiteMeans, Zero, ops
from bindscope.interventions.dictionary import Features
from bindscope.interventions.head_checks import Head
from bindscope.interventions.ops import by_layer
from bindscope.interventions.plan import Planner, plan_batch
from bindscope.interventions.resolve import resolve_rows
from bindscope.protocols import LanguageModel
from bindscope.runners.attribution_metrics import TargetLogprob, logit_terms

__all__ = ["ScoredSequence", "condition_scores"]

STRATEGIES = ("residual", "naive")
Condition = tuple[Head, ...] | Features


@dataclass(frozen=True)
class ScoredSequence:
    """Token ids (BOS included) whose last ``n_target`` tokens are scored (mean log-prob)."""

    ids: tuple[int, ...]
    n_target: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "ids", tuple(int(i) for i in self.ids))
        if not 0 < self.n_target < len(self.ids):
            raise InputError(
                f"a scored sequence of {len(self.ids)} tokens cannot have {self.n_target} "
                "target tokens: the target needs at least one token and a prompt before it"
            )


def _condition_plan(
    model: LanguageModel, scan: _Scan, rows: list[int], batch: Batch, valid: torch.Tensor | None
) -> ops.TracePlan:
    # a resample (valid [rows, W]: where a row has a donor position) copies precomputed,
    # end-aligned donor outputs as donor edits, so no donor rows run in the pass
    conditions, means = scan.conditions, scan.table
    if valid is None:
        per_row = [
            Zero(conditions[c]) if means is None else Mean(conditions[c], means) for c in rows
        ]
        ids = [batch.input_ids[r, batch.pad(r) :].tolist() for r in range(len(rows))]
        return plan_batch(model, batch, resolve_rows(model, ids, per_row=per_row)).plan
    planner = Planner(model, len(rows), batch.input_ids.shape[1], {})
    index = torch.arange(len(rows))
    for r, c in enumerate(rows):
        columns = valid[r].nonzero().flatten().tolist()
        heads_of = conditions[c]
        assert not isinstance(heads_of, Features)  # refused with donors (_checked)
        for layer, heads in by_layer(heads_of).items():
            edit = planner.edit(
                "head_out",
                layer,
                lambda where, layer=layer: ops.DonorEdit(where, ("head_out", layer), index),
                every_position=False,
                same=lambda e: isinstance(e, ops.DonorEdit),
            )
            planner.mark(edit, r, columns, heads)
    return planner.plan(None)


def _alignment(
    model: LanguageModel,
    rows: Sequence[ScoredSequence],
    donors: Sequence[ScoredSequence] | None,
    width: int,
) -> tuple[tuple | None, torch.Tensor | None]:
    # (the donors' inputs, the final positions each row takes from its donor, width), and
    # valid [b, W]
    if donors is None:
        return None, None
    keep = [min(len(row.ids), len(donor.ids)) for row, donor in zip(rows, donors)]
    valid = torch.zeros(len(rows), width, dtype=torch.bool)
    for r, k in enumerate(keep):
        valid[r, width - k :] = True
    return (model.encode([list(d.ids) for d in donors]).inputs, keep, width), valid


@dataclass(frozen=True)
class _Pass:
    pairs: list[tuple[int, int]]
    rows: torch.Tensor
    inputs: dict
    targets: tuple
    plan: ops.TracePlan
    start: int


def _passes(
    model: LanguageModel, scan: _Scan, batch: Batch, targets: tuple, valid: torch.Tensor | None
) -> Iterator[_Pass]:
    b = batch.input_ids.shape[0]
    size = b if scan.strategy == "naive" else scan.rows_per_pass  # naive: a condition a pass
    for start, members in sorted(scan.by_start.items()):
        pairs = [(c, r) for c in members for r in range(b)]
        for lo in range(0, len(pairs), size):
            chunk = pairs[lo : lo + size]
            rows = torch.tensor([r for _, r in chunk])
            part = batch.rows(rows)
            picked = valid[rows] if valid is not None else None
            plan = _condition_plan(model, scan, [c for c, _ in chunk], part, picked)
            mine = tuple(t[rows] for t in targets)
            yield _Pass(chunk, rows, part.inputs, mine, plan, start)


@torch.no_grad()
def _batch_session(
    model: LanguageModel,
    inputs: dict,
    targets: tuple,
    keep_layers: int,
    options: dict,
    passes: list[_Pass],
    swap: tuple | None,
) -> list[torch.Tensor]:
    # One session per batch, local or remote: only the scores leave it. The body ships, so
    # it uses ops and torch only. No remote trace stops early: in ndif 0.1.2's sandbox the
    # session's next trace then fails (docs/remote.md, Limits); a local donor pass does.
    env, local = model.nnsight, not getattr(model, "remote", False)
    # plain tuples: the session ships, and this module's classes are not on the server
    jobs = [(one.inputs, one.targets, one.plan, one.start, one.rows) for one in passes]
    with env.session(**model.trace_options):
        found = [].save()  # type: ignore[attr-defined]  # nnsight gives every object .save
        aligned = {}
        if swap is not None:
            with env.trace(**swap[0]) as tracer:
                donor_outputs = []
                for layer in range(model.n_layers):
                    donor_outputs.append(ops.site(model, "head_out", layer))
                if local:
                    tracer.stop()
            for layer in range(model.n_layers):
                x = ops.head_view(donor_outputs[layer], model.n_heads, model.head_dim)
                aligned[("head_out", layer)] = ops.end_aligned(x, swap[1], swap[2])
        with env.trace(**inputs, **options):
            outputs = ops.keep_outputs(model, keep_layers, [])  # [b, W, d] each
            found.append(ops.choice_logprob_sums(ops.final_logits(model), *targets))
        for pass_inputs, pass_targets, plan, start, rows in jobs:  # each from the clean
            residual = outputs[start - 1][rows] if start > 0 else None  # stream below it
            donors = None
            if swap is not None:
                donors = {}
                for key in aligned:
                    donors[key] = aligned[key][rows]
            with env.trace(**pass_inputs, **options):
                ops.start_at(model, start, residual)
                ops.run_layers(model, plan=plan, donors=donors)
                logits = ops.final_logits(model)  # [rows, W, V]
                found.append(ops.choice_logprob_sums(logits, *pass_targets))
    return found


def _checked(
    model: LanguageModel,
    conditions: Sequence[Sequence[tuple[int, int]] | Features],
    means: SiteMeans | torch.Tensor | None,
    donors: Sequence[ScoredSequence] | None,
    n_sequences: int,
    strategy: str,
) -> list[Condition]:
    if strategy not in STRATEGIES:
        raise InputError(f"strategy must be one of {', '.join(STRATEGIES)}, not {strategy!r}")
    checked = [c if isinstance(c, Features) else tuple(model.check_heads(c)) for c in conditions]
    for i, heads in enumerate(checked):
        if isinstance(heads, Features):
            heads.dictionary.check(model)
        if not heads:
            raise InputError(f"condition #{i} ablates no head; give at least one (layer, head)")
    if donors is not None and (means is not None or len(donors) != n_sequences):
        raise InputError("donors= resample-ablates: give one donor per sequence and no means=")
    if donors is not None and any(isinstance(c, Features) for c in checked):
        raise InputError(
            "donors= resample-ablates heads; a condition of features is zeroed or mean-ablated "
            "here (for a donor's features use Patch/Resample(dictionary.features(...)) on a call)"
        )
    return checked


def condition_scores(
    model: LanguageModel,
    sequences: Sequence[ScoredSequence],
    conditions: Sequence[Sequence[tuple[int, int]] | Features],
    *,
    means: SiteMeans | torch.Tensor | None = None,
    donors: Sequence[ScoredSequence] | None = None,
    strategy: str = "residual",
    batch_size: int = 16,
    rows_per_pass: int | None = None,
    progress: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """``(clean [S], scores [C, S])``: mean target log-prob, clean and under each condition.

    ``rows_per_pass`` (default ``batch_size * n_heads``): rows of a residual condition pass.
    """
    conditions = _checked(model, conditions, means, donors, len(sequences), strategy)
    scan = _Scan.of(model, conditions, means, strategy, rows_per_pass or batch_size * model.n_heads)
    bar = tqdm(
        total=len(sequences) * len(conditions),
        desc=f"scan ({strategy}) rows",
        unit="row",
        disable=not progress,
        leave=False,
    )
    clean, scores = np.zeros(len(sequences)), np.zeros((len(conditions), len(sequences)))
    for batch in model.batches([list(s.ids) for s in sequences], batch_size=batch_size):
        part = [sequences[i] for i in batch.indices]
        given = None if donors is None else [donors[i] for i in batch.indices]
        passes, found = _score_batch(model, scan, batch, part, given)
        clean[batch.indices] = found[0].double().cpu().numpy()
        for one, got in zip(passes, found[1:]):
            for (c, r), value in zip(one.pairs, got.double().tolist()):
                scores[c, batch.indices[r]] = value
            bar.update(len(one.pairs))
    bar.close()
    return clean, scores


@dataclass(frozen=True)
class _Scan:
    strategy: str
    conditions: list[Condition]
    by_start: dict[int, list[int]]  # the layer a pass starts at -> its conditions
    table: dict | torch.Tensor | None  # the mean-ablation means ([d_sae]: features), or None
    rows_per_pass: int
    keep_layers: int  # clean layer outputs kept for the residual strategy

    @classmethod
    def of(
        cls,
        model: LanguageModel,
        conditions: list[Condition],
        means: SiteMeans | torch.Tensor | None,
        strategy: str,
        rows_per_pass: int,
    ) -> _Scan:
        starts = [
            c.dictionary.layer if isinstance(c, Features) else min(layer for layer, _ in c)
            for c in conditions
        ]
        by_start: dict[int, list[int]] = {}
        for c, start in enumerate(starts):
            by_start.setdefault(start if strategy == "residual" else 0, []).append(c)
        return cls(
            strategy=strategy,
            conditions=conditions,
            by_start=by_start,
            table=means.means if isinstance(means, SiteMeans) else means,  # [d_sae]: features
            rows_per_pass=rows_per_pass,
            keep_layers=max(starts) if strategy == "residual" else 0,
        )


def _score_batch(
    model: LanguageModel,
    scan: _Scan,
    batch: Batch,
    part: list[ScoredSequence],
    donors: list[ScoredSequence] | None,
) -> tuple[list[_Pass], list[torch.Tensor]]:
    # the passes, then the clean scores [b] and each pass's [rows]
    metrics = [TargetLogprob(s.n_target) for s in part]
    terms, options = logit_terms(model, metrics, batch.input_ids)
    targets = terms["logprob"]  # positions, ids and weights [b, T] of every target token
    swap, valid = _alignment(model, part, donors, batch.input_ids.shape[1])
    passes = list(_passes(model, scan, batch, targets, valid))
    found = _batch_session(model, batch.inputs, targets, scan.keep_layers, options, passes, swap)
    return passes, found

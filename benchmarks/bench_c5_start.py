"""C5's recognition with each set started at its lowest ablated layer, against full passes.

Heads are ranked by mean BSI over the canonical prompts (as C5's ranking does), and two nulls
are drawn as C5 draws them: ``random`` (k heads outside the top set) and ``layers`` (one
head in the layer of each top head). Each null's conditions (baseline, top set and
``--sets`` sets) are scored on ``--items`` evenly spaced recognition items two ways, in
C5's chunks (``batch_size`` records with every condition):

* ``full``: ``strategy="batched"``, C5's default: each record run in full once per
  condition, its choices on its prompt's cache, conditions mixed per row
  (``recognition(..., per_row=...)``);
* ``started``: ``strategy="residual"`` (``c5.recognition_residual``): one clean run per
  batch, each set from its lowest ablated layer, in the prompt and the choices.

Both run in one process, alternating (full then started, then started then full, ...), so a
busy machine slows both alike; the ratio full / started of each round is reported with the
median, never the absolute times alone. The scores of the two are compared as well.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_c5_start.py     # 41 items, 10 sets per null
    PYTHONPATH=. .venv/bin/python benchmarks/bench_c5_start.py --items 4 --sets 2 --rounds 1

``PYTHONPATH=.`` makes a script in ``benchmarks/`` import this checkout's ``bindscope``, not
one installed elsewhere (a shared venv's editable install points at its own checkout).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

try:
    from benchmarks import _common as common
except ImportError:  # run as a script: benchmarks/ is on sys.path
    import _common as common


def _conditions(model, pset, args) -> dict[str, dict[str, list]]:
    """Each null's conditions: baseline, the top set and its sets, as C5 draws them."""
    from bindscope.experiments.c5 import draw_random_sets
    from bindscope.metrics.ranking import rank_heads
    from bindscope.runners.binding import binding

    found = [r for r in binding(model, pset.records, on_missing="skip") if not r.skipped]
    ok = [r.bsi for r in found if r.eb_star == r.eb_star]  # a 2+ token span (not NaN)
    import torch

    top, _ = rank_heads(torch.stack(ok).double().mean(0), args.k)
    out = {}
    for null in ("random", "layers"):
        sets = draw_random_sets(
            model.n_layers, model.n_heads, top, k=args.k, n=args.sets, seed=args.seed,
            matched_layers=null == "layers",
        )  # fmt: skip
        out[null] = {
            "baseline": [],
            "top": top,
            **{f"{null}:{i:02d}": s for i, s in enumerate(sets)},
        }
    return out


def _chunks(model, records, conditions, batch_size: int) -> list[list]:
    """C5's chunks: ``batch_size`` records (in C5's batch order), each with every condition."""
    from bindscope.experiments.kit.chunks import batch_order

    ordered = batch_order(model, records)
    return [
        [(rec, name) for rec in ordered[lo : lo + batch_size] for name in conditions]
        for lo in range(0, len(ordered), batch_size)
    ]


def _run(model, chunks, conditions, strategy: str, batch_size: int) -> dict[str, tuple]:
    """``{record key|condition: scores}`` as C5's evaluation loop scores one strategy."""
    from bindscope.experiments import c5
    from bindscope.runners.behaviour import recognition

    out = {}
    for part in chunks:
        if strategy == "started":
            results = c5.recognition_residual(model, part, conditions, batch_size=batch_size)
        else:
            results = recognition(
                model,
                [rec for rec, _ in part],
                per_row=[conditions[name] or None for _, name in part],
                batch_size=batch_size,
            )
        out.update({f"{rec.key}|{name}": r.scores for (rec, name), r in zip(part, results)})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default", help=common.MODEL_HELP)
    parser.add_argument("--items", type=int, default=41, help="recognition items (evenly spaced)")
    parser.add_argument("--sets", type=int, default=10, help="sets per null")
    parser.add_argument("--k", type=int, default=4, help="heads per set")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)
    common.quiet()
    from bindscope import prompts

    model, _ = common.load_default_model(args.model)
    pset = prompts.load("canonical")
    records = [r for r in pset.records if r.task == "recognition"]
    records = common.evenly_spaced(records, args.items)
    nulls = _conditions(model, pset, args)
    info = common.machine()
    warm = _chunks(model, records[:2], {"baseline": [], "top": nulls["random"]["top"]}, 2)
    _run(model, warm, {"baseline": [], "top": nulls["random"]["top"]}, "full", 2)
    _run(model, warm, {"baseline": [], "top": nulls["random"]["top"]}, "started", 2)
    seconds: dict[tuple[str, str], list[float]] = {}
    cpu_seconds: dict[tuple[str, str], list[float]] = {}
    scores: dict[tuple[str, str], dict] = {}
    for round_ in range(args.rounds):
        order = ("full", "started") if round_ % 2 == 0 else ("started", "full")
        for null, conditions in nulls.items():
            chunks = _chunks(model, records, conditions, args.batch_size)
            for strategy in order:
                started, cpu = time.perf_counter(), time.process_time()
                scores[(null, strategy)] = _run(
                    model, chunks, conditions, strategy, args.batch_size
                )
                seconds.setdefault((null, strategy), []).append(time.perf_counter() - started)
                cpu_seconds.setdefault((null, strategy), []).append(time.process_time() - cpu)
    _report(model, args, nulls, (seconds, cpu_seconds), scores, info, records)
    return 0


def _report(model, args, nulls, times, scores, info, records) -> None:
    """Print the table (and write ``--json``); ``times``: wall and CPU seconds per run."""
    info_after = common.machine()
    seconds, cpu_seconds = times
    rows, summary = [], {}
    for null, conditions in nulls.items():
        ratios = [f / s for f, s in zip(seconds[(null, "full")], seconds[(null, "started")])]
        starts = [min(layer for layer, _ in h) for name, h in conditions.items() if h]
        skipped = sum(starts) / (len(starts) * model.n_layers)
        full, started = scores[(null, "full")], scores[(null, "started")]
        diff = max(abs(a - b) for key in full for a, b in zip(full[key], started[key]))
        summary[null] = {
            "ratios": ratios,
            "median_ratio": statistics.median(ratios),
            "full_s": seconds[(null, "full")],
            "started_s": seconds[(null, "started")],
            "full_cpu_s": cpu_seconds[(null, "full")],
            "started_cpu_s": cpu_seconds[(null, "started")],
            "layers_skipped": skipped,
            "max_score_diff": diff,
            "record_conditions": len(full),
        }
        cpu = [f / s for f, s in zip(cpu_seconds[(null, "full")], cpu_seconds[(null, "started")])]
        rows.append(
            [null, len(full), f"{skipped:.0%}", " ".join(f"{r:.2f}" for r in ratios),
             statistics.median(ratios), " ".join(f"{r:.2f}" for r in cpu), f"{diff:.1e}"]
        )  # fmt: skip
    print(
        f"C5 recognition, {model.name}: {len(records)} items, top-{args.k} + {args.sets} sets "
        f"per null, batch {args.batch_size}, {args.rounds} alternating rounds"
    )
    print(common.machine_line(info))
    headers = ["null", "record x condition", "layers below the sets' starts"]
    headers += ["full / started per round", "median", "CPU s full / started", "max |d score|"]
    print(common.table(headers, rows))
    print(f"load average after the run: {common.machine_line(info_after).rsplit('; ', 1)[1]}")
    if args.json:
        settings = {**vars(args), "json": str(args.json)}
        args.json.write_text(json.dumps({"machine": info, "args": settings, "nulls": summary}))


if __name__ == "__main__":
    sys.exit(main())

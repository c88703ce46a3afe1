"""Head scan: residual-start runner vs the naive scan (one pass per head over batched prompts).

Both score the 205 canonical recognition items (every choice, correct choice's mean log-prob)
under zero-ablation of every single head of the default model. The residual-start runner
(``bindscope.runners.scan``, ``strategy="residual"``) runs each batch of sequences once
clean and starts every head's condition from the clean residual stream at the head's layer;
the naive scan runs every head over every batch from the embeddings. Exact single-head
ablation bounds the speed-up at about 2x (half the layers, on average, are skipped). Both
must give the same scores within a derived float32 bound.

With ``--attribution`` it compares instead the exact residual-start scan of every head with
the attribution scan (``bindscope scan --method attribution``): every head's effect on the
correct choice's log-prob estimated by attribution patching (AtP*, one forward and one
backward pass per batch), then the exact scan of the ``--verify`` heads with the largest
mean |estimate|. It reports the time ratios, the Spearman correlation of estimated and
exact effects over all heads, how many of the exact top-10 heads (largest mean drop) are
among the estimated top-20 and top-30, and whether the verified heads' exact top-10 is the
exact scan's top-10 in the same order.

Usage::

    python benchmarks/bench_scan.py               # the full benchmark (205 items)
    python benchmarks/bench_scan.py --limit 4     # a smoke run on 4 items
    python benchmarks/bench_scan.py --tiny        # a tiny random model, for CI-like checks
    python benchmarks/bench_scan.py --attribution --verify 30   # exact vs attribution scan
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _model(tiny: bool):
    if not tiny:
        import bindscope

        return bindscope.load_model()
    from tests.conftest import _train_tokenizer, build_tiny

    return build_tiny("llama", _train_tokenizer("sentencepiece"))


def _items(limit: int | None):
    from bindscope.prompts import load

    items = [r for r in load("canonical").records if r.task == "recognition"]
    if limit:  # evenly spaced, so every term and item kind shows up
        step = len(items) / limit
        items = [items[int(i * step)] for i in range(limit)]
    return items


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="evenly spaced items")
    parser.add_argument("--batch-size", type=int, default=16, help="sequences per pass")
    parser.add_argument("--tiny", action="store_true", help="tiny random Llama (smoke)")
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    parser.add_argument(
        "--attribution", action="store_true", help="exact scan vs attribution scan instead"
    )
    parser.add_argument("--verify", type=int, default=30, help="heads verified exactly")
    args = parser.parse_args(argv)
    if args.attribution:
        from benchmarks.bench_scan_attribution import compare

        return compare(_model(args.tiny), _items(args.limit), args)
    from bindscope.experiments.scan import conditions_of, scored
    from bindscope.runners.scan import condition_scores

    model = _model(args.tiny)
    items = _items(args.limit)
    sequences = [s for rec in items for s in scored(model, rec)[0]]
    conditions = list(conditions_of(model, "head").values())
    # warm-up: one small call of each strategy
    for strategy in ("residual", "naive"):
        condition_scores(model, sequences[:2], conditions[:2], strategy=strategy)
    rows, found = [], {}
    for strategy in ("residual", "naive"):
        start = time.perf_counter()
        _, scores = condition_scores(
            model, sequences, conditions, strategy=strategy, batch_size=args.batch_size
        )
        seconds = time.perf_counter() - start
        found[strategy] = scores
        rows.append((strategy, seconds))
    # Both runs see the same padded batches; they differ by rounding only (the layers below
    # a head ran on another batch shape in the clean pass). tests/tolerance.py's logit bound
    # (largest logit x eps x sqrt(hidden) x depth x 8), twice for the log-softmax.
    from tests.tolerance import logit_bound

    bound = 2 * logit_bound(model, [rec.template for rec in items[:8]])
    diff = float(np.abs(found["residual"] - found["naive"]).max())
    ratio = rows[1][1] / rows[0][1]
    print(
        f"Head scan, {model.name}, {len(items)} recognition items ({len(sequences)} sequences), "
        f"{len(conditions)} heads, zero-ablation, batch {args.batch_size}, "
        f"{torch.get_num_threads()} torch threads"
    )
    print("| strategy | time s | condition-sequences/s |")
    print("|----------|--------|------------------------|")
    for name, seconds in rows:
        rate = len(conditions) * len(sequences) / seconds
        print(f"| {name} | {seconds:.2f} | {rate:.1f} |")
    print(f"speed-up residual vs naive: {ratio:.2f}x (target >= 1.8x)")
    verdict = "OK" if diff <= bound else "FAIL"
    print(f"max |score diff| {diff:.2e}, derived bound {bound:.2e}: {verdict}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {"items": len(items), "times": dict(rows), "ratio": ratio, "max_diff": diff,
                 "bound": bound},
                indent=2,
            )
        )  # fmt: skip
    return 0 if diff <= bound and math.isfinite(ratio) else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Exact scan of every head vs the attribution scan (``bench_scan.py --attribution``).

Both run on the same items and batches. The exact scan scores every choice of every item
(as ``bindscope scan`` does); the estimate needs only the correct choice's sequence (the
log-prob metric's). The ``--verify K`` run is the estimate plus the exact scan of the ``K``
heads with the largest mean |estimate|, every choice scored, as the CLI runs it. GradDrop's
ranking (AtP*'s fix for cancelling paths, ``L`` more backward passes) is timed and scored
against the exact top-10 too.
"""

from __future__ import annotations

import json
import time

import numpy as np
import torch


def _effects(model, items, scores, clean, owners, answers) -> np.ndarray:
    """``[C]`` mean over items of the correct choice's log-prob drop (clean - ablated)."""
    columns = [np.flatnonzero(owners == i)[answers[i]] for i in range(len(items))]
    return (clean[columns][None, :] - scores[:, columns]).mean(1)


def compare(model, items, args) -> int:
    """Run both scans, print the table, return 0 when both ran and gave finite numbers."""
    from scipy.stats import spearmanr

    from bindscope.experiments.scan import conditions_of, scored
    from bindscope.interventions import Zero
    from bindscope.runners.attribution_patching import (
        TargetLogprob,
        all_heads,
        attribution_scores,
    )
    from bindscope.runners.scan import condition_scores

    found = [scored(model, rec) for rec in items]
    sequences = [s for seqs, _ in found for s in seqs]
    owners = np.array([i for i, (seqs, _) in enumerate(found) for _ in seqs])
    answers = [answer for _, answer in found]
    correct = [seqs[answer] for seqs, answer in found]
    names = list(conditions_of(model, "head"))
    conditions = [[tuple(h) for h in heads] for heads in conditions_of(model, "head").values()]
    spec = Zero(tuple(all_heads(model)))
    texts, metrics = [list(s.ids) for s in correct], [TargetLogprob(s.n_target) for s in correct]
    # warm-up: one small call of each
    condition_scores(model, sequences[:2], conditions[:2])
    attribution_scores(model, texts[:2], metrics[:2], intervene=spec)

    start = time.perf_counter()
    clean, scores = condition_scores(model, sequences, conditions, batch_size=args.batch_size)
    exact_seconds = time.perf_counter() - start
    start = time.perf_counter()
    _, change = attribution_scores(
        model, texts, metrics, intervene=spec, batch_size=args.batch_size
    )
    estimate_seconds = time.perf_counter() - start
    estimate = (-change).mean(0).reshape(-1)  # [C], clean - ablated, layer-major like names
    start = time.perf_counter()
    *_, dropped = attribution_scores(
        model, texts, metrics, intervene=spec, batch_size=args.batch_size, grad_drop=True
    )
    grad_drop_seconds = time.perf_counter() - start
    grad_drop = dropped.mean(0).reshape(-1)
    by_grad_drop = sorted(range(len(names)), key=lambda c: (-grad_drop[c], c))
    chosen = sorted(range(len(names)), key=lambda c: (-abs(estimate[c]), c))[: args.verify]
    start = time.perf_counter()
    _, verified_scores = condition_scores(
        model, sequences, [conditions[c] for c in chosen], batch_size=args.batch_size
    )
    verify_seconds = estimate_seconds + time.perf_counter() - start

    exact = _effects(model, items, scores, clean, owners, answers)
    verified = _effects(model, items, verified_scores, clean, owners, answers)
    exact_top = sorted(range(len(names)), key=lambda c: (-exact[c], c))[:10]
    by_estimate = sorted(range(len(names)), key=lambda c: (-abs(estimate[c]), c))
    verified_top = [
        chosen[j] for j in sorted(range(len(chosen)), key=lambda j: (-verified[j], chosen[j]))
    ][:10]
    rho = float(spearmanr(estimate, exact).statistic)
    numbers = {
        "items": len(items),
        "heads": len(names),
        "exact_seconds": exact_seconds,
        "estimate_seconds": estimate_seconds,
        "verify_seconds": verify_seconds,
        "estimate_speedup": exact_seconds / estimate_seconds,
        "verify_speedup": exact_seconds / verify_seconds,
        "spearman": rho,
        "exact_top10_in_estimated_top20": len(set(exact_top) & set(by_estimate[:20])),
        "exact_top10_in_estimated_top30": len(set(exact_top) & set(by_estimate[:30])),
        "verified_top10_equals_exact_top10": verified_top == exact_top,
        "grad_drop_seconds": grad_drop_seconds,
        "exact_top10_in_grad_drop_top20": len(set(exact_top) & set(by_grad_drop[:20])),
        "exact_top10_in_grad_drop_top30": len(set(exact_top) & set(by_grad_drop[:30])),
        "exact_top10": [names[c] for c in exact_top],
        "verified_top10": [names[c] for c in verified_top],
        "missed": [
            {"head": names[c], "exact": float(exact[c]), "estimate": float(estimate[c]),
             "estimate_rank": by_estimate.index(c) + 1}
            for c in exact_top if c not in chosen
        ],
    }  # fmt: skip
    print(
        f"Head scan, exact vs attribution, {model.name}, {len(items)} recognition items "
        f"({len(sequences)} sequences), {len(names)} heads, zero-ablation, batch "
        f"{args.batch_size}, --verify {args.verify}, {torch.get_num_threads()} torch threads"
    )
    rows = [
        ("exact, every head (residual start)", exact_seconds, 1.0),
        ("estimate, every head (AtP*)", estimate_seconds, numbers["estimate_speedup"]),
        (f"estimate + exact top {args.verify}", verify_seconds, numbers["verify_speedup"]),
        ("GradDrop scores, every head", grad_drop_seconds, exact_seconds / grad_drop_seconds),
    ]
    print("| run | time s | speed-up vs exact |")
    print("|-----|--------|-------------------|")
    for name, seconds, ratio in rows:
        print(f"| {name} | {seconds:.2f} | {ratio:.1f}x |")
    print(f"Spearman (estimated vs exact, all heads): {rho:.3f}")
    for k in (20, 30):
        print(
            f"exact top-10 in estimated top-{k}: {numbers[f'exact_top10_in_estimated_top{k}']}/10"
            f" (GradDrop top-{k}: {numbers[f'exact_top10_in_grad_drop_top{k}']}/10)"
        )
    same = numbers["verified_top10_equals_exact_top10"]
    print(f"--verify {args.verify} gives the exact top-10 in order: {same}")
    for miss in numbers["missed"]:
        print(
            f"  missed {miss['head']}: exact {miss['exact']:.3f}, estimate {miss['estimate']:.3f} "
            f"(rank {miss['estimate_rank']} by |estimate|)"
        )
    if args.json:
        args.json.write_text(json.dumps(numbers, indent=2))
    return 0 if np.isfinite([rho, exact_seconds, estimate_seconds]).all() else 1

"""Edge attribution on a real model: the table of issue 31, in one invocation.

Run from the repository root on a quiet machine (the times are wall-clock):

    .venv/bin/python benchmarks/bench_circuit.py                       # SmolLM2, both tasks
    .venv/bin/python benchmarks/bench_circuit.py --model gemma-3-270m
    .venv/bin/python benchmarks/bench_circuit.py --pairs 8 --sizes 50 --verify 5   # smoke run

For each task (IOI, greater-than) and method (EAP; EAP-IG, 5 steps): the seconds of the
full edge scan, the faithfulness of the top-n circuits (n = 50, 100, 200) with their 95%
bootstrap CIs beside one random circuit of each size (the null), the circuit's stability,
and the exact path patching of the top 2K edges (K = 30; on the first `--verify-pairs` pairs,
the estimates averaged over the same pairs): Spearman and recall@K of the
estimates against it, and its seconds. Printed as one Markdown table.
"""

from __future__ import annotations

import argparse
import sys
import time

HEADER = (
    "| task | method | scan (s) | s / 100 pairs | n | faithfulness [95% CI] | random | "
    "stability | Spearman | recall@K | exact 2K edges (s) |"
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="load_model name (default SmolLM2)")
    parser.add_argument("--tasks", default="ioi,greater-than")
    parser.add_argument("--pairs", type=int, default=100)
    parser.add_argument("--sizes", default="50,100,200")
    parser.add_argument("--verify", type=int, default=30, help="K (0: no verification)")
    parser.add_argument("--verify-pairs", type=int, default=None, help="pairs re-measured (all)")
    parser.add_argument("--steps", type=int, default=5, help="EAP-IG steps")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--greedy", action="store_true", help="greedy circuits, not top-n")
    parser.add_argument("--ablation", default="corrupted", choices=("corrupted", "mean"))
    args = parser.parse_args()

    import bindscope
    from bindscope.prompts.tasks import answer_ids, task_pairs
    from bindscope.runners.attribution_metrics import LogitDifference
    from bindscope.runners.circuit import faithfulness, greedy_mask, stability, top_mask, verify
    from bindscope.runners.edges import EdgeScores, edge_attribution

    model = bindscope.load_model(args.model) if args.model else bindscope.load_model()
    select = greedy_mask if args.greedy else top_mask
    sizes = [int(x) for x in args.sizes.split(",")]
    rows = []
    for task in args.tasks.split(","):
        pairs = task_pairs(task, args.pairs, model.tokenizer)
        clean, corrupted = [p.clean for p in pairs], [p.corrupted for p in pairs]
        metric = [LogitDifference(*answer_ids(p, model.tokenizer)) for p in pairs]
        edge_attribution(model, clean[:2], corrupted[:2], metric[:2], method="eap")  # warm-up
        for method, steps in (("eap", 1), ("eap-ig", args.steps)):
            start = time.perf_counter()
            scores = edge_attribution(
                model, clean, corrupted, metric, method=method, steps=steps,
                batch_size=args.batch_size,
            )  # fmt: skip
            scan = time.perf_counter() - start
            rho = recall = exact = "-"
            if args.verify:
                start = time.perf_counter()
                v = len(pairs) if args.verify_pairs is None else args.verify_pairs
                first = EdgeScores(
                    scores.graph, scores.scores[:v], scores.clean[:v], scores.corrupted[:v],
                    scores.method, scores.steps,
                )  # fmt: skip
                checked = verify(model, clean[:v], corrupted[:v], metric[:v], first, args.verify)
                exact = f"{time.perf_counter() - start:.1f}"
                rho, recall = f"{checked.spearman:.3f}", f"{checked.recall_at_k:.2f}"
            name = method if method == "eap" else f"{method} ({steps} steps)"
            for n in sizes:
                kept = faithfulness(
                    model, clean, corrupted, metric, scores, select(scores, n), n_random=1,
                    batch_size=args.batch_size, ablation=args.ablation,
                )  # fmt: skip
                share = kept.share
                rows.append(
                    f"| {task} | {name} | {scan:.1f} | {100 * scan / len(pairs):.1f} | {n} | "
                    f"{share.value:.3f} [{share.low:.3f}, {share.high:.3f}] | "
                    f"{kept.null[0]:.3f} | {stability(scores, n, select=select):.2f} | {rho} | "
                    f"{recall} | {exact} |"
                )
                print(rows[-1], file=sys.stderr, flush=True)  # a crash keeps what ran
    chosen = "greedy" if args.greedy else "top-n"
    print(
        f"{model.name}: {args.pairs} pairs per task, {chosen} circuits, {args.ablation} "
        f"ablation, K = {args.verify} (exact on the first {args.verify_pairs or args.pairs} "
        "pairs)\n"
    )
    print(HEADER)
    print("|" + "---|" * (HEADER.count("|") - 1))
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Edge attribution on a real model: EAP, EAP-IG and exact path patching, timed.

Run from the repository root on a quiet machine (the times are wall-clock, 2 CPU cores):

    .venv/bin/python benchmarks/bench_circuit.py                     # SmolLM2, IOI, 100 pairs
    .venv/bin/python benchmarks/bench_circuit.py --model gemma-3-270m --task greater-than
    .venv/bin/python benchmarks/bench_circuit.py --pairs 8 --sizes 50 --verify 5   # smoke run

Prints, per method: the seconds of the full edge scan (and per 100 pairs), the faithfulness
of the top-n circuits with their 95% CIs beside one random circuit of each size, the top-n
stability, and for EAP-IG the exact path patching of the top 2K edges (Spearman, recall@K,
seconds). The goal of issue 31: the full scan under a minute per 100 pairs on SmolLM2.
"""

from __future__ import annotations

import argparse
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="load_model name (default SmolLM2)")
    parser.add_argument("--task", default="ioi", choices=("ioi", "greater-than"))
    parser.add_argument("--pairs", type=int, default=100)
    parser.add_argument("--sizes", default="50,100,200")
    parser.add_argument("--verify", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--greedy", action="store_true", help="greedy circuits, not top-n")
    args = parser.parse_args()

    import bindscope
    from bindscope.prompts.tasks import answer_ids, task_pairs
    from bindscope.runners.attribution_metrics import LogitDifference
    from bindscope.runners.circuit import faithfulness, greedy_mask, stability, top_mask, verify
    from bindscope.runners.edges import edge_attribution

    model = bindscope.load_model(args.model) if args.model else bindscope.load_model()
    model.hf.requires_grad_(True)
    pairs = task_pairs(args.task, args.pairs, model.tokenizer)
    clean, corrupted = [p.clean for p in pairs], [p.corrupted for p in pairs]
    metric = [LogitDifference(*answer_ids(p, model.tokenizer)) for p in pairs]
    edge_attribution(model, clean[:2], corrupted[:2], metric[:2], method="eap")  # warm-up
    select = greedy_mask if args.greedy else top_mask
    print(f"{model.name}, {args.task}, {len(pairs)} pairs")
    for method, steps in (("eap", 1), ("eap-ig", 5)):
        start = time.perf_counter()
        scores = edge_attribution(
            model, clean, corrupted, metric, method=method, steps=steps,
            batch_size=args.batch_size,
        )  # fmt: skip
        seconds = time.perf_counter() - start
        print(
            f"{method} ({steps} steps): {scores.graph.n_edges} edges in {seconds:.1f} s "
            f"({100 * seconds / len(pairs):.1f} s per 100 pairs); metric "
            f"{scores.clean.mean():.3f} clean, {scores.corrupted.mean():.3f} corrupted"
        )
        for n in (int(x) for x in args.sizes.split(",")):
            kept = faithfulness(
                model, clean, corrupted, metric, scores, select(scores, n), n_random=1
            )
            share, chosen = kept.share, "greedy" if args.greedy else "top"
            print(
                f"  {chosen} {n}: {share.value:.3f} [{share.low:.3f}, {share.high:.3f}], random "
                f"{kept.null[0]:.3f}, stability {stability(scores, n):.2f}"
            )
    if args.verify:
        start = time.perf_counter()
        checked = verify(model, clean, corrupted, metric, scores, args.verify)
        print(
            f"exact path patching of {len(checked.edges)} edges: {time.perf_counter() - start:.1f}"
            f" s; Spearman {checked.spearman:.3f}, recall@{checked.k} {checked.recall_at_k:.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Activation patching over sites x layers x positions: `patching_sweep` vs a raw nnsight loop.

Both patch the clean run's activation of one site, layer and position into the corrupt run
and read the logit difference of the two answers at the last position, for every cell.
`bindscope.runners.patching_sweep` runs the cells as rows of batched traces (the clean text
once per batch, as the donor row); the raw loop is written the way nnsight's activation
patching tutorial writes it, one trace per cell: an invoke on the clean text saves the
activation, an invoke on the corrupt text writes it and saves the logits. Both are checked
to give the same grid (float32 noise of two batch layouts). Each strategy runs in its own
process after a warm-up (benchmarks/_common.py).

Usage::

    python benchmarks/bench_patching_sweep.py            # default model, every layer and position
    python benchmarks/bench_patching_sweep.py --quick    # smoke run: 2 layers, 3 positions
    python benchmarks/bench_patching_sweep.py --tiny     # a tiny random model, for CI-like checks
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks._common import (  # noqa: E402  (the path above makes the package importable)
    MODEL_HELP,
    load_default_model,
    machine,
    machine_line,
    measure,
    quiet,
    run_worker,
    write_result,
)

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"
ANSWERS = (" Mary", " John")
SITES = ("resid_pre", "attn_out", "mlp_out")


def _model(args):
    if not args.tiny:
        return load_default_model(args.model)[0]
    from tests.conftest import _train_tokenizer, build_tiny

    return build_tiny("llama", _train_tokenizer("sentencepiece"))


def _setup(model, args):
    clean, corrupt = model.tokenize(CLEAN), model.tokenize(CORRUPT)
    if args.tiny:  # its small vocabulary splits the names unevenly: change one token instead
        corrupt = [*clean[:-5], clean[-5] + 1, *clean[-4:]]
    if len(clean) != len(corrupt):
        raise SystemExit(f"the texts tokenize to {len(clean)} and {len(corrupt)} tokens")
    a, b = (model.tokenizer(t, add_special_tokens=False)["input_ids"][-1] for t in ANSWERS)
    layers = list(range(model.n_layers))
    positions = list(range(len(clean)))
    if args.quick:
        layers, positions = layers[:2], positions[-3:]
    return clean, corrupt, a, b, layers, positions


def sweep(model, args):
    from bindscope.metrics import logit_diff
    from bindscope.runners import patching_sweep

    clean, corrupt, a, b, layers, positions = _setup(model, args)
    grid = patching_sweep(
        model, clean, corrupt, sites=SITES, layers=layers, positions=positions,
        metric=lambda logits: logit_diff(logits, a, b), batch_size=args.batch_size,
    )  # fmt: skip
    return torch.stack([grid[s] for s in SITES])


def _raw_site(model, layer, site):
    """The envoy attribute a tutorial reads: the layer's input, attention output, MLP output."""
    block = model.nnsight.model.layers[layer]
    if site == "resid_pre":
        return block, "input"
    if site == "attn_out":
        return block.self_attn, "output0"
    return block.mlp, "output"


def raw_loop(model, args):
    clean, corrupt, a, b, layers, positions = _setup(model, args)
    env = model.nnsight
    out = torch.empty(len(SITES), len(layers), len(positions))
    with torch.no_grad():
        for s, site in enumerate(SITES):
            for i, layer in enumerate(layers):
                for j, p in enumerate(positions):
                    module, port = _raw_site(model, layer, site)
                    held: dict = {}  # made outside the trace, filled by the clean invoke
                    with env.trace() as tracer:
                        with tracer.invoke(input_ids=torch.tensor([clean])):
                            if port == "input":
                                held["act"] = module.input[:, p].clone()
                            elif port == "output0":
                                held["act"] = module.output[0][:, p].clone()
                            else:
                                held["act"] = module.output[:, p].clone()
                        with tracer.invoke(input_ids=torch.tensor([corrupt])):
                            # the target first: it waits until the clean invoke has read
                            if port == "input":
                                target = module.input
                            elif port == "output0":
                                target = module.output[0]
                            else:
                                target = module.output
                            target[:, p] = held["act"]
                            logits = env.lm_head.output[0, -1].save()
                    out[s, i, j] = float(logits[a] - logits[b])
    return out


STRATEGIES = {"sweep": sweep, "raw_nnsight": raw_loop}


def worker(name: str, args) -> None:
    quiet()
    model = _model(args)
    work = STRATEGIES[name]
    small = argparse.Namespace(**{**vars(args), "quick": True})
    work(model, small)  # warm-up
    grid, stats = measure(lambda: work(model, args))
    stats["grid"] = grid.tolist()
    write_result(args.result, stats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help=MODEL_HELP)
    parser.add_argument("--tiny", action="store_true", help="a tiny random Llama instead")
    parser.add_argument("--quick", action="store_true", help="2 layers and 3 positions")
    parser.add_argument("--batch-size", type=int, default=16, help="cells per forward pass")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args)
        return
    passed = sys.argv[1:]
    print(machine_line(machine()))
    results = {name: run_worker(__file__, name, passed) for name in STRATEGIES}
    grids = {name: torch.tensor(r["grid"]) for name, r in results.items()}
    diff = float((grids["sweep"] - grids["raw_nnsight"]).abs().max())
    scale = float(grids["raw_nnsight"].abs().max())
    cells = grids["sweep"].numel()
    print(f"{cells} cells ({len(SITES)} sites); largest grid difference {diff:.2e} "
          f"(largest value {scale:.2f})")  # fmt: skip
    for name, r in results.items():
        print(f"{name:12s} {r['seconds']:8.2f} s  {r['seconds'] / cells * 1000:8.1f} ms/cell  "
              f"peak {r['peak_mb']:.0f} MiB")  # fmt: skip
    ratio = results["raw_nnsight"]["seconds"] / results["sweep"]["seconds"]
    print(f"sweep is {ratio:.2f}x the speed of the raw nnsight loop")
    # float32 noise of two batch layouts, scaled by the largest logit difference
    if diff > 1e-3 * max(scale, 1.0):
        print(json.dumps({"error": "the two strategies disagree"}))
        raise SystemExit(1)


if __name__ == "__main__":
    main()

"""C5's default recognition timed alone: 205 items x (baseline + ``--sets`` random 4-head sets).

``recognition(..., per_row=..., batch_size=16)`` on SmolLM2 as C5's ``batched`` strategy
calls it; the model loads before the clock starts. Prints the choice layout
(``packed``/``padded``, ``bindscope.runners.packing``) and the seconds; run it on two
checkouts in turn to compare them. From the repo root::

    PYTHONPATH=. .venv/bin/python benchmarks/bench_c5_choices.py LABEL
"""

from __future__ import annotations

import argparse
import random
import time

import torch

import bindscope
from bindscope import prompts
from bindscope.interventions import Zero
from bindscope.runners.behaviour import recognition


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("label", help="a name for this run in the output")
    parser.add_argument("--sets", type=int, default=1, help="random 4-head sets (default 1)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = bindscope.load_model("SmolLM2-135M-Instruct")
    recs = [r for r in prompts.load("canonical") if r.task == "recognition"]
    rng = random.Random(0)
    heads = [(layer, h) for layer in range(model.n_layers) for h in range(model.n_heads)]
    sets = [rng.sample(heads, 4) for _ in range(args.sets)]
    part = [(r, None) for r in recs] + [(r, s) for s in sets for r in recs]
    per_row = [Zero(s) if s else [] for _, s in part]
    try:
        from bindscope.runners.packing import choice_layout

        layout = choice_layout(model)
    except ImportError:  # a checkout from before packing
        layout = "padded"
    start = time.perf_counter()
    recognition(model, [r for r, _ in part], per_row=per_row, batch_size=16)
    seconds = time.perf_counter() - start
    print(f"{args.label} layout={layout} rows={len(part)} seconds={seconds:.2f}")


if __name__ == "__main__":
    main()

"""Benchmark EB* extraction and recognition scoring against the published strategies.

Binding (EB* for every canonical prompt on the default model):

* ``bindscope``: ``bindscope.runners.binding`` at its default batch size.
* ``floor``: plain HF eager forward of the decoder (``hf.model``, no LM head) with
  ``output_attentions=True`` on exactly the batches bindscope runs (prompts cut after the
  term's span, identical prefixes once, left padding, same batch size), BSI gathered from the
  returned attentions with one vectorised index per layer.
* ``floor, full prompts``: the same floor on whole prompts (no cut, no de-duplication), to
  show how much of the gain comes from cutting at the span.
* ``published``: the published TransformerLens extraction rebuilt on HF: per prompt, per
  layer ``l``, one eager forward of the whole prompt stopped after layer ``l`` by a hook that
  raises; BSI summed in Python with one ``.item()`` per (head, pair). Run on ``--limit``
  evenly spaced prompts and extrapolated per prompt to all of them.

Spans come from ``bindscope.prompts.locate`` for every strategy, so all compute the same
numbers; the script prints the largest EB* difference against bindscope.

Recognition (the canonical recognition items, current attention implementation):

* ``bindscope shared_prefix``: ``recognition(..., strategy="shared_prefix")``.
* ``bindscope full``: ``recognition(..., strategy="full")`` (batched, no shared cache).
* ``per-choice loop``: one HF forward of prompt + " " + choice per choice, mean log-prob
  of the choice tokens (the published scorer).

Each strategy runs in a fresh process so its peak RSS is its own. Run from the repo root::

    .venv/bin/python benchmarks/bench_binding.py            # full run (published: 60 prompts)
    .venv/bin/python benchmarks/bench_binding.py --quick    # smoke run, about a minute
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import sys
from pathlib import Path

try:
    from benchmarks import _common as common
except ImportError:  # run as a script: benchmarks/ is on sys.path
    import _common as common

SCRIPT = Path(__file__).resolve()
TARGET_VS_PUBLISHED = 15.0
TARGET_VS_FLOOR = 1.25
TARGET_RECOGNITION = 3.0


# -- shared preparation -----------------------------------------------------------------


def canonical(limit: int | None = None, task: str | None = None):
    from bindscope import prompts

    records = list(prompts.load("canonical").records)
    if task is not None:
        records = [r for r in records if r.task == task]
    return common.evenly_spaced(records, limit)


def default_batch_size(function) -> int:
    return inspect.signature(function).parameters["batch_size"].default


def eb_star_of(bsi) -> tuple[float, int]:
    """EB* and the first best layer from BSI rows ``[L][H]`` (plain Python numbers)."""
    eb = [max(row) - sum(row) / len(row) for row in bsi]
    best = max(range(len(eb)), key=lambda i: (eb[i], -i))
    return eb[best], best


def spans_of(model, records):
    from bindscope.prompts import locate

    return [locate(model, r.template, r.term, prompt_id=r.key).indices for r in records]


# -- binding strategies -----------------------------------------------------------------


def bindscope_binding(model, records, batch_size):
    from bindscope.runners.binding import binding

    results = binding(model, records, batch_size=batch_size)
    return [(r.eb_star, r.best_layer) for r in results], {}


def floor_binding(model, records, batch_size, *, cut: bool):
    """Plain HF eager forward with ``output_attentions=True``; BSI gathered per layer."""
    import torch

    from bindscope.interventions.ops import span_pair_bsi
    from bindscope.metrics.binding import pair_index, span_pairs

    spans = spans_of(model, records)
    inputs: dict[tuple[int, ...], list[int]] = {}  # one forward per distinct input
    for i, (record, span) in enumerate(zip(records, spans)):
        ids = model.tokenize(record.template)
        key = tuple(ids[: span[-1] + 1]) if cut else (i, *ids)
        inputs.setdefault(key, []).append(i)
    keys = list(inputs)
    rows = [list(k) if cut else list(k[1:]) for k in keys]
    out: list[tuple[float, int] | None] = [None] * len(records)
    with model.eager(), torch.no_grad():
        for batch in model.batches(rows, batch_size=batch_size):
            query, key, weight = pair_index(
                [
                    span_pairs([batch.pad(r) + s for s in spans[inputs[keys[index]][0]]])
                    for r, index in enumerate(batch.indices)
                ]
            )
            result = model.hf.model(
                **batch.inputs, output_attentions=True, use_cache=False, return_dict=True
            )
            bsi = torch.stack(
                [
                    span_pair_bsi(probs, query, key, weight)
                    for probs in result.attentions  # [b, H, n, n] per layer
                ],
                1,
            )  # [b, L, H]
            eb = bsi.max(-1).values - bsi.mean(-1)  # [b, L]
            best = eb.argmax(-1)  # first arg-max
            for r, index in enumerate(batch.indices):
                value = (float(eb[r, best[r]]), int(best[r]))
                for i in inputs[keys[index]]:
                    out[i] = value
    return out, {"forwards": len(keys)}


class _StopForward(Exception):
    """Raised by a hook to end a forward pass after the wanted layer."""


def published_binding(model, records, batch_size):
    """Per prompt, per layer: a forward stopped after that layer; BSI with ``.item()``."""
    import torch

    from bindscope.metrics.binding import span_pairs

    layers = model.hf.model.layers
    out, forwards = [], 0
    with model.eager(), torch.no_grad():
        for record, span in zip(records, spans_of(model, records)):
            ids = torch.tensor([model.tokenize(record.template)])
            pairs = span_pairs(span)
            bsi = []
            for layer in range(model.n_layers):
                caught = {}

                def stop(module, args, output, caught=caught):
                    caught["probs"] = output[1]  # [1, H, n, n]
                    raise _StopForward

                handle = layers[layer].self_attn.register_forward_hook(stop)
                try:
                    model.hf(input_ids=ids, use_cache=False)
                except _StopForward:
                    pass
                finally:
                    handle.remove()
                forwards += 1
                probs = caught["probs"]
                row = []
                for head in range(probs.shape[1]):
                    total = 0.0
                    for query, key in pairs:
                        total += probs[0, head, query, key].item()
                    row.append(total / len(pairs))
                bsi.append(row)
            out.append(eb_star_of(bsi))
    return out, {"forwards": forwards}


# -- recognition strategies -------------------------------------------------------------


def bindscope_recognition(model, records, strategy):
    from bindscope.runners.behaviour import recognition

    results = recognition(model, records, strategy=strategy)
    return [(list(r.scores), r.prediction) for r in results], {}


def per_choice_recognition(model, records):
    """One HF forward per (prompt + choice); mean log-prob of the choice's tokens."""
    import torch

    out, forwards = [], 0
    with torch.no_grad():
        for record in records:
            prompt = model.tokenize(record.template)
            scores = []
            for choice in record.choices:
                target = model.tokenizer(" " + choice, add_special_tokens=False)["input_ids"]
                ids = torch.tensor([prompt + target])
                logits = model.hf(input_ids=ids, use_cache=False).logits[0]  # [n, V]
                forwards += 1
                logp = logits[len(prompt) - 1 : -1].float().log_softmax(-1)
                scores.append(float(logp[torch.arange(len(target)), target].mean()))
            prediction = max(range(len(scores)), key=lambda i: (scores[i], -i))
            out.append((scores, prediction))
    return out, {"forwards": forwards}


# -- worker side ------------------------------------------------------------------------


def worker(args) -> None:
    common.quiet()
    from bindscope.runners.behaviour import recognition
    from bindscope.runners.binding import binding

    model, load_s = common.load_default_model(args.model)
    limit = args.limit_all
    binding_size = args.batch_size or default_batch_size(binding)
    binding_records = canonical(limit)
    name = args.worker
    if name == "bindscope":
        records, repeat = binding_records, args.repeat

        def work(rs):
            return bindscope_binding(model, rs, binding_size)
    elif name in ("floor", "floor_full"):
        records, repeat = binding_records, args.repeat

        def work(rs):
            return floor_binding(model, rs, binding_size, cut=name == "floor")
    elif name == "published":
        records, repeat = common.evenly_spaced(binding_records, args.limit), 1

        def work(rs):
            return published_binding(model, rs, binding_size)
    elif name in ("rec_shared_prefix", "rec_full"):
        records = canonical(args.rec_limit, task="recognition")
        repeat = args.repeat
        strategy = "shared_prefix" if name == "rec_shared_prefix" else "full"

        def work(rs):
            return bindscope_recognition(model, rs, strategy)
    elif name == "rec_per_choice":
        records, repeat = canonical(args.rec_limit, task="recognition"), 1

        def work(rs):
            return per_choice_recognition(model, rs)
    else:
        raise SystemExit(f"unknown worker {name!r}")
    work(records[:2])  # warm-up: first-call costs (allocator, nnsight source parsing)
    (values, extra), timing = common.measure(lambda: work(records), repeat=repeat)
    common.write_result(
        args.result,
        {
            "name": name,
            "model": model.name,
            "keys": [r.key for r in records],
            "values": values,
            "n": len(records),
            "batch_size": binding_size if name in ("bindscope", "floor", "floor_full") else None,
            "rec_batch_size": default_batch_size(recognition),
            "load_s": load_s,
            **extra,
            **timing,
        },
    )


# -- driver side ------------------------------------------------------------------------


def compare_eb(reference: dict, other: dict) -> tuple[float, int, int]:
    """Max |EB* difference| and best-layer agreement on the prompts both measured."""
    ref = dict(zip(reference["keys"], reference["values"]))
    diffs, same, n = [], 0, 0
    for key, (eb, best) in zip(other["keys"], other["values"]):
        # a prompt bindscope skips (EB* NaN: the term starts on the attention sink) is not compared
        if key in ref and not math.isnan(ref[key][0]):
            diffs.append(abs(eb - ref[key][0]))
            same += int(best == ref[key][1])
            n += 1
    return (max(diffs) if diffs else math.nan), same, n


def compare_recognition(reference: dict, other: dict) -> tuple[float, int, int]:
    ref = dict(zip(reference["keys"], reference["values"]))
    diffs, same, n = [], 0, 0
    for key, (scores, prediction) in zip(other["keys"], other["values"]):
        ref_scores, ref_prediction = ref[key]
        diffs.extend(abs(a - b) for a, b in zip(scores, ref_scores))
        same += int(prediction == ref_prediction)
        n += 1
    return max(diffs), same, n


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=60, help="prompts for the published strategy")
    parser.add_argument("--quick", action="store_true", help="small smoke run")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of fast strategies")
    parser.add_argument("--batch-size", type=int, default=None, help="default: binding()'s")
    parser.add_argument("--skip-full-floor", action="store_true", help="skip the uncut floor")
    parser.add_argument("--json", type=Path, default=None, help="also write all numbers here")
    parser.add_argument("--model", default="default", help=common.MODEL_HELP)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--limit-all", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--rec-limit", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.limit, args.limit_all, args.rec_limit, args.repeat = 4, 60, 20, 1
        args.skip_full_floor = True
    if args.worker:
        worker(args)
        return 0

    info = common.machine()
    print(f"machine: {common.machine_line(info)}", flush=True)
    passthrough = ["--limit", str(args.limit), "--repeat", str(args.repeat), "--model", args.model]
    if args.batch_size:
        passthrough += ["--batch-size", str(args.batch_size)]
    if args.limit_all:
        passthrough += ["--limit-all", str(args.limit_all)]
    if args.rec_limit:
        passthrough += ["--rec-limit", str(args.rec_limit)]
    names = ["bindscope", "floor", "floor_full", "published"]
    names += ["rec_shared_prefix", "rec_full", "rec_per_choice"]
    if args.skip_full_floor:
        names.remove("floor_full")
    runs = {}
    for name in names:
        print(f"running {name} ...", flush=True)
        runs[name] = common.run_worker(SCRIPT, name, passthrough)
        print(f"  {name}: {runs[name]['seconds']:.1f} s for {runs[name]['n']} items", flush=True)
    info_after = common.machine()

    # Binding table ------------------------------------------------------------------
    ours = runs["bindscope"]
    n_all = ours["n"]
    labels = {
        "bindscope": f"bindscope binding() (batch {ours['batch_size']})",
        "floor": f"floor: HF eager output_attentions, same batches (batch {ours['batch_size']})",
        "floor_full": "floor on full prompts (no cut, no dedupe; informational)",
        "published": "published: 1 forward per layer, .item() per pair",
    }
    rows = []
    for name in ("bindscope", "floor", "floor_full", "published"):
        if name not in runs:
            continue
        run = runs[name]
        per_prompt = run["seconds"] / run["n"]
        estimate = per_prompt * n_all
        diff, same, n = compare_eb(ours, run) if name != "bindscope" else (0.0, n_all, n_all)
        rows.append(
            [
                labels[name],
                run["n"],
                run.get("forwards", "-"),
                run["seconds"],
                run["n"] / run["seconds"],
                estimate if run["n"] != n_all else run["seconds"],
                run["loaded_mb"],
                run["peak_mb"],
                run["peak_mb"] - run["loaded_mb"],
                f"{diff:.2e}" if name != "bindscope" else "-",
                f"{same}/{n}" if name != "bindscope" else "-",
            ]
        )
    print()
    print(f"Binding (EB*) on {n_all} canonical prompts, {ours['model']}, fp32, CPU")
    print(
        common.table(
            [
                "strategy",
                "prompts",
                "forwards",
                "time s",
                "prompts/s",
                f"time for {n_all} s",
                "loaded MB",
                "peak MB",
                "peak-loaded MB",
                "max |dEB*|",
                "same best layer",
            ],
            rows,
        )
    )
    skipped = sum(math.isnan(eb) for eb, _ in ours["values"])
    if skipped:
        print(
            f"{skipped} prompts skipped by binding() (term at position 0, the attention sink) "
            "are left out of the comparisons."
        )
    published = runs["published"]
    published_estimate = published["seconds"] / published["n"] * n_all
    if published["n"] != n_all:
        print(
            f"published strategy run on {published['n']} evenly spaced prompts "
            f"(--limit {published['n']}); its time for {n_all} is extrapolated per prompt."
        )
    speedup = published_estimate / ours["seconds"]
    ratio = ours["seconds"] / runs["floor"]["seconds"]
    print(
        f"target bindscope >= {TARGET_VS_PUBLISHED:.0f}x published: {speedup:.1f}x  "
        f"{common.verdict(speedup >= TARGET_VS_PUBLISHED)}"
    )
    print(
        f"target bindscope time <= {TARGET_VS_FLOOR}x floor: {ratio:.2f}x  "
        f"{common.verdict(ratio <= TARGET_VS_FLOOR)}"
    )

    # Recognition table ----------------------------------------------------------------
    ref = runs["rec_shared_prefix"]
    rows = []
    rec_labels = {
        "rec_shared_prefix": f"bindscope shared_prefix (batch {ref['rec_batch_size']})",
        "rec_full": f"bindscope full (batch {ref['rec_batch_size']}; informational)",
        "rec_per_choice": "per-choice loop: 1 HF forward per choice",
    }
    for name in ("rec_shared_prefix", "rec_full", "rec_per_choice"):
        run = runs[name]
        diff, same, n = compare_recognition(ref, run)
        rows.append(
            [
                rec_labels[name],
                run["n"],
                run.get("forwards", "-"),
                run["seconds"],
                run["n"] / run["seconds"],
                run["loaded_mb"],
                run["peak_mb"],
                run["peak_mb"] - run["loaded_mb"],
                f"{diff:.2e}" if name != "rec_shared_prefix" else "-",
                f"{same}/{n}" if name != "rec_shared_prefix" else "-",
            ]
        )
    print()
    print(f"Recognition scoring on {ref['n']} canonical recognition items")
    print(
        common.table(
            [
                "strategy",
                "items",
                "forwards",
                "time s",
                "items/s",
                "loaded MB",
                "peak MB",
                "peak-loaded MB",
                "max |d score|",
                "same prediction",
            ],
            rows,
        )
    )
    rec_speedup = runs["rec_per_choice"]["seconds"] / ref["seconds"]
    print(
        f"target shared_prefix >= {TARGET_RECOGNITION:.0f}x per-choice loop: {rec_speedup:.1f}x  "
        f"{common.verdict(rec_speedup >= TARGET_RECOGNITION)}"
    )
    print(
        f"\ntimes: best of {args.repeat} runs for bindscope/floor/bindscope-recognition, "
        "1 run for published and per-choice; each strategy in a fresh process after a "
        "2-item warm-up. peak = peak RSS while the timed work ran; loaded = RSS before it."
    )
    print(f"load average after the run: {common.machine_line(info_after).rsplit('; ', 1)[1]}")
    if args.json:
        summary = {
            "machine": info,
            "machine_after": info_after,
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "runs": {k: {x: y for x, y in v.items() if x != "values"} for k, v in runs.items()},
            "speedup_vs_published": speedup,
            "ratio_vs_floor": ratio,
            "recognition_speedup": rec_speedup,
        }
        args.json.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

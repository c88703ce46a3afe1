"""Benchmark the full C5 head-ablation experiment against the published strategy.

* ``bindscope``: ``bindscope.experiments.c5.run`` on the default model and the canonical
  prompts (ranking set = evaluation set, k=4, ``--n-random`` random sets, zero ablation):
  head ranking by mean BSI, then baseline, top-k, bottom-k and every random set on all 205
  recognition and 246 generation records. The time of its ranking, recognition and
  generation calls is recorded by wrapping the names ``c5.run`` calls (library untouched).
* ``published``: the same conditions and heads (read back from bindscope's records), scored
  the published way: one unbatched HF forward per choice per condition (mean log-prob of
  the choice tokens), one unbatched greedy ``generate`` per prompt per condition, with a
  forward pre-hook on ``o_proj`` zeroing the ablated heads' input slices (the right site),
  and the ranking by one forward per layer per prompt with ``.item()`` per pair. It runs on
  ``--limit`` evenly spaced records per task (all conditions each) and ``--rank-limit``
  ranking prompts, and each part is extrapolated per item to the full set.
* ``floor``: the same record x condition items as plain batched HF forward passes (prompt
  once with a cache, choices on it) and greedy ``generate``, in c5.run's order and batch
  sizes, with no nnsight and no intervention; checked against bindscope's baseline.

The script prints how often the two agree (recognition predictions, generated texts) on the
items both ran. Run from the repo root::

    .venv/bin/python benchmarks/bench_c5.py                 # full C5, 10 random sets
    .venv/bin/python benchmarks/bench_c5.py --quick         # 2 terms, 2 random sets
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

try:
    from benchmarks import _common as common
    from benchmarks.bench_binding import published_binding
except ImportError:  # run as a script: benchmarks/ is on sys.path
    import _common as common
    from bench_binding import published_binding

SCRIPT = Path(__file__).resolve()
TARGET = 6.0  # C5 evaluation at least this much faster than the published strategy
FLOOR_TARGET = 1.3  # and at most this many times the floor's time
QUICK_TERMS = ("alt text", "screen reader")


def prompt_set(quick: bool):
    from bindscope import prompts

    pset = prompts.load("canonical")
    return pset.filter(terms=QUICK_TERMS) if quick else pset


# -- bindscope side ---------------------------------------------------------------------


class _Timed:
    """Wrap a function and add its wall time to a shared counter."""

    def __init__(self, function, totals: dict, name: str) -> None:
        self.function, self.totals, self.name = function, totals, name

    def __call__(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return self.function(*args, **kwargs)
        finally:
            self.totals[self.name] = self.totals.get(self.name, 0.0) + (
                time.perf_counter() - started
            )


def bindscope_worker(args, model) -> dict:
    from bindscope.experiments import c5
    from bindscope.experiments.kit import binding_reuse
    from bindscope.results.records import read_records
    from bindscope.runners.behaviour import generation, recognition
    from bindscope.runners.binding import binding

    pset = prompt_set(args.quick)
    # Warm-up outside the timed run: first-call costs of each entry point.
    rec = [r for r in pset.records if r.task == "recognition"][:2]
    gen = [r for r in pset.records if r.task == "generation"][:2]
    binding(model, rec)
    recognition(model, rec, per_row=[[(0, 0)], []])
    c5.recognition_residual(model, [(rec[0], "top")], {"top": [[model.n_layers - 1, 0]]})
    generation(model, gen, per_row=[[(0, 0)], []])

    totals: dict[str, float] = {}
    # Each function is timed where C5 looks it up: binding in the kit's reuse helper; the
    # ablated recognition conditions in recognition_residual (strategy "residual").
    where = {
        "binding": (binding_reuse, "binding"),
        "recognition": (c5, "recognition"),
        "recognition_residual": (c5, "recognition"),
        "generation": (c5, "generation"),
    }
    originals = {name: getattr(module, name) for name, (module, _) in where.items()}
    for name, function in originals.items():
        module, part = where[name]
        setattr(module, name, _Timed(function, totals, part))
    try:
        with tempfile.TemporaryDirectory(prefix="bindscope-c5-bench-") as out:
            _, timing = common.measure(
                lambda: c5.run(
                    model,
                    prompts=pset,
                    out=out,
                    k=args.k,
                    n_random=args.n_random,
                    ablation="zero",
                    seed=args.seed,
                    generation_batch_size=args.generation_batch_size,
                    force=True,
                    progress=False,
                )
            )
            records = list(read_records(Path(out) / "c5" / "records.jsonl"))
    finally:
        for name, function in originals.items():
            setattr(where[name][0], name, function)
    conditions, results = {}, {}
    for r in records:
        if r["experiment"] != "c5":
            continue
        conditions[r["condition"]] = r["heads"]
        m = r["metrics"]
        value = (
            {"scores": m["choice_scores"], "prediction": m["prediction"]}
            if r["task"] == "recognition"
            else {"text": m["text"], "score": m["score"]}
        )
        results[f"{r['prompt_key']}|{r['condition']}"] = value
    n_rec = sum(1 for r in pset.records if r.task == "recognition")
    return {
        "conditions": conditions,
        "results": results,
        "n_recognition": n_rec,
        "n_generation": len(pset.records) - n_rec,
        "n_ranking": len(pset.records),
        "parts": totals,
        **timing,
    }


# -- published side ---------------------------------------------------------------------


def zero_hooks(model, heads):
    """Forward pre-hooks on ``o_proj`` that zero the given heads' input slices."""
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)
    handles = []
    n_heads, head_dim = model.n_heads, model.head_dim
    for layer, hs in by_layer.items():

        def hook(module, args, hs=hs):
            x = args[0].clone()
            x.view(*x.shape[:-1], n_heads, head_dim)[..., hs, :] = 0
            return (x, *args[1:])

        o_proj = model.hf.model.layers[layer].self_attn.o_proj
        handles.append(o_proj.register_forward_pre_hook(hook))
    return handles


def published_recognition(model, record):
    import torch

    prompt = model.tokenize(record.template)
    scores = []
    for choice in record.choices:
        target = model.tokenizer(" " + choice, add_special_tokens=False)["input_ids"]
        logits = model.hf(input_ids=torch.tensor([prompt + target]), use_cache=False).logits[0]
        logp = logits[len(prompt) - 1 : -1].float().log_softmax(-1)
        scores.append(float(logp[torch.arange(len(target)), target].mean()))
    prediction = max(range(len(scores)), key=lambda i: (scores[i], -i))
    return {"scores": scores, "prediction": prediction}


def published_generation(model, record):
    import torch

    from bindscope.metrics.behaviour import rubric_score

    ids = torch.tensor([model.tokenize(record.template)])
    output = model.hf.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=record.max_tokens,
        do_sample=False,
        pad_token_id=model.tokenizer.pad_token_id,
    )
    eos = model.hf.generation_config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos]) | {model.tokenizer.eos_token_id}
    new = []
    for token in output[0, ids.shape[1] :].tolist():
        if token in eos_ids:
            break
        new.append(token)
    text = model.tokenizer.decode(new, skip_special_tokens=True)
    return {"text": text, "score": rubric_score(text, record.term).score}


def published_worker(args, model) -> dict:
    import torch

    conditions = json.loads(Path(args.conditions).read_text())
    pset = prompt_set(args.quick)
    rec = common.evenly_spaced([r for r in pset.records if r.task == "recognition"], args.limit)
    gen = common.evenly_spaced([r for r in pset.records if r.task == "generation"], args.limit)
    rank = common.evenly_spaced(list(pset.records), args.rank_limit)
    with torch.no_grad():  # warm-up
        published_recognition(model, rec[0])
        published_generation(model, gen[0])

    parts: dict[str, float] = {}
    results: dict[str, dict] = {}

    def work():
        started = time.perf_counter()
        published_binding(model, rank, None)  # ranking cost: per-head BSI, layer by layer
        parts["ranking"] = time.perf_counter() - started
        parts["recognition"] = parts["generation"] = 0.0
        with torch.no_grad():
            for name, heads in conditions.items():
                handles = zero_hooks(model, heads)
                try:
                    started = time.perf_counter()
                    for record in rec:
                        results[f"{record.key}|{name}"] = published_recognition(model, record)
                    parts["recognition"] += time.perf_counter() - started
                    started = time.perf_counter()
                    for record in gen:
                        results[f"{record.key}|{name}"] = published_generation(model, record)
                    parts["generation"] += time.perf_counter() - started
                finally:
                    for handle in handles:
                        handle.remove()

    _, timing = common.measure(work)
    n_rec = sum(1 for r in pset.records if r.task == "recognition")
    return {
        "results": results,
        "parts": parts,
        "n_rec_run": len(rec),
        "n_gen_run": len(gen),
        "n_rank_run": len(rank),
        "n_recognition": n_rec,
        "n_generation": len(pset.records) - n_rec,
        "n_ranking": len(pset.records),
        "n_conditions": len(conditions),
        "forwards_recognition": len(conditions) * sum(len(r.choices) for r in rec),
        **timing,
    }


def direct_worker(args, model) -> dict:
    """The same items as c5.run, but one recognition() and one generation() call in all."""
    from bindscope.runners.behaviour import generation, recognition

    conditions = json.loads(Path(args.conditions).read_text())
    pset = prompt_set(args.quick)
    rec = [(r, c) for c in conditions for r in pset.records if r.task == "recognition"]
    gen = [(r, c) for c in conditions for r in pset.records if r.task == "generation"]
    recognition(model, [r for r, _ in rec[:2]], per_row=[[(0, 0)], []])  # warm-up
    generation(model, [r for r, _ in gen[:2]], per_row=[[(0, 0)], []])
    parts: dict[str, float] = {}
    results: dict[str, dict] = {}

    def work():
        started = time.perf_counter()
        found = recognition(model, [r for r, _ in rec], per_row=[conditions[c] for _, c in rec])
        parts["recognition"] = time.perf_counter() - started
        for (record, name), value in zip(rec, found):
            results[f"{record.key}|{name}"] = {
                "scores": list(value.scores),
                "prediction": value.prediction,
            }
        started = time.perf_counter()
        found = generation(
            model,
            [r for r, _ in gen],
            per_row=[conditions[c] for _, c in gen],
            batch_size=args.generation_batch_size,
        )
        parts["generation"] = time.perf_counter() - started
        for (record, name), value in zip(gen, found):
            results[f"{record.key}|{name}"] = {"text": value.text, "score": value.score}

    _, timing = common.measure(work)
    return {"results": results, "parts": parts, **timing}


# -- floor ------------------------------------------------------------------------------


def _floor_recognition(hf, tok, batch, n_choices: int) -> list[list[float]]:
    """Plain HF: the prompts once with a cache, then every choice on the repeated cache."""
    import torch

    prompts = [tok(r.template)["input_ids"] for r in batch]
    width = max(len(p) for p in prompts)
    ids = torch.full((len(batch), width), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros(len(batch), width, dtype=torch.long)
    for i, p in enumerate(prompts):  # left-padded
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    out = hf(
        input_ids=ids,
        attention_mask=mask,
        position_ids=positions,
        use_cache=True,
        logits_to_keep=1,
    )
    first = out.logits[:, -1].float().log_softmax(-1)  # [b, V]
    cache = out.past_key_values
    cache.batch_repeat_interleave(n_choices)
    flat = [tok(" " + c, add_special_tokens=False)["input_ids"] for r in batch for c in r.choices]
    cw = max(len(c) for c in flat)
    cids = torch.full((len(flat), cw), tok.pad_token_id, dtype=torch.long)
    cmask = torch.zeros(len(flat), cw, dtype=torch.long)
    for s, c in enumerate(flat):
        cids[s, : len(c)] = torch.tensor(c)
        cmask[s, : len(c)] = 1
    lengths = mask.sum(1).repeat_interleave(n_choices)
    logits = (
        hf(
            input_ids=cids,
            attention_mask=torch.cat([mask.repeat_interleave(n_choices, 0), cmask], 1),
            position_ids=lengths[:, None] + torch.arange(cw)[None, :],
            past_key_values=cache,
            use_cache=True,
        )
        .logits.float()
        .log_softmax(-1)
    )  # [b*C, cw, V]
    scores = []
    for s, c in enumerate(flat):
        total = float(first[s // n_choices, c[0]])
        total += sum(float(logits[s, j - 1, c[j]]) for j in range(1, len(c)))
        scores.append(total / len(c))
    return [scores[i * n_choices : (i + 1) * n_choices] for i in range(len(batch))]


def floor_worker(args, model) -> dict:
    """The floor: the same record x condition items as plain batched HF forward passes and
    greedy ``generate`` (no nnsight, no intervention: an ablation changes activations, not
    cost), in the order and batch sizes c5.run uses (records by length, each with every
    condition; 16 prompts per forward pass, ``--generation-batch-size`` rows per
    generation batch)."""
    import torch

    conditions = json.loads(Path(args.conditions).read_text())
    pset = prompt_set(args.quick)
    hf, tok = model.hf, model.tokenizer
    tok.padding_side = "left"
    ordered = sorted(
        pset.records,
        key=lambda r: (r.task, len(r.choices or ()), len(model.tokenize(r.template)), r.key),
    )
    rec_items = [(r, c) for r in ordered if r.task == "recognition" for c in conditions]
    gen_items = [(r, c) for r in ordered if r.task == "generation" for c in conditions]
    rec, names = [r for r, _ in rec_items], [c for _, c in rec_items]
    gen, gen_names = [r for r, _ in gen_items], [c for _, c in gen_items]
    rows = args.generation_batch_size
    parts: dict[str, float] = {}
    results: dict[str, dict] = {}

    @torch.no_grad()
    def work():
        started = time.perf_counter()
        by_count: dict[int, list[int]] = {}
        for i, r in enumerate(rec):
            by_count.setdefault(len(r.choices), []).append(i)
        for count, members in by_count.items():
            for lo in range(0, len(members), 16):
                chunk = members[lo : lo + 16]
                found = _floor_recognition(hf, tok, [rec[i] for i in chunk], count)
                for i, values in zip(chunk, found):
                    best = max(range(len(values)), key=lambda j: (values[j], -j))
                    key = f"{rec[i].key}|{names[i]}"
                    results[key] = {"scores": values, "prediction": best}
        parts["recognition"] = time.perf_counter() - started
        started = time.perf_counter()
        by_budget: dict[int, list[int]] = {}
        for i, r in enumerate(gen):
            by_budget.setdefault(r.max_tokens, []).append(i)
        for budget, members in by_budget.items():
            for lo in range(0, len(members), rows):
                chunk = members[lo : lo + rows]
                enc = tok([gen[i].template for i in chunk], return_tensors="pt", padding=True)
                new = hf.generate(
                    **enc, max_new_tokens=budget, do_sample=False, pad_token_id=tok.pad_token_id
                )[:, enc["input_ids"].shape[1] :]
                for i, row in zip(chunk, new.tolist()):
                    results[f"{gen[i].key}|{gen_names[i]}"] = {"text": None, "ids": row}
        parts["generation"] = time.perf_counter() - started

    _, timing = common.measure(work)
    return {"results": results, "parts": parts, **timing}


def worker(args) -> None:
    common.quiet()
    model, load_s = common.load_default_model(args.model)
    if args.worker == "bindscope":
        data = bindscope_worker(args, model)
    elif args.worker == "published":
        data = published_worker(args, model)
    elif args.worker == "direct":
        data = direct_worker(args, model)
    elif args.worker == "floor":
        data = floor_worker(args, model)
    else:
        raise SystemExit(f"unknown worker {args.worker!r}")
    common.write_result(args.result, {**data, "load_s": load_s, "model": model.name})


# -- driver -----------------------------------------------------------------------------


def _recognition_agreement(ours: dict, theirs: dict, keys: list[str]) -> dict:
    """Same predictions, and the largest choice-score difference, over recognition ``keys``."""
    same, diff = 0, 0.0
    for key in keys:
        mine, value = ours["results"][key], theirs["results"][key]
        same += int(mine["prediction"] == value["prediction"])
        diff = max(diff, *(abs(a - b) for a, b in zip(mine["scores"], value["scores"])))
    return {"rec": f"{same}/{len(keys)}", "rec_score_diff": diff}


def agreement(ours: dict, theirs: dict) -> dict:
    """bindscope against another run of the same items (published or direct)."""
    keys = [k for k, v in theirs["results"].items() if "prediction" in v]
    gen = [k for k, v in theirs["results"].items() if "prediction" not in v]
    same = sum(ours["results"][k]["text"] == theirs["results"][k]["text"] for k in gen)
    diffs = [abs(ours["results"][k]["score"] - theirs["results"][k]["score"]) for k in gen]
    return {
        **_recognition_agreement(ours, theirs, keys),
        "gen": f"{same}/{len(gen)}",
        "gen_score_diff_max": max(diffs, default=0.0),
    }


def floor_agreement(ours: dict, floor: dict, model: str | None = None) -> dict:
    """The floor runs no intervention: compare it with bindscope's baseline condition."""
    import bindscope

    baseline = [k for k in floor["results"] if k.endswith("|baseline")]
    keys = [k for k in baseline if "prediction" in floor["results"][k]]
    gen = [k for k in baseline if "prediction" not in floor["results"][k]]
    tok = bindscope.load_model(model).tokenizer if gen else None
    same = 0
    for key in gen:
        ids = [t for t in floor["results"][key]["ids"] if t != tok.pad_token_id]
        text = tok.decode(ids, skip_special_tokens=True)
        same += int(text.strip() == ours["results"][key]["text"].strip())
    return {**_recognition_agreement(ours, floor, keys), "gen": f"{same}/{len(gen)}"}


def main(argv=None) -> int:
    from bindscope.batch import GENERATION_BATCH_SIZE

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-random", type=int, default=10, help="random head sets")
    parser.add_argument("--k", type=int, default=4, help="heads per ablated set")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--limit", type=int, default=8, help="records per task for the published strategy"
    )
    parser.add_argument(
        "--rank-limit", type=int, default=20, help="ranking prompts for the published strategy"
    )
    parser.add_argument("--quick", action="store_true", help="2 terms, 2 random sets")
    parser.add_argument(
        "--generation-batch-size",
        type=int,
        default=GENERATION_BATCH_SIZE,
        help="rows per generation batch, bindscope and floor (default: c5.run's)",
    )
    parser.add_argument(
        "--direct",
        action="store_true",
        help="also time one recognition() + generation() call over the same items",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write all numbers here")
    parser.add_argument("--model", default="default", help=common.MODEL_HELP)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--conditions", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.n_random, args.limit, args.rank_limit = 2, 2, 2
    if args.worker:
        worker(args)
        return 0

    info = common.machine()
    print(f"machine: {common.machine_line(info)}", flush=True)
    shared = ["--n-random", str(args.n_random), "--k", str(args.k), "--seed", str(args.seed)]
    shared += ["--model", args.model]
    shared += ["--limit", str(args.limit), "--rank-limit", str(args.rank_limit)]
    shared += ["--generation-batch-size", str(args.generation_batch_size)]
    if args.quick:
        shared.append("--quick")
    print("running bindscope c5.run ...", flush=True)
    ours = common.run_worker(SCRIPT, "bindscope", shared)
    print(f"  bindscope: {ours['seconds']:.1f} s", flush=True)
    with tempfile.TemporaryDirectory(prefix="bindscope-c5-bench-") as folder:
        conditions = Path(folder) / "conditions.json"
        conditions.write_text(json.dumps(ours["conditions"]))
        print("running published strategy ...", flush=True)
        theirs = common.run_worker(SCRIPT, "published", [*shared, "--conditions", str(conditions)])
        print(f"  published: {theirs['seconds']:.1f} s (subset)", flush=True)
        print("running the floor (plain batched HF, no nnsight, no intervention) ...", flush=True)
        floor = common.run_worker(SCRIPT, "floor", [*shared, "--conditions", str(conditions)])
        print(f"  floor: {floor['seconds']:.1f} s", flush=True)
        direct = None
        if args.direct:
            print("running bindscope recognition() + generation() directly ...", flush=True)
            direct = common.run_worker(SCRIPT, "direct", [*shared, "--conditions", str(conditions)])
            print(f"  direct: {direct['seconds']:.1f} s", flush=True)
    info_after = common.machine()

    n_cond = len(ours["conditions"])
    n_rec, n_gen, n_rank = ours["n_recognition"], ours["n_generation"], ours["n_ranking"]
    scale = {
        "ranking": n_rank / theirs["n_rank_run"],
        "recognition": n_rec / theirs["n_rec_run"],
        "generation": n_gen / theirs["n_gen_run"],
    }
    published_full = {part: theirs["parts"][part] * scale[part] for part in scale}
    ours_parts = {
        "ranking": ours["parts"].get("binding", 0.0),
        "recognition": ours["parts"].get("recognition", 0.0),
        "generation": ours["parts"].get("generation", 0.0),
    }
    other = ours["seconds"] - sum(ours_parts.values())
    items = {"ranking": n_rank, "recognition": n_rec * n_cond, "generation": n_gen * n_cond}
    run_items = {
        "ranking": theirs["n_rank_run"],
        "recognition": theirs["n_rec_run"] * n_cond,
        "generation": theirs["n_gen_run"] * n_cond,
    }
    rows = []
    for part in ("ranking", "recognition", "generation"):
        rows.append(
            [
                part,
                items[part],
                ours_parts[part],
                items[part] / ours_parts[part] if ours_parts[part] else "-",
                run_items[part],
                theirs["parts"][part],
                published_full[part],
                published_full[part] / ours_parts[part] if ours_parts[part] else "-",
            ]
        )
    eval_ours = ours_parts["recognition"] + ours_parts["generation"]
    eval_theirs = published_full["recognition"] + published_full["generation"]
    total_theirs = sum(published_full.values())
    rows.append(
        [
            "evaluation (rec + gen)",
            items["recognition"] + items["generation"],
            eval_ours,
            "-",
            run_items["recognition"] + run_items["generation"],
            theirs["parts"]["recognition"] + theirs["parts"]["generation"],
            eval_theirs,
            eval_theirs / eval_ours,
        ]
    )
    rows.append(["records, summary, bootstrap (bindscope)", "-", other, *["-"] * 5])
    rows.append(
        [
            "total",
            "-",
            ours["seconds"],
            "-",
            "-",
            theirs["seconds"],
            total_theirs,
            total_theirs / ours["seconds"],
        ]
    )
    print()
    print(
        f"C5 on {n_rec} recognition + {n_gen} generation records, {n_cond} conditions "
        f"(baseline, top-{args.k}, bottom-{args.k}, {args.n_random} random), zero ablation, "
        f"{ours['model']}, fp32, CPU"
    )
    print(
        common.table(
            [
                "part",
                "items (record x condition)",
                "bindscope s",
                "bindscope items/s",
                "published items run",
                "published s (run)",
                "published s (all, extrapolated)",
                "speedup",
            ],
            rows,
        )
    )
    print(
        f"published strategy run on {theirs['n_rec_run']} recognition and {theirs['n_gen_run']} "
        f"generation records (evenly spaced, all {n_cond} conditions each) and "
        f"{theirs['n_rank_run']} ranking prompts; each part extrapolated per item to the full set."
    )
    print(
        f"peak RSS while timed: bindscope {ours['peak_mb']:.0f} MB "
        f"(loaded {ours['loaded_mb']:.0f} MB), published {theirs['peak_mb']:.0f} MB "
        f"(loaded {theirs['loaded_mb']:.0f} MB)"
    )
    agree = agreement(ours, theirs)
    print(
        f"agreement on the published subset: recognition predictions {agree['rec']} "
        f"(max |score diff| {agree['rec_score_diff']:.2e}); generated texts identical "
        f"{agree['gen']} (max |rubric score diff| {agree['gen_score_diff_max']:.2f})"
    )
    speed_eval = eval_theirs / eval_ours
    speed_total = total_theirs / ours["seconds"]
    print(
        f"target >= {TARGET:.0f}x: evaluation {speed_eval:.1f}x "
        f"{common.verdict(speed_eval >= TARGET)}; whole C5 incl. ranking {speed_total:.1f}x "
        f"{common.verdict(speed_total >= TARGET)}"
    )
    f_rec, f_gen = floor["parts"]["recognition"], floor["parts"]["generation"]
    print(
        "\nbindscope against the floor (the same items as plain batched HF, in c5.run's order "
        f"and batches: 16 prompts per forward, {args.generation_batch_size} generation rows):"
    )
    print(
        common.table(
            ["part", "bindscope s", "floor s", "bindscope / floor"],
            [
                [
                    "recognition",
                    ours_parts["recognition"],
                    f_rec,
                    ours_parts["recognition"] / f_rec,
                ],
                ["generation", ours_parts["generation"], f_gen, ours_parts["generation"] / f_gen],
                ["evaluation", eval_ours, f_rec + f_gen, eval_ours / (f_rec + f_gen)],
            ],
        )
    )
    floor_agree = floor_agreement(ours, floor, args.model)
    print(
        f"floor vs bindscope on the baseline condition: recognition predictions "
        f"{floor_agree['rec']} (max |score diff| {floor_agree['rec_score_diff']:.2e}); "
        f"generated token ids identical {floor_agree['gen']}"
    )
    to_floor = eval_ours / (f_rec + f_gen)
    print(
        f"target <= {FLOOR_TARGET}x floor: evaluation {to_floor:.2f}x "
        f"{common.verdict(to_floor <= FLOOR_TARGET)}"
    )
    if direct is not None:
        d_rec, d_gen = direct["parts"]["recognition"], direct["parts"]["generation"]
        same = agreement(ours, direct)
        print(
            "\nbindscope without c5.run's chunking (one recognition() and one generation() call "
            "over the same record x condition items):"
        )
        print(
            common.table(
                ["part", "c5.run s", "direct s", "c5.run / direct", "published / direct"],
                [
                    [
                        "recognition",
                        ours_parts["recognition"],
                        d_rec,
                        ours_parts["recognition"] / d_rec,
                        published_full["recognition"] / d_rec,
                    ],
                    [
                        "generation",
                        ours_parts["generation"],
                        d_gen,
                        ours_parts["generation"] / d_gen,
                        published_full["generation"] / d_gen,
                    ],
                    [
                        "evaluation",
                        eval_ours,
                        d_rec + d_gen,
                        eval_ours / (d_rec + d_gen),
                        eval_theirs / (d_rec + d_gen),
                    ],
                ],
            )
        )
        print(
            f"direct vs c5.run: recognition predictions {same['rec']} (max |score diff| "
            f"{same['rec_score_diff']:.2e}), generated texts identical {same['gen']}"
        )
    print(f"load average after the run: {common.machine_line(info_after).rsplit('; ', 1)[1]}")
    if args.json:
        drop = ("results",)
        summary = {
            "machine": info,
            "machine_after": info_after,
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "bindscope": {k: v for k, v in ours.items() if k not in drop},
            "published": {k: v for k, v in theirs.items() if k not in drop},
            "published_extrapolated": published_full,
            "direct": {k: v for k, v in (direct or {}).items() if k not in drop},
            "floor": {k: v for k, v in floor.items() if k not in drop},
            "floor_agreement": floor_agree,
            "evaluation_over_floor": to_floor,
            "agreement": agree,
            "speedup_evaluation": speed_eval,
            "speedup_total": speed_total,
        }
        args.json.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

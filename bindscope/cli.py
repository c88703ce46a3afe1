"""The ``bindscope`` command line: one subcommand per experiment, plus audit, summaries,
figures, the report and the demo. Run ``bindscope <command> --help`` for the options."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bindscope.errors import BindscopeError


def _load(spec: str | None, revision: str | None, args) -> object:
    """``--model`` value to a Model: ``default``/None, a Hub id or folder, ``id@revision``."""
    import bindscope

    if spec and "@" in spec and revision is None and not Path(spec).exists():
        spec, revision = spec.rsplit("@", 1)
    name = None if spec in (None, "default") else spec
    return bindscope.load_model(
        name, revision=revision, dtype=args.dtype, device=args.device, remote=args.remote
    )


def _common(
    p: argparse.ArgumentParser,
    *,
    out: bool = True,
    several: bool = False,
    revision: bool = True,
    compute: bool = True,
) -> None:
    """The options subcommands share. Each subcommand gets only those it honours:
    ``revision=False`` where revisions come otherwise (sweep), ``compute=False`` where nothing
    is batched or resampled (audit only tokenizes)."""
    p.add_argument(
        "--model",
        default=None,
        action="append" if several else "store",
        help="Hub id, local folder or 'default' (SmolLM2-135M-Instruct, offline); "
        "id@revision also works"
        + ("; repeat for several models (Holm across them)" if several else ""),
    )
    if revision:
        p.add_argument(
            "--revision",
            default=None,
            help="Hub revision, e.g. step120000; for a local folder, its subfolder REVISION",
        )
    p.add_argument("--dtype", default=None, help="float32 (default), bfloat16, float16")
    p.add_argument("--device", default=None, help="cpu (default), cuda, cuda:1, mps")
    p.add_argument("--remote", action="store_true", help="run on NDIF (see docs/remote.md)")
    if out:
        p.add_argument("--out", required=True, type=Path, help="results folder")
        p.add_argument("--force", action="store_true", help="discard finished records, redo")
    if compute:
        p.add_argument("--batch-size", type=int, default=16)
        p.add_argument("--seed", type=int, default=0, help="seed of bootstrap CIs, random sets")
        p.add_argument("--no-progress", action="store_true", help="hide progress bars")


def _print_summary(summary: dict) -> None:
    from bindscope.experiments.text import summary_lines

    for line in summary_lines(summary):
        print(line)


def cmd_binding(args) -> int:
    from bindscope.experiments import binding_run

    model = _load(args.model, args.revision, args)
    summary = binding_run.run(
        model,
        prompts=args.prompts,
        out=args.out,
        batch_size=args.batch_size,
        force=args.force,
        on_missing=args.on_missing,
        seed=args.seed,
        progress=not args.no_progress,
    )
    _print_summary(summary)
    print(f"records: {args.out / 'binding' / 'records.jsonl'}")
    return 0


def cmd_audit(args) -> int:
    from bindscope.prompts import load
    from bindscope.prompts.audit import audit, format_audit, write_audit

    model = _load(args.model, args.revision, args)
    rows = audit(model, load(args.prompts))
    for line in format_audit(rows):
        print(line)
    path = write_audit(rows, args.write or Path(f"audit-{Path(str(args.prompts)).stem}.jsonl"))
    bad = [r for r in rows if {"not_found", "single_token"} & set(r["flags"])]
    print(f"{len(rows)} prompts, {len(bad)} without a 2+ token span; written to {path}")
    return 1 if bad and args.strict else 0


def cmd_c5(args) -> int:
    from bindscope.experiments import c5

    specs = args.model or [None]
    if args.revision and len(specs) > 1:
        raise BindscopeError("--revision applies to one model; use --model id@revision instead")
    models = [_load(spec, args.revision, args) for spec in specs]
    summary = c5.run(
        models,
        prompts=args.prompts,
        ranking=args.ranking,
        out=args.out,
        k=args.k,
        n_random=args.n_random,
        ablation=args.ablation,
        matched_layers=args.matched_layers,
        seed=args.seed,
        batch_size=args.batch_size,
        force=args.force,
        progress=not args.no_progress,
    )
    _print_summary(summary)
    return 0


def cmd_sweep(args) -> int:
    from bindscope.experiments import sweep

    if not args.model:
        raise BindscopeError("sweep needs --model (a Hub id with training checkpoints)")
    summary = sweep.run(
        args.model,
        args.revisions,
        prompts=args.prompts,
        out=args.out,
        batch_size=args.batch_size,
        seed=args.seed,
        force=args.force,
        progress=not args.no_progress,
        dtype=args.dtype,
        device=args.device,
        remote=args.remote,
    )
    _print_summary(summary)
    return 0


def cmd_fewshot(args) -> int:
    from bindscope.experiments import fewshot

    model = _load(args.model, args.revision, args)
    summary = fewshot.run(
        model,
        prompts=args.prompts,
        out=args.out,
        exemplars=args.exemplars,
        batch_size=args.batch_size,
        seed=args.seed,
        force=args.force,
        progress=not args.no_progress,
    )
    _print_summary(summary)
    return 0


def cmd_controls(args) -> int:
    from bindscope.experiments import controls

    model = _load(args.model, args.revision, args)
    summary = controls.run(
        model,
        controls=args.controls,
        real=args.real,
        out=args.out,
        batch_size=args.batch_size,
        seed=args.seed,
        force=args.force,
        progress=not args.no_progress,
    )
    _print_summary(summary)
    return 0


def cmd_scan(args) -> int:
    from bindscope.experiments import scan

    specs = args.model or [None]
    if args.revision and len(specs) > 1:
        raise BindscopeError("--revision applies to one model; use --model id@revision instead")
    summary = scan.run(
        [_load(spec, args.revision, args) for spec in specs],
        prompts=args.prompts,
        out=args.out,
        ablation=args.ablation,
        unit=args.unit,
        correction=args.correction,
        seed=args.seed,
        limit=args.limit,
        batch_size=args.batch_size,
        n_resamples=args.n_resamples,
        force=args.force,
        progress=not args.no_progress,
    )
    _print_summary(summary)
    return 0


def cmd_patch(args) -> int:
    from bindscope.experiments import patching

    summary = patching.run(
        _load(args.model, args.revision, args),
        pairs=args.pairs,
        out=args.out,
        unit=args.unit,
        correction=args.correction,
        seed=args.seed,
        limit=args.limit,
        batch_size=args.batch_size,
        n_resamples=args.n_resamples,
        force=args.force,
        progress=not args.no_progress,
    )
    _print_summary(summary)
    return 0


def _head_options(p) -> None:
    p.add_argument("--unit", choices=("head", "layer"), default="head")
    p.add_argument("--correction", choices=("bh", "holm"), default="bh", help="across heads")
    p.add_argument("--limit", type=int, default=None, help="only the first N prompts/pairs")
    p.add_argument("--n-resamples", type=int, default=9999, help="bootstrap/permutation draws")


def cmd_summarize(args) -> int:
    from bindscope.experiments import summarize

    for name, summary in summarize(args.results).items():
        print(f"{name}: {args.results / name / 'summary.json'}")
        _print_summary(summary)
    return 0


def cmd_figures(args) -> int:
    from bindscope.figures import make_figures

    report = make_figures(args.results, args.out)
    for line in report.lines():
        print(line)
    return 0


def cmd_report(args) -> int:
    from bindscope.figures import write_report

    path = write_report(args.results, args.out)
    print(f"report: {path}")
    return 0


def cmd_demo(args) -> int:
    from bindscope.experiments import demo

    demo.run(out=args.out, quick=args.quick, force=args.force, progress=not args.no_progress)
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="bindscope", description="Attention-head binding (EB*) and head ablation studies."
    )
    sub = top.add_subparsers(dest="command", required=True)

    p = sub.add_parser("binding", help="EB* per prompt; records + summary")
    _common(p)
    p.add_argument("--prompts", default="canonical", help="canonical, controls or a .jsonl path")
    p.add_argument(
        "--on-missing", choices=("skip", "error"), default="skip", help="term not in a prompt"
    )
    p.set_defaults(func=cmd_binding)

    p = sub.add_parser("audit", help="each prompt's term span under a model's tokenizer")
    _common(p, out=False, compute=False)
    p.add_argument("--prompts", default="canonical")
    p.add_argument("--write", type=Path, default=None, help="audit JSONL path")
    p.add_argument("--strict", action="store_true", help="exit 1 if any span is missing/short")
    p.set_defaults(func=cmd_audit)

    p = sub.add_parser("c5", help="causal head ablation: top/bottom/random k-head sets")
    _common(p, several=True)
    p.add_argument("--prompts", default="canonical")
    p.add_argument("--ranking", default=None, help="prompt set that ranks heads (default: prompts)")
    p.add_argument("--k", type=int, default=4, help="heads per ablated set")
    p.add_argument("--n-random", type=int, default=50, help="number of random k-head sets")
    p.add_argument("--ablation", choices=("zero", "mean"), default="zero")
    p.add_argument("--matched-layers", action="store_true", help="random sets in top's layers")
    p.set_defaults(func=cmd_c5)

    p = sub.add_parser("sweep", help="EB* and behaviour across training checkpoints")
    _common(p, revision=False)
    p.add_argument(
        "--revisions",
        required=True,
        help="comma-separated revisions in training order, or a preset: "
        "pythia-paper, olmo-1b, crfm, smollm3",
    )
    p.add_argument("--prompts", default="canonical")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("fewshot", help="C3: zero-shot vs exemplar vs paraphrase prefix")
    _common(p)
    p.add_argument("--prompts", default="canonical")
    p.add_argument("--exemplars", default=None, help="exemplars JSON (default: the package's)")
    p.set_defaults(func=cmd_fewshot)

    p = sub.add_parser("controls", help="discriminant validity: real terms vs control groups")
    _common(p)
    p.add_argument("--controls", default="controls")
    p.add_argument("--real", default="canonical")
    p.set_defaults(func=cmd_controls)

    p = sub.add_parser("scan", help="ablate every head alone: effect map with CIs and BH p")
    _common(p, several=True)
    p.add_argument("--prompts", default="canonical")
    p.add_argument("--ablation", choices=("zero", "mean"), default="zero")
    _head_options(p)
    p.set_defaults(func=cmd_scan)

    p = sub.add_parser("patch", help="patch each head from clean into corrupted runs")
    _common(p)
    p.add_argument("--pairs", default="pairs", help="'pairs' (built-in) or a pair file")
    _head_options(p)
    p.set_defaults(func=cmd_patch)

    p = sub.add_parser("summarize", help="recompute summary.json files from records")
    p.add_argument("results", type=Path)
    p.set_defaults(func=cmd_summarize)

    p = sub.add_parser("figures", help="PNG and PDF figures from a results folder")
    p.add_argument("results", type=Path)
    p.add_argument("--out", type=Path, default=None, help="default: RESULTS/figures")
    p.set_defaults(func=cmd_figures)

    p = sub.add_parser("report", help="Markdown report (tables + figures) for a results folder")
    p.add_argument("results", type=Path)
    p.add_argument("--out", type=Path, default=None, help="default: RESULTS/report.md")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("demo", help="the full study on the default model (about 15 min, CPU)")
    p.add_argument("--out", type=Path, default=Path("bindscope-demo"))
    p.add_argument("--quick", action="store_true", help="a few terms only, for a smoke test")
    p.add_argument("--force", action="store_true", help="discard finished records, redo")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_demo)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except BindscopeError as exc:
        print(f"bindscope {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            f"\nbindscope {args.command}: interrupted; finished records are on disk, "
            "rerun the same command to resume",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["main", "parser"]

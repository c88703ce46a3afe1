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
        name,
        revision=revision,
        dtype=args.dtype,
        device=args.device,
        remote=args.remote,
        prepend_bos=getattr(args, "prepend_bos", None),
    )


def _positive(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer (1 or more)")
    return value


def _count(text: str) -> int:
    """argparse type: an integer >= 0."""
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; pass 0 or more")
    return value


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def _preflight(args, experiment: str | None = None, *, check_terms: bool = True, **files):
    """Check options, prompt files and the output folder before any model loads.

    A typo then costs no model load. Returns the loaded prompt sets by keyword.
    """
    from bindscope.loading import check_device, check_dtype
    from bindscope.prompts import load
    from bindscope.results.lock import FolderLock

    if not getattr(args, "remote", False):
        check_dtype(getattr(args, "dtype", None))
        check_device(getattr(args, "device", None))
    sets = {
        name: load(spec, check_terms=check_terms)
        for name, spec in files.items()
        if spec is not None
    }
    if experiment is not None:
        FolderLock(args.out / experiment).acquire().release()  # writable and not in use
    return sets


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
    p.add_argument(
        "--dtype",
        default=None,
        choices=("float32", "float16", "bfloat16", "float64"),
        help="weights dtype (default float32)",
    )
    p.add_argument("--device", default=None, help="cpu (default), cuda, cuda:1, mps")
    p.add_argument("--remote", action="store_true", help="run on NDIF (see docs/remote.md)")
    p.add_argument(
        "--prepend-bos",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="put the BOS token before every text (default: the tokenizer's own rule; spans "
        "starting at position 0, the attention sink, are then left out of EB* and counted)",
    )
    if out:
        p.add_argument("--out", required=True, type=Path, help="results folder")
        p.add_argument("--force", action="store_true", help="discard finished records, redo")
    if compute:
        p.add_argument("--batch-size", type=_positive, default=16)
        p.add_argument("--seed", type=int, default=0, help="seed of bootstrap CIs, random sets")
        p.add_argument("--no-progress", action="store_true", help="hide progress bars")


def _print_summary(summary: dict) -> None:
    from bindscope.experiments.text import summary_lines

    for line in summary_lines(summary):
        print(line)


def cmd_binding(args) -> int:
    from bindscope.experiments import binding_run

    # --on-missing skip: a term absent from its template is skipped with the reason
    sets = _preflight(args, "binding", check_terms=args.on_missing == "error", prompts=args.prompts)
    model = _load(args.model, args.revision, args)
    summary = binding_run.run(
        model,
        prompts=sets["prompts"],
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
    from bindscope.prompts.audit import audit, format_audit, write_audit

    records = _preflight(args, prompts=args.prompts)["prompts"]
    model = _load(args.model, args.revision, args)
    rows = audit(model, records)
    for line in format_audit(rows):
        print(line)
    path = write_audit(rows, args.write or Path(f"audit-{Path(str(args.prompts)).stem}.jsonl"))
    bad = [r for r in rows if {"not_found", "single_token", "too_long"} & set(r["flags"])]
    print(
        f"{len(rows)} prompts, {len(bad)} without a 2+ token span or too long for the "
        f"context window; written to {path}"
    )
    return 1 if bad and args.strict else 0


def cmd_c5(args) -> int:
    from bindscope.experiments import c5

    specs = args.model or [None]
    if args.revision and len(specs) > 1:
        raise BindscopeError("--revision applies to one model; use --model id@revision instead")
    sets = _preflight(args, "c5", prompts=args.prompts, ranking=args.ranking)
    models = [_load(spec, args.revision, args) for spec in specs]
    summary = c5.run(
        models,
        prompts=sets["prompts"],
        ranking=sets.get("ranking"),
        out=args.out,
        k=args.k,
        n_random=args.n_random,
        ablation=args.ablation,
        matched_layers=args.matched_layers,
        matched_classes=args.matched_classes,
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
    sets = _preflight(args, "sweep", prompts=args.prompts)
    summary = sweep.run(
        args.model,
        sweep.resolve_revisions(args.revisions),
        prompts=sets["prompts"],
        out=args.out,
        batch_size=args.batch_size,
        seed=args.seed,
        force=args.force,
        progress=not args.no_progress,
        dtype=args.dtype,
        device=args.device,
        remote=args.remote,
        prepend_bos=args.prepend_bos,
        heads=args.heads,
        head_options={
            "n_repeated": args.n_repeated,
            "repeat_length": args.repeat_length,
            "thresholds": _thresholds(args.threshold),
            "top_k": args.top_k,
        },
    )
    _print_summary(summary)
    if args.heads:
        from bindscope.experiments import heads

        _print_summary(heads.summarize(args.out / "heads"))
    return 0


def _thresholds(pairs: list[str] | None) -> dict[str, float]:
    """``["sink=0.6", ...]`` to ``{"sink": 0.6}`` (``--threshold`` of heads and sweep)."""
    out = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        try:
            out[name.strip().replace("-", "_")] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise BindscopeError(f"--threshold {pair!r}: expected CLASS=VALUE, e.g. sink=0.6")
    return out


def _head_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--threshold",
        action="append",
        metavar="CLASS=VALUE",
        help="classification threshold, repeatable: sink, previous_token, induction, "
        "duplicate_token, binding (defaults: bindscope.metrics.heads.THRESHOLDS)",
    )
    p.add_argument("--n-repeated", type=int, default=32, help="repeated random sequences")
    p.add_argument("--repeat-length", type=int, default=24, help="random tokens per copy")
    p.add_argument("--top-k", type=int, default=4, help="binding top-k compared with classes")


def cmd_heads(args) -> int:
    from bindscope.experiments import heads

    model = _load(args.model, args.revision, args)
    summary = heads.run(
        model,
        prompts=args.prompts,
        out=args.out,
        n_repeated=args.n_repeated,
        repeat_length=args.repeat_length,
        thresholds=_thresholds(args.threshold),
        top_k=args.top_k,
        batch_size=args.batch_size,
        seed=args.seed,
        force=args.force,
        progress=not args.no_progress,
    )
    _print_summary(summary)
    print(f"records: {args.out / 'heads' / 'records.jsonl'}")
    return 0


def cmd_fewshot(args) -> int:
    from bindscope.experiments import fewshot

    sets = _preflight(args, "fewshot", prompts=args.prompts)
    fewshot.prefixes(args.exemplars)  # a bad exemplars file fails here, before the model
    model = _load(args.model, args.revision, args)
    summary = fewshot.run(
        model,
        prompts=sets["prompts"],
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

    sets = _preflight(args, "controls", controls=args.controls, real=args.real)
    model = _load(args.model, args.revision, args)
    summary = controls.run(
        model,
        controls=sets["controls"],
        real=sets["real"],
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


def _scan_options(p) -> None:
    """Options of the per-head scans (``scan``, ``patch``)."""
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
    from bindscope.results.lock import check_writable

    if args.out is not None:
        check_writable(args.out)
    report = make_figures(args.results, args.out)
    for line in report.lines():
        print(line)
    return 0


def cmd_report(args) -> int:
    from bindscope.figures import write_report
    from bindscope.results.lock import check_writable

    if args.out is not None:
        if args.out.is_dir():
            raise BindscopeError(f"--out {args.out} is a folder; pass the report's file path")
        check_writable(args.out.parent)
    path = write_report(args.results, args.out)
    print(f"report: {path}")
    return 0


def cmd_demo(args) -> int:
    from bindscope import demo
    from bindscope.results.lock import check_writable

    check_writable(args.out)
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
    p.add_argument("--k", type=_positive, default=4, help="heads per ablated set")
    p.add_argument("--n-random", type=_count, default=50, help="number of random k-head sets")
    p.add_argument("--ablation", choices=("zero", "mean"), default="zero")
    p.add_argument("--matched-layers", action="store_true", help="random sets in top's layers")
    p.add_argument(
        "--matched-classes",
        action="store_true",
        help="random sets with the top set's head classes (sink, previous-token, ...)",
    )
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
    p.add_argument(
        "--heads", action="store_true", help="also the head taxonomy per revision (OUT/heads)"
    )
    _head_options(p)
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("heads", help="head taxonomy: sink, previous-token, induction, binding")
    _common(p)
    p.add_argument("--prompts", default="canonical")
    _head_options(p)
    p.set_defaults(func=cmd_heads)

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
    _scan_options(p)
    p.set_defaults(func=cmd_scan)

    p = sub.add_parser("patch", help="patch each head from clean into corrupted runs")
    _common(p)
    p.add_argument("--pairs", default="pairs", help="'pairs' (built-in) or a pair file")
    _scan_options(p)
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
    try:
        args = parser().parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a bad option (2), already printed
        return exc.code if isinstance(exc.code, int) else 2
    import warnings

    from bindscope.errors import BindscopeWarning

    def show(message, category, *rest, **kw):
        if issubclass(category, BindscopeWarning):
            print(f"bindscope {args.command}: warning: {message}", file=sys.stderr)
        else:
            default_show(message, category, *rest, **kw)

    default_show = warnings.showwarning
    warnings.showwarning = show
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
    finally:
        warnings.showwarning = default_show


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["main", "parser"]

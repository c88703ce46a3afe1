"""The ``bindscope`` command line.

One subcommand per experiment, plus audit, summaries, figures, the report and the demo. Run
``bindscope <command> --help`` for the options.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bindscope.errors import BindscopeError

if TYPE_CHECKING:
    from bindscope.protocols import LanguageModel


def _load(spec: str | None, revision: str | None, args: argparse.Namespace) -> LanguageModel:
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
        remote=remote_option(args),
        prepend_bos=getattr(args, "prepend_bos", None),
    )


def remote_option(args: argparse.Namespace) -> bool | str:
    """``--remote`` as ``load_model``'s ``remote``: True (NDIF), ``"local"`` or False."""
    value = getattr(args, "remote", None)
    if value == "local":
        return "local"
    return value == "ndif"


def _preflight(args, experiment: str | None = None, *, check_terms: bool = True, **files):
    """Check options, prompt files and the output folder before any model loads.

    A typo then costs no model load. Returns the loaded prompt sets by keyword.
    """
    from bindscope.loading import check_device, check_dtype
    from bindscope.prompts import load
    from bindscope.results.lock import INFO_NAME, LOCK_NAME, FolderLock

    if remote_option(args) is not True:  # NDIF chooses its own dtype and device
        check_dtype(getattr(args, "dtype", None))
        check_device(getattr(args, "device", None))
    sets = {
        name: load(spec, check_terms=check_terms)
        for name, spec in files.items()
        if spec is not None
    }
    if experiment is not None:  # writable and not in use; a folder made here is removed
        folder = args.out / experiment
        made = [p for p in (folder, *folder.parents) if not p.exists()]  # deepest first
        FolderLock(folder).acquire().release()
        for path in made:
            for name in (LOCK_NAME, INFO_NAME):
                (path / name).unlink(missing_ok=True)
            path.rmdir()
    return sets


def _print_summary(summary: dict) -> None:
    from bindscope.experiments.text import summary_lines

    for line in summary_lines(summary):
        print(line)


@dataclass(frozen=True)
class _Experiment:
    """How one experiment subcommand runs: checks, models, the run's options, what it prints.

    Every one checks its inputs first (options, prompt files, the output folder), then loads
    its model(s), runs ``bindscope.experiments.<module>.run`` and prints the summary.
    """

    module: str
    options: Callable[[argparse.Namespace, dict], dict]  # run's own keywords (args, prompt sets)
    folder: str | None = None  # preflight OUT/<folder> and the prompt options in ``files``
    files: tuple[str, ...] = ()
    check_terms: Callable[[argparse.Namespace], bool] = lambda args: True
    several: bool = False  # --model is repeatable and run takes a list of models
    load: bool = True  # False: run takes the --model value, required (sweep loads revisions)
    check: Callable[[argparse.Namespace], object] | None = None  # more checks before loading
    records: bool = False  # print the records path after the summary
    after: Callable[[argparse.Namespace], None] | None = None


def _run_experiment(experiment: _Experiment, args: argparse.Namespace) -> int:
    """Run one experiment subcommand as its table row says."""
    import importlib

    module = importlib.import_module(f"bindscope.experiments.{experiment.module}")
    if experiment.several and args.revision and len(args.model or [None]) > 1:
        raise BindscopeError("--revision applies to one model; use --model id@revision instead")
    if not experiment.load and not args.model:
        raise BindscopeError(f"{args.command} needs --model (a Hub id with training checkpoints)")
    if experiment.check is not None:  # options and files, before the folder is touched
        experiment.check(args)
    sets = {}
    if experiment.folder is not None:
        files = {name: getattr(args, name) for name in experiment.files}
        sets = _preflight(
            args, experiment.folder, check_terms=experiment.check_terms(args), **files
        )
    options = experiment.options(args, sets)
    if not experiment.load:
        models: object = args.model
    elif experiment.several:
        models = [_load(spec, args.revision, args) for spec in args.model or [None]]
    else:
        models = _load(args.model, args.revision, args)
    summary = module.run(
        models,
        out=args.out,
        batch_size=args.batch_size,
        seed=args.seed,
        force=args.force,
        progress=not args.no_progress,
        **options,
    )
    _print_summary(summary)
    if experiment.records:
        print(f"records: {args.out / module.EXPERIMENT / 'records.jsonl'}")
    if experiment.after is not None:
        experiment.after(args)
    print(
        f"figures: `bindscope figures {args.out}` draws them from the records; "
        f"`bindscope report {args.out}` writes the report"
    )
    return 0


def _sweep_options(args: argparse.Namespace, sets: dict) -> dict:
    from bindscope.experiments.sweep import resolve_revisions

    return {
        "revisions": resolve_revisions(args.revisions),
        "prompts": sets["prompts"],
        "dtype": args.dtype,
        "device": args.device,
        "remote": remote_option(args),
        "prepend_bos": args.prepend_bos,
        "heads": args.heads,
        "generation_batch_size": args.generation_batch_size,
        "head_options": {
            **_given(args, "n_repeated", "repeat_length", "top_k"),
            "thresholds": _thresholds(args.threshold),
        },
    }


def _print_heads_summary(args: argparse.Namespace) -> None:
    if args.heads:
        from bindscope.experiments import heads

        _print_summary(heads.summarize(args.out / "heads"))


def _check_exemplars(args: argparse.Namespace) -> None:
    from bindscope.experiments import fewshot

    fewshot.prefixes(args.exemplars)  # a bad exemplars file fails here, before the model


def _check_scan(args: argparse.Namespace) -> None:
    """Scan options checked before the model loads.

    An option that applies only in another mode is refused; the prompt file is read and the
    summary's resampling sized.
    """
    from bindscope.experiments import head_stats, scan
    from bindscope.experiments.scan_attribution import check_options
    from bindscope.prompts import load

    check_options(args.method, args.verify, args.unit)
    if args.matched_classes and args.unit != "head":
        raise BindscopeError("--matched-classes compares heads: it needs --unit head")
    if args.k is not None and not args.matched_classes:
        raise BindscopeError(
            f"--k {args.k}: --k applies only with --matched-classes (it sizes the EB* top set "
            "compared with class-matched head sets); leave it out or add --matched-classes N"
        )
    if args.spread and args.limit is None:
        raise BindscopeError("--spread spreads --limit N prompts over the terms: add --limit N")
    items = scan.scannable(load(args.prompts))[: args.limit]
    head_stats.check_resamples(args.n_resamples, len(items))


def _check_patch(args: argparse.Namespace) -> None:
    """The pair file is read (and the resampling sized) before the model loads."""
    from bindscope.experiments import head_stats, patching

    pairs, _, _ = patching.load_pairs(args.pairs)
    head_stats.check_resamples(args.n_resamples, len(pairs[: args.limit]))


def _check_heads(args: argparse.Namespace) -> None:
    from bindscope.experiments import heads

    heads.check_options(
        args.n_repeated, args.repeat_length, _thresholds(args.threshold), args.top_k
    )
    if args.command == "heads":
        from bindscope.prompts import load

        load(args.prompts)


def _given(args: argparse.Namespace, *names: str) -> dict:
    """The named options as ``run`` keywords (same names)."""
    return {name: getattr(args, name) for name in names}


_SCAN = ("unit", "correction", "limit", "n_resamples")
EXPERIMENTS = {
    "binding": _Experiment(
        "binding_run",
        lambda args, sets: {"prompts": sets["prompts"], "on_missing": args.on_missing},
        folder="binding",
        files=("prompts",),
        # --on-missing skip: a term absent from its template is skipped with the reason
        check_terms=lambda args: args.on_missing == "error",
        records=True,
    ),
    "c5": _Experiment(
        "c5",
        lambda args, sets: {
            "prompts": sets["prompts"],
            "ranking": sets.get("ranking"),
            **_given(args, "k", "n_random", "ablation", "matched_layers", "matched_classes"),
            "generation_batch_size": args.generation_batch_size,
        },
        folder="c5",
        files=("prompts", "ranking"),
        several=True,
    ),
    "sweep": _Experiment(
        "sweep",
        _sweep_options,
        folder="sweep",
        files=("prompts",),
        load=False,
        check=_check_heads,
        after=_print_heads_summary,
    ),
    "heads": _Experiment(
        "heads",
        lambda args, sets: {
            **_given(args, "prompts", "n_repeated", "repeat_length", "top_k"),
            "thresholds": _thresholds(args.threshold),
        },
        records=True,
        check=_check_heads,
    ),
    "fewshot": _Experiment(
        "fewshot",
        lambda args, sets: {"prompts": sets["prompts"], "exemplars": args.exemplars},
        folder="fewshot",
        files=("prompts",),
        check=_check_exemplars,
    ),
    "controls": _Experiment(
        "controls",
        lambda args, sets: {"controls": sets["controls"], "real": sets["real"]},
        folder="controls",
        files=("controls", "real"),
    ),
    "scan": _Experiment(
        "scan",
        lambda args, sets: _given(
            args,
            "prompts",
            "ablation",
            "matched_classes",
            "k",
            "spread",
            "method",
            "verify",
            *_SCAN,
        ),
        several=True,
        check=_check_scan,
    ),
    "patch": _Experiment(
        "patching", lambda args, sets: _given(args, "pairs", *_SCAN), check=_check_patch
    ),
}


def _command(name: str) -> Callable[[argparse.Namespace], int]:
    """The ``cmd_<name>`` function argparse calls for an experiment subcommand."""

    def command(args: argparse.Namespace) -> int:
        return _run_experiment(EXPERIMENTS[name], args)

    command.__name__ = command.__qualname__ = f"cmd_{name}"
    return command


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


def _thresholds(pairs: list[str] | None) -> dict[str, float]:
    """``["sink=0.6", ...]`` to ``{"sink": 0.6}`` (``--threshold`` of heads and sweep)."""
    from bindscope.metrics.heads import PRECEDENCE

    out = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        try:
            out[name.strip().replace("-", "_")] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise BindscopeError(f"--threshold {pair!r}: expected CLASS=VALUE, e.g. sink=0.6")
        if name.strip().replace("-", "_") not in PRECEDENCE:
            raise BindscopeError(
                f"--threshold {pair}: no head class {name.strip()!r}; the classes are "
                f"{', '.join(PRECEDENCE)}"
            )
    return out


def cmd_summarize(args) -> int:
    from bindscope.experiments import summarize

    for name, summary in summarize(args.results).items():
        print(f"{name}: {args.results / name / 'summary.json'}")
        _print_summary(summary)
    return 0


def cmd_figures(args) -> int:
    from bindscope.experiments import experiment_folders
    from bindscope.figures import make_figures
    from bindscope.results.lock import check_writable

    experiment_folders(args.results)  # no results: refused, as summarize does
    if args.out is not None:
        check_writable(args.out)
    report = make_figures(args.results, args.out)
    for line in report.lines():
        print(line)
    return 0


def cmd_report(args) -> int:
    from bindscope.experiments import experiment_folders
    from bindscope.figures import write_report
    from bindscope.results.lock import check_writable

    experiment_folders(args.results)  # no results: refused, as summarize does
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
    models = [None if m == "default" else m for m in args.model] if args.model else None
    demo.run(
        out=args.out,
        quick=args.quick,
        force=args.force,
        progress=not args.no_progress,
        models=models,
    )
    return 0


def parser() -> argparse.ArgumentParser:
    """The ``bindscope`` argument parser, one subparser per command."""
    from bindscope.cli.arguments import build

    others = {"audit": cmd_audit, "summarize": cmd_summarize, "figures": cmd_figures}
    others |= {"report": cmd_report, "demo": cmd_demo}
    return build({**{name: _command(name) for name in EXPERIMENTS}, **others})


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 with a one-line message on bad input)."""
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

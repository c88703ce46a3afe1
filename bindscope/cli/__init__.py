"""The ``bindscope`` command line."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import bindscope
from bindscope.cli.arguments import build
from bindscope.cli.ndif import cmd_ndif
from bindscope.errors import BindscopeError, BindscopeWarning, HeadSpecError
from bindscope.experiments.kit import registry
from bindscope.experiments.kit.experiment import Common, Experiment
from bindscope.experiments.kit.options import Options, apply_preset
from bindscope.loading import check_device, check_dtype
from bindscope.prompts import load
from bindscope.prompts.audit import audit, format_audit, write_audit
from bindscope.protocols import LanguageModel
from bindscope.remote import transport
from bindscope.results.lock import INFO_NAME, LOCK_NAME, FolderLock, check_writable
from bindscope.results.settings import check_resumable


def _load(spec: str | None, revision: str | None, args: argparse.Namespace) -> LanguageModel:
    """``--model`` value to a Model: ``default``/None, a Hub id or folder, ``id@revision``."""
    if spec and "@" in spec and revision is None and not Path(spec).exists():
        spec, revision = spec.rsplit("@", 1)
    name = None if spec in (None, "default") else spec
    return bindscope.load_model(  # the public entry, which a caller may stand in for
        name,
        revision=revision,
        dtype=args.dtype,
        device=args.device,
        remote=_remote(args),
        prepend_bos=getattr(args, "prepend_bos", None),
    )


def _remote(args: argparse.Namespace) -> bool | str:
    value = getattr(args, "remote", None)
    return "local" if value == "local" else value == "ndif"


def _check_compute(args: argparse.Namespace) -> None:
    if _remote(args) is not True:
        check_dtype(getattr(args, "dtype", None))
        check_device(getattr(args, "device", None))


def _print_summary(summary: dict) -> None:
    for line in registry.summary_lines(summary):
        print(line)


def _options(definition: Experiment, args: argparse.Namespace) -> Options:
    # everything here runs before any model loads, so a typo costs no model load
    given: dict[str, Any] = {}
    defaults: dict[str, Any] = {}
    for name, flag, default in definition.options.flags():
        value = getattr(args, name)
        given[name] = flag.convert(value) if flag.convert is not None else value
        defaults[name] = default
    preset = getattr(args, "preset", None)
    if preset is not None:
        given = apply_preset(preset, definition.presets[preset], given, defaults)
    options = definition.options.of(given)  # the settings check
    check_terms = definition.check_terms(options)
    sets = {
        name: load(getattr(options, name), check_terms=check_terms)
        for name, flag, _default in definition.options.flags()
        if flag.prompts and isinstance(getattr(options, name), (str, Path))
    }
    return dataclasses.replace(options, **sets)


def _model_specs(definition: Experiment, args: argparse.Namespace) -> list[str | None]:
    if args.model:
        return list(args.model)
    preset = getattr(args, "preset", None)
    if preset is not None and definition.presets[preset].models:
        return list(definition.presets[preset].models)
    return [None]


def _check_folder(folder: Path) -> None:
    made = [p for p in (folder, *folder.parents) if not p.exists()]  # deepest first
    FolderLock(folder).acquire().release()
    for path in made:
        for name in (LOCK_NAME, INFO_NAME):
            (path / name).unlink(missing_ok=True)
        path.rmdir()


def _check_resume(definition: Experiment, options: Options, args: argparse.Namespace) -> None:
    # planned without models, for its settings; the run checks again with the models' dtype and BOS
    if args.force:
        return
    common = Common(args.out, args.batch_size, args.seed, args.force, progress=False)
    planned = definition.plan([], options, common)
    check_resumable(args.out / definition.name, planned.settings)


@contextlib.contextmanager
def _writable(folder: Path | None) -> Iterator[None]:
    if folder is None:
        yield
        return
    made = [p for p in (folder, *folder.parents) if not p.exists()]  # deepest first
    check_writable(folder)
    try:
        yield
    except BindscopeError:  # refused: leave no empty folder behind
        for path in made:
            if path.is_dir() and not any(path.iterdir()):
                path.rmdir()
        raise


def _run_experiment(definition: Experiment, args: argparse.Namespace) -> int:
    if definition.models == "several" and args.revision and len(args.model or [None]) > 1:
        raise BindscopeError("--revision applies to one model; use --model id@revision instead")
    if definition.models == "revisions" and not args.model:
        raise BindscopeError(f"{args.command} needs --model (a Hub id with training checkpoints)")
    _check_compute(args)
    options = _options(definition, args)
    _check_folder(args.out / definition.name)
    _check_resume(definition, options, args)
    keywords = options.keywords()
    models: object  # what run takes: one model, a list, or the --model id (revisions)
    if definition.models == "revisions":  # each revision loads as --model would
        keywords["loader"] = lambda name, revision=None, **_: _load(name, revision, args)
        models = args.model
    elif definition.models == "several":
        models = [_load(spec, args.revision, args) for spec in _model_specs(definition, args)]
    else:
        models = _load(args.model, args.revision, args)
    summary = definition.run(
        models,
        out=args.out,
        batch_size=args.batch_size,
        seed=args.seed,
        force=args.force,
        progress=not args.no_progress,
        **keywords,
    )
    _print_summary(summary)
    if definition.show_records:
        print(f"records: {args.out / definition.name / 'records.jsonl'}")
    for name in definition.also(options):
        _print_summary(registry.definitions()[name].summarize(args.out / name))
    print(
        f"figures: `bindscope figures {args.out}` draws them from the records; "
        f"`bindscope report {args.out}` writes the report"
    )
    return 0


def _command(definition: Experiment) -> Callable[[argparse.Namespace], int]:

    def command(args: argparse.Namespace) -> int:
        return _run_experiment(definition, args)

    command.__name__ = command.__qualname__ = f"cmd_{definition.command}"
    return command


def _file_folder(option: str, path: Path, what: str) -> Path:
    if path.is_dir():
        raise BindscopeError(f"{option} {path} is a folder; pass {what} path")
    return path.parent


def cmd_audit(args: argparse.Namespace) -> int:
    """``bindscope audit``: each prompt's term span under a model's tokenizer."""
    _check_compute(args)
    records = load(args.prompts)
    where = _file_folder("--write", args.write, "the audit file's") if args.write else None
    with _writable(where):  # a path that cannot be written is refused before the load
        model = _load(args.model, args.revision, args)
        rows = audit(model, records)
    for line in format_audit(rows):
        print(line)
    written = f"; written to {write_audit(rows, args.write)}" if args.write else ""
    bad = [r for r in rows if {"not_found", "single_token", "too_long"} & set(r["flags"])]
    print(
        f"{len(rows)} prompts, {len(bad)} without a 2+ token span or too long for the "
        f"context window{written}"
    )
    return 1 if bad and args.strict else 0


def cmd_summarize(args: argparse.Namespace) -> int:
    """``bindscope summarize``: rebuild every summary from its records."""
    for name, summary in registry.summarize(args.results).items():
        print(f"{name}: {args.results / name / 'summary.json'}")
        _print_summary(summary)
    return 0


def cmd_figures(args: argparse.Namespace) -> int:
    """``bindscope figures``: PNG and PDF figures of a results folder."""
    from bindscope.figures import make_figures  # matplotlib: only the commands that draw

    registry.check_folders(args.results)  # refused as summarize refuses it
    if args.out is not None:
        check_writable(args.out)
    report = make_figures(args.results, args.out)
    for line in report.lines():
        print(line)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """``bindscope report``: the Markdown report of a results folder."""
    from bindscope.figures import write_report  # matplotlib: only the commands that draw

    registry.check_folders(args.results)  # refused as summarize refuses it
    if args.out is not None:
        check_writable(_file_folder("--out", args.out, "the report's file"))
    path = write_report(args.results, args.out)
    print(f"report: {path}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """``bindscope demo``: the full study on the embedded models (or ``--model``)."""
    from bindscope import demo  # draws figures: matplotlib only for the commands that draw

    models = [None if m == "default" else m for m in args.model] if args.model else None
    with _writable(args.out):
        demo.run(
            out=args.out,
            quick=args.quick,
            force=args.force,
            progress=not args.no_progress,
            models=models,
        )
    return 0


def _heads(value: str) -> list[tuple[int, int]]:
    try:
        return [(int(a), int(b)) for a, b in (h.split(".") for h in value.split(","))]
    except ValueError:
        raise HeadSpecError(
            f"--ablate {value!r}: give heads as layer.head separated by commas, e.g. 9.3,10.1"
        ) from None


def cmd_view(args: argparse.Namespace) -> int:
    """``bindscope view``: one self-contained HTML page (docs/viewer.md)."""
    from bindscope.interventions import Zero  # loaded only by the command that runs them

    _check_compute(args)
    check_writable(_file_folder("--out", args.out, "the HTML file's"))
    intervene = Zero(_heads(args.ablate)) if args.ablate else None
    model = _load(args.model, args.revision, args) if args.model or args.text else None
    page = bindscope.view(
        model, args.text, results=args.results, intervene=intervene, prompt=args.prompt,
        prompts=args.prompts, top_k=args.top_k,
    )  # fmt: skip
    path = page.save(args.out)
    print(f"view: {path} ({path.stat().st_size / 1e6:.2f} MB)")
    return 0


def parser() -> argparse.ArgumentParser:
    """The ``bindscope`` argument parser, one subparser per command."""
    others = {"audit": cmd_audit, "summarize": cmd_summarize, "figures": cmd_figures}
    others |= {"report": cmd_report, "demo": cmd_demo}
    others |= {"ndif": cmd_ndif, "view": cmd_view}
    return build(registry.definitions().values(), _command, others)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 with a one-line message on bad input)."""
    try:
        args = parser().parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a bad option (2), already printed
        return exc.code if isinstance(exc.code, int) else 2

    def show(message: Warning | str, category: type[Warning], *rest: Any, **kw: Any) -> None:
        if issubclass(category, BindscopeWarning):
            print(f"bindscope {args.command}: warning: {message}", file=sys.stderr)
        else:
            default_show(message, category, *rest, **kw)

    default_show = warnings.showwarning
    warnings.showwarning = show
    try:
        # --no-progress: no job-status lines from NDIF either
        with transport.job_status(not getattr(args, "no_progress", False)):
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

"""What the ``bindscope`` command line accepts: its subcommands, options and option types."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from bindscope.cli.ndif import add_parser as add_ndif
from bindscope.experiments.kit.experiment import Experiment
from bindscope.experiments.kit.options import positive, spelled
from bindscope.loading import EMBEDDED
from bindscope.loading.weights import DTYPES

#: The commands that read a results folder: their help and where their --out defaults to.
READERS = {
    "summarize": ("recompute summary.json files from records", None),
    "figures": ("PNG and PDF figures from a results folder", "RESULTS/figures"),
    "report": ("Markdown report (tables + figures) for a results folder", "RESULTS/report.md"),
}


def _add_common(
    p: argparse.ArgumentParser, *, several: bool = False, revision: bool = True, runs: bool = True
) -> None:
    """Add the shared options a subcommand honours (``runs=False``: nothing written or computed)."""
    _add_model(p, several=several, revision=revision)
    _add_loading(p)
    if runs:
        p.add_argument("--out", required=True, type=Path, help="results folder")
        p.add_argument("--force", action="store_true", help="discard finished records, redo")
        _add_compute(p)


def _add_model(p: argparse.ArgumentParser, *, several: bool, revision: bool) -> None:
    p.add_argument(
        "--model",
        action="append" if several else "store",
        help="Hub id, local folder, or an embedded model (offline): 'default' or "
        + ", ".join(EMBEDDED)
        + "; id@revision also works"
        + ("; repeat for several models (Holm across them)" if several else ""),
    )
    if revision:
        p.add_argument(
            "--revision",
            help="Hub revision, e.g. step120000; for a local folder, its subfolder REVISION",
        )


def _add_loading(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dtype",
        choices=DTYPES,
        help="weights dtype (default float32; float64 gives float64 probabilities and logits)",
    )
    p.add_argument("--device", help="cpu (default), cuda, cuda:1, mps")
    p.add_argument(
        "--remote",
        nargs="?",
        const="ndif",
        choices=("ndif", "local"),
        help="run every trace on NDIF (--remote) or through its local simulation "
        "(--remote local: the weights load here); default: plain local runs. docs/remote.md",
    )
    p.add_argument(
        "--prepend-bos",
        action=argparse.BooleanOptionalAction,
        help="put the BOS token before every text (default: the tokenizer's own rule; spans "
        "starting at position 0, the attention sink, are then left out of EB* and counted)",
    )


def _add_experiment(
    sub: Any, definition: Experiment, command: Callable[[argparse.Namespace], int]
) -> None:
    p = sub.add_parser(definition.command, help=definition.help)
    several, revisions = definition.models == "several", definition.models == "revisions"
    _add_common(p, several=several, revision=not revisions)
    for name, flag, default in definition.options.flags():
        written = spelled(name, flag)
        text = flag.help
        if default not in (None, False, ()) and "default" not in text:
            text += " (default %(default)s)"
        given: dict[str, Any] = {"dest": name, "help": text}
        if flag.switch:
            given["action"] = "store_true"
        elif flag.repeat:
            given.update(action="append", metavar=flag.metavar, type=flag.type)
        else:
            given.update(type=flag.type, choices=flag.choices, metavar=flag.metavar)
            given.update(default=default, required=flag.required)
        p.add_argument(written, **given)
    if definition.presets:
        p.add_argument(
            "--preset",
            choices=sorted(definition.presets),
            help="a named design; flags left at their defaults take its values: "
            + "; ".join(f"{name}: {preset.help}" for name, preset in definition.presets.items()),
        )
    p.set_defaults(batch_size=definition.batch_size, func=command)


def build(
    experiments: Iterable[Experiment],
    run: Callable[[Experiment], Callable[[argparse.Namespace], int]],
    commands: Mapping[str, Callable[[argparse.Namespace], int]],
) -> argparse.ArgumentParser:
    """The parser: ``run(definition)`` runs an experiment, ``commands[name]`` each other command."""
    top = argparse.ArgumentParser(
        prog="bindscope", description="Attention-head binding (EB*) and head ablation studies."
    )
    sub = top.add_subparsers(dest="command", required=True)
    for definition in experiments:
        _add_experiment(sub, definition, run(definition))

    _add_audit(sub, commands["audit"])
    for name, (said, out) in READERS.items():
        p = sub.add_parser(name, help=said)
        p.add_argument("results", type=Path, help="the --out folder of one or more experiment runs")
        if out is not None:
            p.add_argument("--out", type=Path, help=f"default: {out}")
        p.set_defaults(func=commands[name])
    _add_demo(sub, commands["demo"])
    _add_view(sub, commands["view"])
    add_ndif(sub, commands["ndif"])
    return top


def _add_compute(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--batch-size",
        type=positive,
        default=16,
        help="texts per forward pass; results equal to rounding (default %(default)s)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of bootstrap CIs, permutation tests and random draws (default %(default)s)",
    )
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")


def _add_audit(sub: Any, command: Callable[[argparse.Namespace], int]) -> None:
    p = sub.add_parser("audit", help="each prompt's term span under a model's tokenizer")
    _add_common(p, runs=False)
    p.add_argument(
        "--prompts",
        default="canonical",
        help="prompt set: canonical, controls or a .jsonl path (default %(default)s)",
    )
    p.add_argument(
        "--write",
        type=Path,
        help="also write the audit rows to this JSON Lines path (default: write no file)",
    )
    p.add_argument("--strict", action="store_true", help="exit 1 if any span is missing/short")
    p.set_defaults(func=command)


def _add_demo(sub: Any, command: Callable[[argparse.Namespace], int]) -> None:
    p = sub.add_parser(
        "demo", help="the full study on the embedded models (SmolLM2, Gemma 3, Qwen2.5-Coder; CPU)"
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("bindscope-demo"),
        help="results folder (default %(default)s)",
    )
    p.add_argument(
        "--model",
        action="append",
        help="run only these (repeatable): default (SmolLM2-135M-Instruct), gemma-3-270m, "
        "qwen2.5-coder-0.5b, or any id or folder (default: all three)",
    )
    p.add_argument("--quick", action="store_true", help="a few terms only, for a smoke test")
    p.add_argument("--force", action="store_true", help="discard finished records, redo")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.set_defaults(func=command)


def _add_view(sub: Any, command: Callable[[argparse.Namespace], int]) -> None:
    p = sub.add_parser("view", help="one offline HTML page: patterns, head maps, circuit, lens")
    folders = "result folders: OUT or OUT/<experiment> (binding, c5, scan, patching, circuit)"
    p.add_argument("results", nargs="*", type=Path, help=folders)
    _add_common(p, runs=False)
    p.add_argument("--text", help="text whose attention is shown (default: the binding prompt)")
    p.add_argument("--prompt", help="binding record to show, term/prompt_id (default: first)")
    p.add_argument(
        "--prompts",
        help="the prompt file the binding run used (built-in sets reload by their name)",
    )
    p.add_argument(
        "--ablate",
        help="heads zero-ablated in a second run shown beside the clean one, e.g. 9.3,10.1 "
        "(layer.head)",
    )
    p.add_argument(
        "--top-k", type=positive, default=8, help="next tokens listed per run (default %(default)s)"
    )
    p.add_argument(
        "--out", type=Path, default=Path("bindscope-view.html"), help="page (default %(default)s)"
    )
    p.set_defaults(func=command)


__all__ = ["build"]

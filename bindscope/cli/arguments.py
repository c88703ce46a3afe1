"""What the ``bindscope`` command line accepts: its subcommands, options and option types."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from pathlib import Path


def positive(text: str) -> int:
    """Argparse type: an integer >= 1."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer (1 or more)")
    return value


def count(text: str) -> int:
    """Argparse type: an integer >= 0."""
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; pass 0 or more")
    return value


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


#: Rows per generation batch by default; ``bindscope.batch.GENERATION_BATCH_SIZE`` (a test
#: holds the two equal), written out so that ``bindscope --help`` imports no torch.
GENERATION_ROWS = 64


#: What ``RESULTS`` is, for summarize, figures and report.
RESULTS_HELP = "the --out folder of one or more experiment runs"


def add_prompts(p: argparse.ArgumentParser) -> None:
    """``--prompts``: the prompt set a subcommand runs on."""
    p.add_argument(
        "--prompts",
        default="canonical",
        help="prompt set: canonical, controls or a .jsonl path (default %(default)s)",
    )


def add_generation_batch(p: argparse.ArgumentParser) -> None:
    """``--generation-batch-size``, for subcommands that generate besides other passes."""
    p.add_argument(
        "--generation-batch-size",
        type=positive,
        default=GENERATION_ROWS,
        help=f"rows per greedy-generation batch (default {GENERATION_ROWS}: a decoding step "
        "costs little more for more rows)",
    )


def add_common(
    p: argparse.ArgumentParser,
    *,
    out: bool = True,
    several: bool = False,
    revision: bool = True,
    compute: bool = True,
) -> None:
    """Add the options subcommands share.

    Each subcommand gets only those it honours: ``revision=False`` where revisions come otherwise
    (sweep), ``compute=False`` where nothing is batched or resampled (audit only tokenizes).
    """
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
        help="weights dtype (default float32; float64 gives float64 probabilities and logits)",
    )
    p.add_argument("--device", default=None, help="cpu (default), cuda, cuda:1, mps")
    p.add_argument(
        "--remote",
        nargs="?",
        const="ndif",
        default=None,
        choices=("ndif", "local"),
        help="run every trace on NDIF (--remote) or through its local simulation "
        "(--remote local: the weights load here); default: plain local runs. docs/remote.md",
    )
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


def add_head_options(p: argparse.ArgumentParser) -> None:
    """Options of the head taxonomy (``heads``, ``sweep --heads``)."""
    p.add_argument(
        "--threshold",
        action="append",
        metavar="CLASS=VALUE",
        help="classification threshold, repeatable: sink, previous_token, induction, "
        "duplicate_token, binding (defaults: bindscope.metrics.heads.THRESHOLDS)",
    )
    p.add_argument(
        "--n-repeated", type=positive, default=32, help="repeated random sequences (default 32)"
    )
    p.add_argument(
        "--repeat-length", type=positive, default=24, help="random tokens per copy (default 24)"
    )
    p.add_argument(
        "--top-k", type=positive, default=4, help="binding top-k compared with classes (default 4)"
    )


def add_scan_options(p, units: tuple[str, ...] = ("head", "layer")) -> None:
    """Options of the per-head scans (``scan``, ``patch``)."""
    p.add_argument(
        "--unit",
        choices=units,
        default="head",
        help="one condition per head, per layer (every head of it)"
        + (", or per layer and token position" if "position" in units else "")
        + " (default %(default)s)",
    )
    p.add_argument(
        "--correction",
        choices=("bh", "holm"),
        default="bh",
        help="multiple-comparison correction across heads: Benjamini-Hochberg or Holm "
        "(default %(default)s)",
    )
    p.add_argument(
        "--limit",
        type=positive,
        default=None,
        help="only N items (default: all): the first N scannable prompts (scan: recognition "
        "items and prompts with a target) or the first N pairs that fit the tokenizer (patch)",
    )
    p.add_argument(
        "--n-resamples",
        type=positive,
        default=None,
        help="bootstrap/permutation draws (default: enough for one head alone to pass the "
        "correction, 2 x heads / 0.05, and at least 9999)",
    )


def build(commands: Mapping[str, Callable[[argparse.Namespace], int]]) -> argparse.ArgumentParser:
    """The ``bindscope`` argument parser; ``commands[name]`` runs subcommand ``name``."""
    top = argparse.ArgumentParser(
        prog="bindscope", description="Attention-head binding (EB*) and head ablation studies."
    )
    sub = top.add_subparsers(dest="command", required=True)

    p = sub.add_parser("binding", help="EB* per prompt; records + summary")
    add_common(p)
    add_prompts(p)
    p.add_argument(
        "--on-missing",
        choices=("skip", "error"),
        default="skip",
        help="a term the tokenizer cannot place in its prompt: skip it with the reason, or stop "
        "(default %(default)s)",
    )
    p.set_defaults(func=commands["binding"])

    p = sub.add_parser("audit", help="each prompt's term span under a model's tokenizer")
    add_common(p, out=False, compute=False)
    add_prompts(p)
    p.add_argument("--write", type=Path, default=None, help="audit JSONL path")
    p.add_argument("--strict", action="store_true", help="exit 1 if any span is missing/short")
    p.set_defaults(func=commands["audit"])

    p = sub.add_parser("c5", help="causal head ablation: top/bottom/random k-head sets")
    add_common(p, several=True)
    add_prompts(p)
    p.add_argument("--ranking", default=None, help="prompt set that ranks heads (default: prompts)")
    p.add_argument(
        "--k", type=positive, default=4, help="heads per ablated set (default %(default)s)"
    )
    p.add_argument(
        "--n-random",
        type=count,
        default=50,
        help="number of random k-head sets (default %(default)s)",
    )
    p.add_argument(
        "--ablation",
        choices=("zero", "mean"),
        default="zero",
        help="zero the heads' outputs, or set them to their mean over the prompts "
        "(default %(default)s)",
    )
    p.add_argument("--matched-layers", action="store_true", help="random sets in top's layers")
    p.add_argument(
        "--matched-classes",
        action="store_true",
        help="random sets with the top set's head classes (sink, previous-token, ...)",
    )
    add_generation_batch(p)
    p.set_defaults(func=commands["c5"])

    p = sub.add_parser("sweep", help="EB* and behaviour across training checkpoints")
    add_common(p, revision=False)
    p.add_argument(
        "--revisions",
        required=True,
        help="comma-separated revisions in training order, or a preset: "
        "pythia-paper, olmo-1b, crfm, smollm3",
    )
    add_prompts(p)
    p.add_argument(
        "--heads", action="store_true", help="also the head taxonomy per revision (OUT/heads)"
    )
    add_head_options(p)
    add_generation_batch(p)
    p.set_defaults(func=commands["sweep"])

    p = sub.add_parser("heads", help="head taxonomy: sink, previous-token, induction, binding")
    add_common(p)
    add_prompts(p)
    add_head_options(p)
    p.set_defaults(func=commands["heads"])

    p = sub.add_parser("fewshot", help="C3: zero-shot vs exemplar vs paraphrase prefix")
    add_common(p)
    add_prompts(p)
    p.add_argument("--exemplars", default=None, help="exemplars JSON (default: the package's)")
    # every pass here is generation: --batch-size counts generation rows
    p.set_defaults(batch_size=GENERATION_ROWS)
    p.set_defaults(func=commands["fewshot"])

    p = sub.add_parser("controls", help="discriminant validity: real terms vs control groups")
    add_common(p)
    p.add_argument(
        "--controls",
        default="controls",
        help="control groups' prompt set: a built-in name or a .jsonl path (default %(default)s)",
    )
    p.add_argument(
        "--real",
        default="canonical",
        help="real terms' prompt set: a built-in name or a .jsonl path (default %(default)s)",
    )
    p.set_defaults(func=commands["controls"])

    p = sub.add_parser("scan", help="ablate every head alone: effect map with CIs and BH p")
    add_common(p, several=True)
    add_prompts(p)
    p.add_argument(
        "--ablation",
        choices=("zero", "mean", "resample"),
        default="zero",
        help="zero each head's output, set it to its mean over the prompts, or take it from "
        "another prompt drawn with --seed (default %(default)s)",
    )
    p.add_argument(
        "--matched-classes",
        type=count,
        default=0,
        metavar="N",
        help="compare the EB* top-k heads' effect with N class-matched random head sets "
        "(default %(default)s: off)",
    )
    p.add_argument(
        "--k",
        type=positive,
        default=None,
        help="EB* top set size compared under --matched-classes (default 4; refused without it)",
    )
    p.add_argument(
        "--spread",
        action="store_true",
        help="with --limit N: take the N prompts in turn from each term (one per term, then a "
        "second, ...) instead of the first N in the file; refused without --limit",
    )
    p.add_argument(
        "--method",
        choices=("exact", "attribution"),
        default="exact",
        help="exact: ablate every head; attribution: estimate every head by attribution "
        "patching (AtP*), then scan the --verify top heads exactly (default %(default)s)",
    )
    p.add_argument(
        "--verify",
        type=positive,
        default=None,
        metavar="K",
        help="heads verified exactly under --method attribution (default 20)",
    )
    add_scan_options(p)
    p.set_defaults(func=commands["scan"])

    p = sub.add_parser("patch", help="patch each head from clean into corrupted runs")
    add_common(p)
    p.add_argument(
        "--pairs",
        default="pairs",
        help="'pairs' (built-in) or a pair file, docs/records.md (default %(default)s)",
    )
    add_scan_options(p, units=("head", "layer", "position"))
    p.set_defaults(func=commands["patch"])

    p = sub.add_parser("summarize", help="recompute summary.json files from records")
    p.add_argument("results", type=Path, help=RESULTS_HELP)
    p.set_defaults(func=commands["summarize"])

    p = sub.add_parser("figures", help="PNG and PDF figures from a results folder")
    p.add_argument("results", type=Path, help=RESULTS_HELP)
    p.add_argument("--out", type=Path, default=None, help="default: RESULTS/figures")
    p.set_defaults(func=commands["figures"])

    p = sub.add_parser("report", help="Markdown report (tables + figures) for a results folder")
    p.add_argument("results", type=Path, help=RESULTS_HELP)
    p.add_argument("--out", type=Path, default=None, help="default: RESULTS/report.md")
    p.set_defaults(func=commands["report"])

    p = sub.add_parser(
        "demo", help="the full study on both embedded models (SmolLM2, Gemma 3 270M; CPU)"
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
        "or any id or folder (default: both embedded models)",
    )
    p.add_argument("--quick", action="store_true", help="a few terms only, for a smoke test")
    p.add_argument("--force", action="store_true", help="discard finished records, redo")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.set_defaults(func=commands["demo"])
    return top


__all__ = ["add_common", "add_head_options", "add_scan_options", "build", "count", "positive"]

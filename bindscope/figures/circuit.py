"""Circuits: the top edges as a graph, and faithfulness against circuit size."""

from __future__ import annotations

import re
from collections.abc import Iterator

import numpy as np
from matplotlib.figure import Figure

from bindscope.figures import markdown as md
from bindscope.figures.section import Section
from bindscope.figures.style import new_figure, per_model, short_label
from bindscope.results.summaries import ExperimentResults, MissingData

TITLE = "Circuits: which edges between heads and MLPs carry the task"
#: Inches per figure kind; at DPI 150 each gives whole pixels.
SIZES = {"circuit_graph": (10.0, 6.0), "circuit_faithfulness": (6.0, 4.0)}
STYLE = {"q": "-", "k": "--", "v": ":", "": "-"}  # a receiver's input kind


def _place(node: str, n_layers: int) -> tuple[float, float, str]:
    """``(x, y, kind)`` of a node: x the layer (embed -1, logits L), y the head (MLP -1)."""
    if node == "embed":
        return -1.0, 0.0, ""
    if node == "logits":
        return float(n_layers), 0.0, ""
    found = re.fullmatch(r"([am])(\d+)(?:\.([hg])(\d+))?(?:<([qkv])>)?", node)
    if found is None:
        raise MissingData(f"node {node!r} is not a circuit node")
    block, layer, _, unit, kind = found.groups()
    y = -1.0 if block == "m" else float(unit)
    # an MLP sits after its layer's heads; a receiver's head is where its input goes in
    return float(layer) + (0.5 if block == "m" else 0.0), y, kind or ""


def graph_figure(label: str, entry: dict, *, where: str) -> tuple[Figure, str]:
    """The top edges, senders to receivers, width by |score|, colour by sign."""
    edges = entry.get("edges") or []
    if not edges:
        raise MissingData(f"{where}: no edges in the summary")
    n_layers = 1 + max(
        (int(m) for name, _ in edges for m in re.findall(r"[am](\d+)", name)), default=0
    )
    fig, ax = new_figure(SIZES["circuit_graph"])
    largest = max(abs(score) for _, score in edges) or 1.0
    for name, score in edges:
        sender, receiver = name.split("->")
        x0, y0, _ = _place(sender, n_layers)
        x1, y1, kind = _place(receiver, n_layers)
        colour = "tab:red" if score < 0 else "tab:blue"
        width = 0.5 + 4.0 * abs(score) / largest
        ax.plot([x0, x1], [y0, y1], STYLE[kind], color=colour, lw=width, alpha=0.7)
    nodes = {_place(n, n_layers)[:2] for name, _ in edges for n in name.split("->")}
    ax.scatter(*zip(*nodes), s=25, color="black", zorder=3)
    ax.set(
        xlabel="layer (embedding left, logits right; MLPs between layers)",
        ylabel="head (MLP at -1)",
        title=f"{short_label(label)}: top {len(edges)} edges",
    )
    caption = (
        f"{short_label(label)}: the {len(edges)} edges of largest mean |score| "
        f"({entry['settings']['method']}, {entry['settings']['task']}); line width by |score|, "
        "red where corrupting the edge lowers the metric, blue where it raises it; solid into "
        "a query or an MLP, dashed into a key, dotted into a value."
    )
    return fig, caption


def faithfulness_figure(label: str, entry: dict, *, where: str) -> tuple[Figure, str]:
    """Share of the metric kept against circuit size, with the random-edge null."""
    rows = entry.get("faithfulness") or []
    if not rows:
        raise MissingData(f"{where}: no faithfulness in the summary")
    columns = ("n_edges", "share", "low", "high")
    n, share, low, high = (np.array([r[key] for r in rows], float) for key in columns)
    fig, ax = new_figure(SIZES["circuit_faithfulness"])
    ax.errorbar(n, share, yerr=[share - low, high - share], fmt="o-", capsize=3, label="top n")
    null = [r["null_mean"] for r in rows]
    if all(v is not None for v in null):
        ax.plot(n, null, "s--", color="grey", label="random n edges")
    ax.axhline(1, color="black", lw=0.8)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set(xlabel="edges in the circuit", ylabel="share of the metric kept",
           title=short_label(label))  # fmt: skip
    ax.legend(frameon=False)
    caption = (
        f"{short_label(label)}: (circuit - corrupted) / (clean - corrupted) of the mean metric "
        "with every edge outside the circuit patched, 95% paired bootstrap CIs over pairs; "
        "grey: circuits of as many random edges."
    )
    return fig, caption


def plots(exp: ExperimentResults) -> Iterator[tuple[str, object]]:
    """The graph and the faithfulness curve of each model."""
    models = (exp.summary or {}).get("models", {})
    yield from per_model(models, exp.folder, "circuit_graph", graph_figure)
    yield from per_model(models, exp.folder, "circuit_faithfulness", faithfulness_figure)


def tables(exp: ExperimentResults) -> list[str]:
    """Faithfulness per circuit size, and the exact verification of the top edges."""
    lines = []
    for label, entry in (exp.summary or {}).get("models", {}).items():
        settings = entry["settings"]
        lines += [
            f"**{label}**: {settings['task']}, {settings['method']}, "
            f"{settings.get('selection', 'top')} circuits, {entry['n_pairs']} pairs; "
            f"mean metric {md.num(entry['clean'])} clean, {md.num(entry['corrupted'])} corrupted",
            "",
            *md.table(
                ["edges", "share kept [95% CI]", "random", "stability"],
                [_row(r) for r in entry["faithfulness"]],
            ),
        ]
        checked = entry.get("verify")
        if checked:
            lines += [
                f"Exact path patching of the top {len(checked['edges'])} edges: Spearman "
                f"{md.num(checked['spearman'])}, recall@{checked['k']} "
                f"{md.num(checked['recall_at_k'])}.",
                "",
            ]
    return lines


def _row(r: dict) -> list:
    share = f"{md.num(r['share'])} [{md.num(r['low'])}, {md.num(r['high'])}]"
    return [r["n_edges"], share, md.num(r["null_mean"]), md.num(r["stability"])]


SECTION = Section("circuit", TITLE, md.prose("circuit"), SIZES, plots, tables, order=9)

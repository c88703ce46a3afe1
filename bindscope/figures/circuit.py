"""Circuits: the top edges as a graph, and faithfulness against circuit size."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from bindscope.figures import markdown as md
from bindscope.figures import style
from bindscope.figures.sections import Section
from bindscope.results.summaries import ExperimentResults, MissingData

TITLE = "Circuits: which edges between heads and MLPs carry the task"
SIZES = {"circuit_graph": (12.0, 7.0), "circuit_faithfulness": (7.0, 4.4)}
STYLE: dict[str, Any] = {"q": "-", "k": "--", "v": ":", "": "-"}  # a receiver's input kind
INPUT = {"q": "into a query, an MLP or the logits", "k": "into a key", "v": "into a value"}
SIGN = {
    "lowers": (style.OKABE_ITO["vermillion"], "corrupting it lowers the metric"),
    "raises": (style.OKABE_ITO["blue"], "corrupting it raises the metric"),
}
#: Each node kind's marker, colour and legend name: shape and place tell them apart.
NODE = {
    "embed": ("s", style.OKABE_ITO["black"], "embedding"),
    "head": ("o", style.OKABE_ITO["green"], "attention head (its query receives)"),
    "group": ("^", style.OKABE_ITO["orange"], "key/value group (its key or value receives)"),
    "mlp": ("D", style.OKABE_ITO["purple"], "MLP"),
    "logits": ("p", style.OKABE_ITO["black"], "logits"),
}
HALF = 0.5  # under this share a circuit leaves most of the metric to the edges outside it


@dataclass(frozen=True)
class Node:
    """One node of the graph figure: its kind, layer, unit (head or group) and input kind."""

    kind: str
    layer: int
    unit: int = 0
    input: str = ""

    @property
    def label(self) -> str:
        """The name written beside the node."""
        return {
            "embed": "embed",
            "logits": "logits",
            "mlp": f"MLP{self.layer}",
            "head": f"L{self.layer}.H{self.unit}",
            "group": f"L{self.layer}.KV{self.unit}",
        }[self.kind]


def parse_node(node: str) -> Node:
    """A circuit node's name (``embed``, ``a2.h3<q>``, ``a2.g0<k>``, ``m1``, ``logits``)."""
    if node in ("embed", "logits"):
        return Node(node, -1)
    found = re.fullmatch(r"([am])(\d+)(?:\.([hg])(\d+))?(?:<([qkv])>)?", node)
    if found is None:
        raise MissingData(f"node {node!r} is not a circuit node")
    block, layer, unit_kind, unit, kind = found.groups()
    if block == "m":
        return Node("mlp", int(layer))
    return Node("group" if unit_kind == "g" else "head", int(layer), int(unit), kind or "")


@dataclass(frozen=True)
class Layout:
    """Where nodes sit: heads on top, key/value groups below, MLPs at the bottom, by layer."""

    n_layers: int
    n_heads: int
    n_groups: int

    def place(self, node: Node) -> tuple[float, float]:
        """``(x, y)``: x the layer (an MLP half a layer on), y the node's row."""
        middle = (self.n_groups + 1 + self.n_heads) / 2
        if node.kind in ("embed", "logits"):  # a column of its own, clear of the layers
            return (-1.5 if node.kind == "embed" else self.n_layers + 0.5), middle
        if node.kind == "mlp":
            return node.layer + 0.5, 0.0
        if node.kind == "group":
            return float(node.layer), 1.0 + node.unit
        return float(node.layer), self.n_groups + 1.5 + node.unit

    def columns(self) -> tuple[list[float], list[str]]:
        """The x ticks: the embedding, the layers (every few where there are many), the logits."""
        every = max(1, -(-self.n_layers // 16))
        layers = list(range(0, self.n_layers, every))
        ticks = [-1.5, *layers, self.n_layers + 0.5]
        return ticks, ["embed", *map(str, layers), "logits"]

    def rows(self) -> tuple[list[float], list[str]]:
        """The y ticks naming each row."""
        heads = [(self.n_groups + 1.5 + h, f"head {h}") for h in range(self.n_heads)]
        groups = [(1.0 + g, f"K/V group {g}") for g in range(self.n_groups)]
        ticks = [(0.0, "MLP"), *groups, *heads]
        return [y for y, _ in ticks], [name for _, name in ticks]


def _layout(nodes: list[Node]) -> Layout:
    inner = [n for n in nodes if n.kind not in ("embed", "logits")]
    return Layout(
        1 + max((n.layer for n in inner), default=0),
        1 + max((n.unit for n in inner if n.kind == "head"), default=-1),
        1 + max((n.unit for n in inner if n.kind == "group"), default=-1),
    )


def graph_figure(label: str, entry: dict, *, where: str) -> tuple[Figure, str]:
    """The top edges, senders to receivers, width by |score|, colour by sign, nodes named."""
    edges = [
        (*map(parse_node, name.split("->")), score) for name, score in entry.get("edges") or []
    ]
    if not edges:
        raise MissingData(f"{where}: no edges in the summary")
    layout = _layout([n for sender, receiver, _ in edges for n in (sender, receiver)])
    fig, ax = style.new_figure(SIZES["circuit_graph"])
    largest = max(abs(score) for *_, score in edges) or 1.0
    for sender, receiver, score in edges:
        (x0, y0), (x1, y1) = layout.place(sender), layout.place(receiver)
        colour = SIGN["lowers" if score < 0 else "raises"][0]
        width = 0.5 + 4.0 * abs(score) / largest
        ax.plot([x0, x1], [y0, y1], STYLE[receiver.input], color=colour, lw=width, alpha=0.6)
    _draw_nodes(ax, layout, {replace(n, input="") for s, r, _ in edges for n in (s, r)})
    ax.set_xticks(*layout.columns())
    ax.set_yticks(*layout.rows())
    ax.margins(y=0.1)  # room for the names above the top row
    ax.set_xlim(-2.0, layout.n_layers + 1.0)  # the embedding and logits columns always shown
    ax.set(xlabel="layer (an MLP sits half a layer after its layer's heads)",
           title=f"{style.short_label(label)}: top {len(edges)} edges"
           f"{_of_total(entry)} by |score|")  # fmt: skip
    fig.legend(handles=_legend(), loc="outside right upper", frameon=False)
    caption = (
        f"{style.short_label(label)}: the {len(edges)} edges of largest mean |score| "
        f"({entry['settings']['method']}, {entry['settings']['task']}); line width by |score|; "
        "the legend in the figure gives the node kinds, the colours and the line styles."
    )
    return fig, caption


def _draw_nodes(ax: Any, layout: Layout, nodes: set[Node]) -> None:
    for node in sorted(nodes, key=lambda n: (n.kind, n.layer, n.unit)):
        x, y = layout.place(node)
        marker, colour, _ = NODE[node.kind]
        ax.plot(x, y, marker, color=colour, ms=9, mec="white", zorder=3)
        # slanted, so the names of neighbouring layers do not run into each other
        ax.annotate(node.label, (x, y), xytext=(2, 6), textcoords="offset points",
                    rotation=35, fontsize=6.5, zorder=4)  # fmt: skip


def _legend() -> list[Line2D]:
    kinds = [
        Line2D([], [], marker=m, color=c, linestyle="none", ms=8, label=name)
        for m, c, name in NODE.values()
    ]
    signs = [Line2D([], [], color=c, lw=3, label=f"edge: {said}") for c, said in SIGN.values()]
    inputs = [
        Line2D([], [], color="grey", linestyle=STYLE[kind], lw=2, label=f"edge {said}")
        for kind, said in INPUT.items()
    ]
    return [*kinds, *signs, *inputs]


def _of_total(entry: dict) -> str:
    """`` of N`` edges in the model, from the faithfulness rows (empty where not recorded)."""
    total = next((r.get("n_total") for r in entry.get("faithfulness") or []), None)
    return f" of {total:,}" if total else ""


def faithfulness_figure(label: str, entry: dict, *, where: str) -> tuple[Figure, str]:
    """Share of the metric kept against circuit size, with the random-edge null and its CI."""
    rows = entry.get("faithfulness") or []
    if not rows:
        raise MissingData(f"{where}: no faithfulness in the summary")
    n, share, low, high = style.columns(rows, "n_edges", "share", "low", "high")
    fig, ax = style.new_figure(SIZES["circuit_faithfulness"])
    ax.errorbar(n, share, yerr=[share - low, high - share], fmt="o-", capsize=3,
                color=style.OKABE_ITO["blue"], label="circuit: top n edges, 95% CI")  # fmt: skip
    nulls = [r.get("null_ci") for r in rows]
    if all(nulls):
        mean, null_low, null_high = style.columns(nulls, "value", "low", "high")
        ax.errorbar(n, mean, yerr=[mean - null_low, null_high - mean], fmt="s--", capsize=3,
                    color="grey", label="random n edges (mean, 95% CI)")  # fmt: skip
    elif all(r["null_mean"] is not None for r in rows):
        ax.plot(n, [r["null_mean"] for r in rows], "s--", color="grey", label="random n edges")
    ax.axhline(1, color="black", lw=0.8, label="1: the whole metric (clean)")
    ax.axhline(HALF, color="black", lw=0.8, linestyle=":", label="half the metric")
    ax.axhline(0, color="grey", lw=0.8)
    total = _of_total(entry)
    ax.set(xlabel=f"edges in the circuit{f' ({total.strip()} in the model)' if total else ''}",
           ylabel="share of the metric kept",
           title=f"{style.short_label(label)}: faithfulness by circuit size")  # fmt: skip
    fig.legend(loc="outside lower center", ncols=2, frameon=False)
    caption = (
        f"{style.short_label(label)}: (circuit - corrupted) / (clean - corrupted) of the mean "
        "metric with every edge outside the circuit patched, 95% paired bootstrap CIs over pairs; "
        "grey: circuits of as many random edges (mean and 95% CI over the random circuits)."
    )
    return fig, caption


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
                ["edges (of the model's)", "share kept [95% CI]", "random [95% CI]", "stability"],
                [_row(r) for r in entry["faithfulness"]],
            ),
            *_under_half(label, entry["faithfulness"]),
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
    null = md.estimate(r["null_ci"]) if r.get("null_ci") else md.num(r["null_mean"])
    total = r.get("n_total")
    edges = (
        f"{r['n_edges']} of {total} ({100 * r['n_edges'] / total:.1f}%)" if total else r["n_edges"]
    )
    return [edges, share, null, md.num(r["stability"])]


def _under_half(label: str, rows: list[dict]) -> list[str]:
    largest = max(rows, key=lambda r: r["n_edges"])
    if largest["share"] >= HALF:
        return []
    return [
        f"{label}'s largest circuit, {largest['n_edges']} edges, keeps "
        f"{md.num(largest['share'])} of the metric: less than half, so most of the effect runs "
        "through edges outside it. Read it as the strongest edges, not as a circuit that "
        "reproduces the behaviour.",
        "",
    ]


plots = style.model_plots(
    ("circuit_graph", graph_figure), ("circuit_faithfulness", faithfulness_figure)
)
SECTION = Section("circuit", TITLE, md.prose("circuit"), SIZES, plots, tables, order=9)

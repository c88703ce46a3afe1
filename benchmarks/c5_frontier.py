"""C5's design frontier: detectable specificity against predicted wall time (issue 41).

For each embedded model, the drop above the random sets' mean that a design detects at
one-sided alpha 0.05 / 3 (Holm's strictest step over three models) with power 0.8
(``bindscope.metrics.stats.frontier``), against the predicted C5 time of the three models,
over designs: recognition items per term (1..5 of 5; 41 terms), nulls (random; random +
layer-matched), the most sets per null (N), the sequential rule's stop-at h, and the p a
null states: ``exact`` (floor 1/(N+1)) or ``tail`` (the GPD tail p, where exceedances are
few; it goes below 1/(N+1) and is calibrated from ``TAIL_CALIBRATED_SETS`` sets). The
powered preset is the cheapest design with all items and both nulls whose p reaches 0.005.

Inputs, each a recorded number (nothing is run here):

* spreads per model: the top set's per-item drop sd and the random sets' drop sd, from
  ``RECORDED`` (small measured runs, see its comment) or ``--summary`` files of C5 runs;
  the layer-matched null is taken to spread as the random one (not measured);
* cost of one item under one condition: ``COSTS`` (benchmarks/README.md's bench_c5 run and
  the demo's profile, both on a quiet 2-core machine).

A design's time is predicted with every null drawn to N (a real effect stops no null
early); "no effect" is the expected time when the top set is like a random one. Run::

    .venv/bin/python benchmarks/c5_frontier.py              # table, figure, picks
    .venv/bin/python benchmarks/c5_frontier.py --summary OUT/c5/summary.json
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from bindscope.metrics.stats.frontier import (
    TAIL_CALIBRATED_SETS,
    Spread,
    c5_seconds,
    detectable_specificity,
    expected_sets_no_effect,
    p_floor,
    reaches,
    unit_spread,
)

HERE = Path(__file__).resolve().parent
TERMS = 41
MODELS = ("SmolLM2-135M-Instruct", "gemma-3-270m", "qwen2.5-coder-0.5b")
#: Measured 2026-11-27 on a busy shared 2-core machine (load average about 4), recognition
#: score: ``bindscope c5 --model M --prompts <the 205 recognition items> --limit L --spread
#: --n-random 8 --sampling fixed`` (L = 41 for SmolLM2 and Gemma 3, 20 for Qwen; one item
#: per term, the four-choice rec_001). (item sd, sd of the 8 random sets' drops, items).
RECORDED: dict[str, tuple[float, float, int]] = {
    "SmolLM2-135M-Instruct": (0.5096627292249019, 0.035554584724666466, 41),
    "gemma-3-270m": (0.5238227218271836, 0.07795072237350904, 41),
    "qwen2.5-coder-0.5b": (0.22360679774997894, 0.03720119045714225, 20),
}
#: Seconds for one recognition item under one condition, quiet 2-core machine: the
#: True/False item (demo.py's profile: 0.046 s SmolLM2, 0.05 s Gemma 3, Qwen estimated
#: 0.2 s) and, on SmolLM2, the mean over all five items (bench_c5: 259 s / 2665) and head
#: ranking on 451 prompts (5.61 s, bench_c5). Model load: LOAD_S, not measured here.
#: Keeping only the scored logits changes none of these: C5's recognition passes kept them
#: already.
COSTS: dict[str, dict[str, float]] = {
    "SmolLM2-135M-Instruct": {"true_false": 0.046, "mean": 259 / 2665, "ranking": 5.61},
    "gemma-3-270m": {"true_false": 0.05},
    "qwen2.5-coder-0.5b": {"true_false": 0.2},
}
#: Each model's cost per item-condition over SmolLM2's, measured 2026-11-27 on a busy
#: shared 2-core machine (load average 3-4): C5's default recognition (batched, shared
#: prefix) of recognition items 1, 71 and 141 under 3 conditions, both models in one
#: process, alternating over 2 rounds (Gemma 3 1.36, 1.37; Qwen 2.67, 2.89); the mean.
#: The mean item cost and the ranking are SmolLM2's times this ratio.
MEASURED_RATIO = {"gemma-3-270m": (1.36 + 1.37) / 2, "qwen2.5-coder-0.5b": (2.67 + 2.89) / 2}
for _name, _ratio in MEASURED_RATIO.items():
    _smol = COSTS[MODELS[0]]
    COSTS[_name].update(mean=_smol["mean"] * _ratio, ranking=_smol["ranking"] * _ratio)
LOAD_S = 15.0
ITEMS_PER_TERM = (1, 2, 3, 4, 5)
NULLS = (("random",), ("random", "layers"))
MOST_SETS = (39, 59, 99, 199)
STOP_AT = (5, 10)
BUDGET_MIN = 15.0
#: The p the powered preset's nulls must be able to reach.
POWERED_LEVEL = 0.005


def item_seconds(model: str, per_term: int) -> float:
    """Mean cost of one item: the True/False item first, then the others at their mean."""
    cost = COSTS[model]
    others = (5 * cost["mean"] - cost["true_false"]) / 4
    return (cost["true_false"] + (per_term - 1) * others) / per_term


def design_row(
    spreads: dict[str, Spread], per_term: int, nulls: tuple, n_sets: int, *, tail: bool = False
) -> dict:
    """One design: detectable specificity per model and its predicted times in minutes."""
    n_items = per_term * TERMS
    row: dict = {"per_term": per_term, "items": n_items, "nulls": "+".join(nulls), "N": n_sets}
    row["p"] = "tail" if tail else "exact"
    row["floor"] = p_floor(n_sets)
    row["reaches"] = reaches(POWERED_LEVEL, n_sets, tail=tail)
    row["detectable"] = {
        m: detectable_specificity(s, n_items, n_sets=n_sets, n_models=len(MODELS))
        for m, s in spreads.items()
    }

    def minutes(sets: float) -> float:
        return (
            sum(
                c5_seconds(
                    n_items=n_items,
                    n_sets=sets,
                    n_nulls=len(nulls),
                    item_seconds=item_seconds(m, per_term),
                    fixed_seconds=LOAD_S + COSTS[m]["ranking"],
                )
                for m in MODELS
            )
            / 60
        )

    row["minutes"] = minutes(n_sets)
    row["no_effect"] = {h: minutes(expected_sets_no_effect(n_sets, h)) for h in STOP_AT}
    return row


def frontier(spreads: dict[str, Spread]) -> list[dict]:
    """Every design of the grid, cheapest first."""
    rows = [
        design_row(spreads, j, nulls, n, tail=tail)
        for j in ITEMS_PER_TERM
        for nulls in NULLS
        for n in MOST_SETS
        for tail in (False, True)
        if not tail or n >= TAIL_CALIBRATED_SETS  # below it the tail p is not calibrated
    ]
    return sorted(rows, key=lambda r: r["minutes"])


def powered(rows: list[dict]) -> dict:
    """The cheapest design with every item and both nulls whose p reaches 0.005."""
    fits = [
        r
        for r in rows
        if r["per_term"] == max(ITEMS_PER_TERM) and r["nulls"] == "random+layers" and r["reaches"]
    ]
    return min(fits, key=lambda r: (r["minutes"], r["p"] != "exact"))


def pick(rows: list[dict], budget_min: float) -> dict | None:
    """The design within the budget whose worst model detects the least, both nulls first."""
    for nulls in ("random+layers", "random"):
        fits = [
            r
            for r in rows
            if r["nulls"] == nulls and r["minutes"] <= budget_min
            and math.isfinite(max(r["detectable"].values()))
        ]  # fmt: skip
        if fits:  # the exact p where the tail p buys nothing
            return min(
                fits,
                key=lambda r: (max(r["detectable"].values()), r["minutes"], r["p"] != "exact"),
            )
    return None


def spreads_from(summaries: list[Path]) -> dict[str, Spread]:
    """The recognition spreads of each model in C5 summaries (``RECORDED`` otherwise)."""
    found = {m: unit_spread(*RECORDED[m]) for m in MODELS if m in RECORDED}
    for path in summaries:
        for label, entry in json.loads(path.read_text("utf-8"))["models"].items():
            name = next((m for m in MODELS if m.lower() in label.lower()), label)
            drops = entry["random_drops"]["recognition"]
            mean = sum(drops) / len(drops)
            sd = math.sqrt(sum((d - mean) ** 2 for d in drops) / (len(drops) - 1))
            n = entry["n_items"]["recognition"]
            found[name] = unit_spread(entry["paired_sd"]["recognition"], sd, n)
    return found


def markdown(rows: list[dict], spreads: dict[str, Spread]) -> str:
    """The frontier as a Markdown table."""
    models = [m for m in MODELS if m in spreads]
    head = ["items/term", "items", "nulls", "N", "p", "exact p floor", "reaches 0.005"]
    head += [f"detectable {m}" for m in models]
    head += ["min (all N)"] + [f"min no effect h={h}" for h in STOP_AT]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in sorted(rows, key=lambda r: (r["nulls"], r["per_term"], r["N"], r["p"])):
        cells = [r["per_term"], r["items"], r["nulls"], r["N"], r["p"], f"{r['floor']:.4f}"]
        cells.append("yes" if r["reaches"] else "no")
        cells += [_fmt(r["detectable"][m]) for m in models]
        cells += [f"{r['minutes']:.1f}"] + [f"{r['no_effect'][h]:.1f}" for h in STOP_AT]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)


def _fmt(value: float) -> str:
    return "none (p floor above 0.05/3)" if math.isinf(value) else f"{value:.3f}"


def figure(rows: list[dict], spreads: dict[str, Spread], path: Path) -> None:
    """Detectable specificity per model against predicted minutes, one marker per design."""
    import matplotlib  # here: only the figure needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # here: after the Agg backend is chosen

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for model in (m for m in MODELS if m in spreads):
        for nulls, marker in (("random", "o"), ("random+layers", "s")):
            points = [
                (r["minutes"], r["detectable"][model])
                for r in rows
                if r["nulls"] == nulls and math.isfinite(r["detectable"][model])
            ]
            ax.scatter(*zip(*points), marker=marker, s=14, label=f"{model}, {nulls}")
    ax.axvline(BUDGET_MIN, color="grey", linestyle="--", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("predicted C5 minutes, three models, every null drawn to N (2 cores)")
    ax.set_ylabel("detectable specificity (recognition accuracy)")
    ax.set_title("C5 power against time (alpha 0.05/3, power 0.8)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--summary", type=Path, action="append", default=[])
    parser.add_argument("--budget-min", type=float, default=BUDGET_MIN)
    parser.add_argument("--figure", type=Path, default=HERE / "c5_frontier.png")
    args = parser.parse_args(argv)
    spreads = spreads_from(args.summary)
    rows = frontier(spreads)
    print(markdown(rows, spreads))
    figure(rows, spreads, args.figure)
    print(f"figure: {args.figure}")
    chosen = pick(rows, args.budget_min)
    if chosen is None:
        print(f"no design fits {args.budget_min:g} minutes for three models")
    else:
        print(f"fits {args.budget_min:g} min for three models: {_describe(chosen)}")
    print(f"powered preset (bindscope c5 --preset powered): {_describe(powered(rows))}")
    return 0


def _describe(row: dict) -> str:
    detect = ", ".join(f"{m} {_fmt(v)}" for m, v in row["detectable"].items())
    return (
        f"{row['per_term']} item(s) per term ({row['items']} items), nulls {row['nulls']}, "
        f"up to {row['N']} sets, {row['p']} p: predicted {row['minutes']:.1f} min with every "
        f"null drawn to N ({row['no_effect'][10]:.1f} min expected with no effect, h=10); "
        f"detectable specificity {detect}"
    )


if __name__ == "__main__":
    raise SystemExit(main())

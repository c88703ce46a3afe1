"""What the C5 and circuit figures show: the recommended score, chance, bins, labels, yardsticks."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from bindscope.experiments.c5 import summarize_c5
from bindscope.experiments.circuit import summary as summarize_circuit
from bindscope.figures import c5 as c5_figures
from bindscope.figures import circuit as circuit_figures
from bindscope.figures import make_figures, write_report
from bindscope.figures import markdown as md
from bindscope.metrics.stats import mean_ci
from bindscope.results.records import write_summary
from tests.figures.studies import c5 as c5_study
from tests.figures.studies import circuit as circuit_study
from tests.figures.synthetic import MODELS, write_records


def _c5_entry() -> dict:
    """One model's entry of the real C5 summary of the synthetic records (3 choices)."""
    _, summary = c5_study.synthetic_results()
    return next(iter(summary["models"].values()))


def _panel(fig, start: str):
    """The axes whose title (after the model's name) starts with ``start``."""
    titles = [(ax, ax.get_title()) for ax in fig.axes]
    (ax,) = [
        ax for ax, t in titles if start in (t[: len(start)], t.split(": ", 1)[-1][: len(start)])
    ]
    return ax


def _horizontal_at(ax, y: float) -> bool:
    return any(np.allclose(line.get_ydata(), y) for line in ax.get_lines())


def test_c5_draws_the_margin_beside_accuracy_with_the_chance_level():
    entry = _c5_entry()
    fig, caption = c5_figures.model_figure("org/tiny-neox@main", entry, k=2)
    accuracy, margin = _panel(fig, "recognition\n"), _panel(fig, "margin (")
    # the margin sits in the column next to accuracy, on its own scale
    assert margin.get_position().x0 > accuracy.get_position().x1
    assert margin.get_ylabel() != accuracy.get_ylabel()
    heights = [p.get_height() for p in margin.patches]
    conditions = entry["conditions"]
    assert heights[:3] == pytest.approx(
        [conditions[c]["margin"] for c in ("baseline", "top", "bottom")]
    )
    # chance is the summary's 1/choices (three choices in the records), drawn on accuracy
    assert entry["chance"]["recognition"] == pytest.approx(1 / 3)
    assert _horizontal_at(accuracy, entry["chance"]["recognition"])
    assert _horizontal_at(margin, 0.0)  # the margin's decision line: a tie
    assert "chance" in caption and "margin" in caption


def test_cross_architecture_figure_only_with_several_models(tmp_path):
    records = [r for r in c5_study.c5_records() if r["model"] == MODELS[0]]
    write_records(tmp_path / "c5" / "records.jsonl", records)
    write_summary(tmp_path / "c5" / "summary.json", summarize_c5(records, n_resamples=199))
    report = make_figures(tmp_path)
    assert [f.name for f in report.figures] == ["c5_org-tiny-neox-main"]
    assert not any(name.startswith("c5") for name, _ in report.skipped)  # nothing broken
    text = write_report(tmp_path, figures=report).read_text()
    assert "c5_cross_architecture" not in text and "figure `c5" not in text


@pytest.mark.parametrize(
    ("score", "per_item"),
    # accuracy: 0/1 per item; the rubric: min(hits / 3, 1) - 0.2 per contradiction, steps of 1/15
    [("recognition", 1), ("generation", 15)],
)
def test_histogram_bins_are_the_score_steps(score, per_item):
    """19 items: the drops move in steps of 1/(19 m); 5 random sets tie the top set's drop."""
    step, top = 1 / (19 * per_item), 6
    steps = [1, 2, 2, 3, 3, 3, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 6, -1, 0]
    entry = {
        "conditions": {"baseline": {score: 0.9, f"n_{score}": 19}},
        "n_items": {score: 19},
        "drops": {"top": {score: {"value": top * step, "low": None, "high": None}}},
        "random_drops": {score: [k * step for k in steps]},
    }
    fig, _ = c5_figures.model_figure("m", entry, k=2)
    histogram = _panel(fig, f"{score}: 19 random sets")
    widths = [p.get_width() for p in histogram.patches]
    assert widths == pytest.approx([step] * len(widths))  # one bin per step, none split
    bars = [p for p in histogram.patches if p.get_height() > 0]
    counts = {round((p.get_x() + p.get_width() / 2) / step): p.get_height() for p in bars}
    assert counts == {k: steps.count(k) for k in set(steps)}  # each bin centred on its step
    assert counts[top] == 5  # the ties with the top set are one bar under its line


def test_circuit_graph_names_every_node_and_explains_itself_in_the_image():
    _, summary = circuit_study.synthetic_results()
    entry = next(iter(summary["models"].values()))
    fig, _ = circuit_figures.graph_figure("org/tiny-neox", entry, where="test")
    (ax,) = fig.axes
    names = {t.get_text() for t in ax.texts}
    # every node of embed->a0.h1<q>, a0.h1->a2.g0<k>, m0->m1, a1.h2->m1, a2.h3->logits
    assert names == {"embed", "L0.H1", "L2.KV0", "MLP0", "MLP1", "L1.H2", "L2.H3", "logits"}
    kinds = circuit_figures.NODE
    (legend,) = fig.legends
    said = [t.get_text() for t in legend.get_texts()]
    assert [name for *_, name in kinds.values()] == said[: len(kinds)]
    edges = said[len(kinds) :]  # the signs and the input kinds
    assert any("key" in t for t in edges) and any("value" in t for t in edges)
    where = {t.get_text(): t.xy for t in ax.texts}
    # the embedding and the logits have their own columns, a group its own row
    head_x = {x for name, (x, _) in where.items() if name.startswith("L")}
    assert where["embed"][0] < min(head_x) and where["logits"][0] > max(head_x)
    head_rows = {y for name, (_, y) in where.items() if ".H" in name}
    assert where["L2.KV0"][1] not in head_rows and where["MLP0"][1] not in head_rows
    markers = {line.get_marker() for line in ax.get_lines() if line.get_marker() != "None"}
    assert len(markers) == len(kinds)  # one shape per kind


def _circuit_summary(shares: tuple[float, ...]) -> dict:
    """The real circuit summary of records whose sizes keep ``shares`` of 1,000 edges."""
    records = circuit_study.circuit_records()
    sizes = [r for r in records if r["condition"].startswith("top:")]
    for r, share in zip(sizes, shares):
        r["metrics"].update(share=share, low=share - 0.05, high=share + 0.05, n_total=1000)
        r["metrics"]["null"] = [0.01, -0.02, 0.0]
    return summarize_circuit(records)


def test_faithfulness_has_its_yardsticks_and_says_when_under_half():
    summary = _circuit_summary((0.2, 0.274))
    (_, largest) = next(iter(summary["models"].values()))["faithfulness"]
    assert largest["null_ci"] == mean_ci([0.01, -0.02, 0.0]).to_dict()
    text = "\n".join(circuit_figures.tables(SimpleNamespace(summary=summary)))
    assert f"{largest['n_edges']} of 1000 (1.0%)" in text  # the total edge count
    assert md.estimate(largest["null_ci"]) in text  # the null with its CI
    assert "keeps 0.274 of the metric: less than half" in text
    entry = summary["models"][next(iter(summary["models"]))]
    fig, _ = circuit_figures.faithfulness_figure("m", entry, where="test")
    assert "1,000 in the model" in fig.axes[0].get_xlabel()
    kept = _circuit_summary((0.4, 0.6))  # the largest circuit keeps more than half
    assert "less than half" not in "\n".join(circuit_figures.tables(SimpleNamespace(summary=kept)))

"""A summary keyed by model covers the revisions it lists, and only those (no experiment named)."""

from __future__ import annotations

import json

from bindscope.results.summaries import load_experiment
from tests.figures.synthetic import write_records, write_results


def test_a_sweep_summary_covers_its_listed_revisions_only(tmp_path):
    write_results(tmp_path, experiments=("sweep",))
    path = tmp_path / "sweep" / "records.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert not [n for n in load_experiment(tmp_path, "sweep").notes if "does not cover" in n]
    model = records[0]["model"]
    extra = {**records[0], "revision": "later", "key": f"sweep|{model}|later|x/p0|clean"}
    write_records(path, [*records, extra])
    (covers,) = [n for n in load_experiment(tmp_path, "sweep").notes if "does not cover" in n]
    assert f"{model}@later" in covers


def test_a_figure_that_cannot_be_drawn_names_the_summary_it_read(tmp_path):
    """``ExperimentResults.where`` is the summary.json path the figures' messages name."""
    from bindscope.figures import make_figures

    write_results(tmp_path, ["sweep"])
    loaded = load_experiment(tmp_path, "sweep")
    assert loaded.where == str(tmp_path / "sweep" / "summary.json")
    summary = json.loads((tmp_path / "sweep" / "summary.json").read_text())
    for entry in summary["models"].values():
        entry["leadlag"] = {"n_lead": {"pearson": 3}}  # no lead fraction to draw
    (tmp_path / "sweep" / "summary.json").write_text(json.dumps(summary))
    skipped = dict(make_figures(tmp_path, tmp_path / "figures").skipped)
    assert skipped["sweep_leadlag"].startswith(f"{loaded.where} [")

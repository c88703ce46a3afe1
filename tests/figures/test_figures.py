"""Every figure renders from synthetic results; missing or broken inputs are reported."""

from __future__ import annotations

import json
import re
import struct

import numpy as np
import pytest

from bindscope.errors import InputError, RecordFileError
from bindscope.figures import FigureReport, make_figures
from bindscope.figures.sections import sizes
from bindscope.figures.style import CONDITION_STYLE, DPI, SERIES, columns, intervals
from bindscope.figures.sweep import lead_fraction
from bindscope.metrics.stats import wilson_ci
from bindscope.results.summaries import MissingData, load_experiment
from tests.figures.synthetic import expected_figures, write_records, write_results


def png_size(path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


def kind_of(name: str) -> str:
    """The SIZES key of a figure name (the longest matching prefix)."""
    kinds = [k for k in sizes() if name == k or name.startswith(k + "_")]
    return max(kinds, key=len)


def test_every_figure_renders_at_its_fixed_size(full_results):
    root, report = full_results
    assert report.skipped == []
    assert {f.name for f in report.figures} == expected_figures()
    assert report.out_dir == root / "figures"
    assert len(report.written) == 2 * len(report.figures)
    for fig in report.figures:
        assert fig.png in report.written and fig.pdf in report.written
        assert fig.png.parent == root / "figures"
        assert fig.pdf.read_bytes()[:5] == b"%PDF-"
        assert fig.pdf.stat().st_size > 1000 and fig.png.stat().st_size > 1000
        width, height = sizes()[kind_of(fig.name)]
        assert png_size(fig.png) == (round(width * DPI), round(height * DPI)), fig.name
        assert fig.caption


def test_lines_name_each_file_and_skip(full_results, fewshot_only):
    _, report = full_results
    assert len(report.lines()) == len(report.figures)
    assert all(line.startswith("wrote ") for line in report.lines())
    _, partial = fewshot_only
    # what was drawn, then one line for everything that was not
    (wrote, not_drawn) = partial.lines()
    assert wrote.startswith("wrote ") and not_drawn.startswith("not drawn: ")
    assert "c5" in not_drawn and "binding" in not_drawn and "(not run here)" in not_drawn
    assert "fewshot" not in not_drawn


def test_missing_experiments_are_skipped_with_a_reason(fewshot_only):
    root, report = fewshot_only
    assert [f.name for f in report.figures] == ["fewshot_org-tiny-neox-main"]
    skipped = dict(report.skipped)
    expected = {
        "binding_bsi",
        "controls",
        "c5",
        "c5_cross_architecture",
        "sweep_emergence",
        "sweep_leadlag",
        "heads_map",
        "heads_emergence",
        "scan",
        "patching",
        "circuit_graph",
        "circuit_faithfulness",
    }
    assert set(skipped) == expected
    assert str(root / "c5") in skipped["c5"] and "not been run" in skipped["c5"]


def test_summary_missing_but_records_present_says_to_summarize(tmp_path):
    write_results(tmp_path, experiments=("controls",))
    (tmp_path / "controls" / "summary.json").unlink()
    report = make_figures(tmp_path, tmp_path / "out")
    assert report.written == []
    assert "bindscope summarize" in dict(report.skipped)["controls"]
    assert not (tmp_path / "out").exists()


def test_incomplete_summary_skips_only_that_figure(tmp_path):
    write_results(tmp_path, experiments=("controls", "fewshot"))
    path = tmp_path / "controls" / "summary.json"
    summary = json.loads(path.read_text())
    for entry in summary["models"].values():
        del entry["groups"]
    path.write_text(json.dumps(summary))
    report = make_figures(tmp_path)
    assert [f.name for f in report.figures] == ["fewshot_org-tiny-neox-main"]
    reasons = [reason for name, reason in report.skipped if name.startswith("controls_")]
    assert len(reasons) == 1 and "groups" in reasons[0] and str(path) in reasons[0]


def test_corrupt_record_fails_naming_file_and_line(tmp_path):
    write_results(tmp_path, experiments=("binding", "fewshot"))
    path = tmp_path / "fewshot" / "records.jsonl"
    lines = path.read_text().splitlines()
    lines[2] = lines[2][: len(lines[2]) // 2]  # a line cut in the middle
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(RecordFileError, match=re.escape(f"{path}:3:")):
        make_figures(tmp_path)


def test_record_without_a_required_field_fails_naming_file_and_line(tmp_path):
    write_results(tmp_path, experiments=("controls",))
    path = tmp_path / "controls" / "records.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    del records[4]["metrics"]
    write_records(path, records)
    with pytest.raises(RecordFileError, match=re.escape(f"{path}:5:") + ".*metrics"):
        make_figures(tmp_path)


def test_corrupt_summary_fails_naming_file_and_line(tmp_path):
    write_results(tmp_path, experiments=("fewshot",))
    path = tmp_path / "fewshot" / "summary.json"
    path.write_text('{\n  "experiment": "fewshot",\n  "models": {,\n}\n')
    with pytest.raises(RecordFileError, match=re.escape(f"{path}:3:")):
        make_figures(tmp_path)


def test_summary_missing_a_model_of_the_records_is_noted(tmp_path):
    write_results(tmp_path, experiments=("fewshot",))
    path = tmp_path / "fewshot" / "records.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    extra = {**records[0], "model": "org/other", "key": "fewshot|org/other|main|x/p0|zero_shot"}
    write_records(path, [*records, extra])
    exp = load_experiment(tmp_path, "fewshot")
    assert exp.missing is None
    (covers,) = [note for note in exp.notes if "does not cover" in note]
    assert "org/other@main" in covers and "bindscope summarize" in covers
    # the records were rewritten after the summary: that is said too
    assert any("older than its records" in note for note in exp.notes)


def test_lead_fraction_is_read_from_the_summary_never_computed():
    leadlag = {"n_terms": 10, "n_lead": {"pearson": 7, "spearman": 4}}
    with pytest.raises(MissingData, match="lead_fraction"):
        lead_fraction(leadlag, "pearson")  # figures do not recompute the interval
    stored = {**leadlag, "lead_fraction": {"pearson": wilson_ci(3, 10).to_dict()}}
    assert lead_fraction(stored, "pearson")["value"] == pytest.approx(0.3)


def test_styles_read_without_colour():
    """Conditions differ by hatch and series by marker, not by colour alone."""
    hatches = [s["hatch"] for s in CONDITION_STYLE.values()]
    assert len(set(hatches)) == len(hatches)
    markers = [s["marker"] for s in SERIES]
    assert len(set(markers)) == len(markers)


def test_report_object_is_a_plain_dataclass(tmp_path):
    report = make_figures(tmp_path)  # an empty folder: everything skipped, nothing raised
    assert isinstance(report, FigureReport)
    # every figure kind of every experiment
    assert report.written == [] and len(report.skipped) == 13
    assert all("not been run" in reason for _, reason in report.skipped)


def test_a_results_folder_that_does_not_exist_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="no such results folder"):
        make_figures(tmp_path / "typo")


def test_cross_architecture_draws_only_the_tasks_some_model_evaluated():
    """The demo evaluates recognition only: no empty generation panel beside it."""
    from bindscope.figures.c5 import cross_architecture

    def entry(tasks):
        drop = {"value": 0.1, "low": 0.0, "high": 0.2}
        return {
            "drops": {c: dict.fromkeys(tasks, drop) for c in ("top", "bottom")},
            "random_drops": {t: [0.0, 0.05, -0.02] for t in tasks},
            "p_holm": dict.fromkeys(tasks, 0.05),
        }

    one, _ = cross_architecture({"a": entry(["recognition"]), "b": entry(["recognition"])})
    assert [ax.get_title().split(":")[0] for ax in one.axes] == ["recognition"]
    both, _ = cross_architecture({"a": entry(["recognition", "generation"])})
    assert [ax.get_title().split(":")[0] for ax in both.axes] == ["recognition", "generation"]
    with pytest.raises(MissingData):
        cross_architecture({"a": entry([])})


def _c5_entry(tasks, *, low=-0.3, high=0.5):
    """A C5 summary entry scored on ``tasks``, its top-drop CI from ``low`` to ``high``."""
    drop = {"value": 0.1, "low": low, "high": high}
    return {
        "conditions": {
            "baseline": {**dict.fromkeys(tasks, 0.95), **{f"n_{t}": 82 for t in tasks}},
            "top": dict.fromkeys(tasks, 0.85),
            "bottom": dict.fromkeys(tasks, 0.9),
        },
        "drops": {c: dict.fromkeys(tasks, drop) for c in ("top", "bottom")},
        "random_drops": {t: [0.0, 0.05, -0.02] for t in tasks},
        "p_value": dict.fromkeys(tasks, 0.2),
        "p_holm": dict.fromkeys(tasks, 0.4),
    }


def test_model_figure_draws_only_tasks_that_ran_and_never_cuts_a_whisker():
    from bindscope.figures.c5 import model_figure

    fig, _ = model_figure("m", _c5_entry(["recognition"]), k=4)
    bars, histogram = fig.axes  # one column: the scores, then the random-set drops
    assert histogram.get_title().split(":")[0] == "recognition"  # no empty panel
    labels = [t.get_text() for t in bars.get_xticklabels()]
    assert labels == ["baseline", "top-4", "bottom-4", "random"]
    assert "n = 82 items" in bars.get_title()
    # the top drop's CI on the score scale, [base - high, base - low] = [0.45, 1.25], must
    # lie inside the axis, not be cut at a fixed 1.05
    low, high = bars.get_ylim()
    assert low <= 0.45 and high >= 1.25
    whiskers = [seg for c in bars.collections for seg in c.get_segments()]
    assert whiskers and all(low <= y <= high for seg in whiskers for _, y in seg)
    both, _ = model_figure("m", _c5_entry(["recognition", "generation"]), k=4)
    assert len(both.axes) == 4


def test_columns_and_intervals_fill_what_is_missing():
    """NaN where a row or value is missing; ``intervals`` puts a missing bound at the value."""
    cells = [{"value": 1.0, "low": 0.5, "high": None}, None, {"value": 2.0, "low": None}]
    value, low = columns(cells, "value", "low")
    np.testing.assert_array_equal(value, [1.0, np.nan, 2.0])
    np.testing.assert_array_equal(low, [0.5, np.nan, np.nan])
    value, low, high = intervals([c for c in cells if c])
    np.testing.assert_array_equal(low, [0.5, 2.0])
    np.testing.assert_array_equal(high, [1.0, 2.0])

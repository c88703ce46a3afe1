"""The Markdown report: tables from the summaries, provenance, figures linked relatively."""

from __future__ import annotations

import json
import re

import pytest

from bindscope.errors import RecordFileError
from bindscope.figures import markdown as md
from bindscope.figures import write_report
from bindscope.figures.sections import sections

LINK = re.compile(r"\]\(([^)]+\.(?:png|pdf))\)")


def links(text: str) -> list[str]:
    return LINK.findall(text)


def test_report_has_every_section_table_and_figure(full_results):
    root, figures = full_results
    path = write_report(root, figures=figures)
    assert path == root / "report.md"
    text = path.read_text()
    for section in sections().values():
        assert f"## {section.title}" in text
    assert "## Models and provenance" in text
    assert text.count("*How to read these numbers.*") == len(sections()) + 1
    assert "| 0.1.0 | 0.8.1 | 5.0.0 | 2.13.0 |" in text
    assert "Not in this report" not in text
    found = links(text)
    assert len(found) == 2 * len(figures.figures)
    for link in found:
        assert not link.startswith("/") and (path.parent / link).is_file()


def test_report_numbers_come_from_the_summaries(full_results):
    root, figures = full_results
    text = write_report(root, figures=figures).read_text()
    binding = json.loads((root / "binding" / "summary.json").read_text())
    for entry in binding["models"].values():
        assert md.estimate(entry["eb_star"]) in text
        assert md.heads(entry["top_heads"]) in text
    c5 = json.loads((root / "c5" / "summary.json").read_text())
    for entry in c5["models"].values():
        assert md.estimate(entry["specificity"]["recognition"]) in text
        assert md.pvalue(entry["p_holm"]["generation"]) in text
        # the continuous score beside accuracy, with its own drop and p; the power
        assert md.estimate(entry["drops"]["top"]["margin"]) in text
        assert md.num(entry["detectable_drop"]["recognition"]) in text
    # the ranking and evaluation files with their hashes
    assert f"`{c5['ranking_set']}` (sha256 `{c5['ranking_sha256'][:12]}`)" in text
    # the limits a reviewer raises first: terms, tiny margins, unmatched layers
    kinds = {limit["kind"] for limit in c5["limits"]}
    assert {"clustered", "tiny_margins", "layers"} <= kinds
    assert "--matched-layers" in text and "design effect" in text
    sweep = json.loads((root / "sweep" / "summary.json").read_text())
    for entry in sweep["models"].values():
        assert md.estimate(entry["leadlag"]["lead_fraction"]["pearson"]) in text
    fewshot = json.loads((root / "fewshot" / "summary.json").read_text())
    for entry in fewshot["models"].values():
        assert md.estimate(entry["delta_points"]["few_shot"], 1) in text


def test_report_elsewhere_links_back_to_the_figures(full_results, tmp_path):
    root, figures = full_results
    path = write_report(root, out=tmp_path / "paper" / "appendix.md", figures=figures)
    for link in links(path.read_text()):
        assert (path.parent / link).is_file()


def test_report_lists_what_is_missing(fewshot_only):
    root, figures = fewshot_only
    text = write_report(root, figures=figures).read_text()
    assert "## Few-shot and paraphrase prompting" in text
    assert "## C5: causal head ablation" not in text
    section = text.split("## Not in this report", 1)[1]
    for name in ("binding", "controls", "c5", "sweep"):
        assert f"- experiment `{name}`: " in section
    assert "figure `" not in section  # said once per experiment, not once per figure


def test_report_draws_figures_when_none_are_given(tmp_path):
    root = tmp_path / "empty"
    root.mkdir()
    path = write_report(root)
    assert path.is_file() and (root / "figures").exists() is False
    assert path.read_text().count("- experiment `") == len(sections())


def test_report_on_corrupt_records_names_file_and_line(tmp_path):
    folder = tmp_path / "binding"
    folder.mkdir()
    (folder / "records.jsonl").write_text("not json\n")
    with pytest.raises(RecordFileError, match=re.escape(f"{folder / 'records.jsonl'}:1:")):
        write_report(tmp_path)


def test_models_table_states_heads_and_which_checkpoint_is_base(tmp_path):
    from types import SimpleNamespace

    from bindscope.figures.report import _provenance

    prov = {
        "SmolLM2-135M-Instruct": {
            "family": "llama",
            "heads": [30, 9],
            "training": "instruction-tuned",
        },
        "gemma-3-270m": {
            "family": "gemma3",
            "heads": [18, 4],
            "training": "base (pretrained, not instruction-tuned)",
        },
        "org/other": {"family": "qwen2"},  # records written before the fields existed
    }

    def exp(provenance: dict) -> SimpleNamespace:
        return SimpleNamespace(provenance=provenance, versions=set(), times=[])

    results = {name: exp({}) for name in sections()}
    results["c5"] = exp(prov)
    results["binding"] = exp({"gemma-3-270m": prov["gemma-3-270m"]})
    text = "\n".join(_provenance(results))
    assert "| SmolLM2-135M-Instruct | llama | 30 x 9 = 270 | instruction-tuned |" in text
    assert (
        "| gemma-3-270m | gemma3 | 18 x 4 = 72 | base (pretrained, not instruction-tuned) |" in text
    )
    assert f"| org/other | qwen2 | {md.DASH} | not stated |" in text
    assert text.count("| gemma-3-270m | gemma3 |") == 1  # one row per model, not per experiment
    assert "instruction-tuned one" in text  # says why the distinction matters

"""The reader-facing paragraphs in ``bindscope/figures/prose``: each one used, none empty."""

from __future__ import annotations

from importlib import resources

import pytest

from bindscope.figures import markdown as md
from bindscope.figures import write_report
from bindscope.figures.sections import sections

PROSE = resources.files("bindscope.figures") / "prose"


def paragraph_names() -> list[str]:
    return sorted(f.name.removesuffix(".md") for f in PROSE.iterdir() if f.name.endswith(".md"))


def test_every_section_reads_its_own_nonempty_paragraph():
    names = paragraph_names()
    for name, section in sections().items():
        assert section.how_to_read.strip(), name
        assert name in names, f"{name} has no prose/{name}.md"
        assert section.how_to_read == md.prose(name)


def test_every_paragraph_file_appears_in_the_report_on_one_line(full_results, tmp_path):
    root, figures = full_results
    text = write_report(root, out=tmp_path / "report.md", figures=figures).read_text("utf-8")
    lines = text.splitlines()
    for name in paragraph_names():
        paragraph = md.prose(name)
        assert paragraph and "\n" not in paragraph, name
        # an unused file, or one whose wrapped lines were not joined, fails here
        assert any(line.endswith(paragraph) for line in lines), f"prose/{name}.md is not used"


def test_a_missing_paragraph_says_which_file_to_write():
    with pytest.raises(FileNotFoundError, match=r"prose/no_such_section\.md"):
        md.prose("no_such_section")

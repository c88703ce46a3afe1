"""One self-contained Markdown report of stored results: ``bindscope report RESULTS_DIR``."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

from bindscope.figures import markdown as md
from bindscope.figures.make import FigureReport, make_figures
from bindscope.figures.sections import Section, sections
from bindscope.results.records import SCHEMA
from bindscope.results.summaries import VERSION_FIELDS, ExperimentResults, MissingData, load_results

# The provenance fields the models table shows as they are (a dash when missing).
SHOWN = ("family", "dtype", "device", "attn_implementation", "capture")


def write_report(
    results_dir: str | Path, out: str | Path | None = None, figures: FigureReport | None = None
) -> Path:
    """Write the report (default ``results_dir/report.md``), drawing ``figures`` when None."""
    root = Path(results_dir)
    path = Path(out) if out is not None else root / "report.md"
    if figures is None:
        figures = make_figures(root)
    results = load_results(root, sections())
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [*_header(root), *_provenance(results)]
    number = itertools.count(1)  # figures are numbered in the order the report shows them
    for name, section in sections().items():
        if not results[name].missing:
            lines += _section(section, results[name], figures, path, number)
    lines += _limits(results)
    lines += _not_included(results, figures)
    path.write_text("\n".join(lines).rstrip() + "\n", "utf-8")
    return path


def _section(
    section: Section,
    exp: ExperimentResults,
    figures: FigureReport,
    path: Path,
    number: Iterator[int],
) -> list[str]:
    lines = [f"## {section.title}", "", f"*How to read these numbers.* {section.how_to_read}", ""]
    try:
        lines += section.tables(exp)
    except MissingData as exc:
        lines += [f"Table not available: {exc}.", ""]
    for fig in (f for f in figures.figures if f.experiment == exp.name):
        n, png, pdf = next(number), _rel(fig.png, path), _rel(fig.pdf, path)
        lines += [f"![Figure {n}: {fig.name}]({png})", ""]
        lines += [f"*Figure {n}.* {fig.caption} ([PDF]({pdf}))", ""]
    return lines


def _header(root: Path) -> list[str]:
    return [
        f"# bindscope results: `{root.name or root.resolve().name}`",
        "",
        f"Tables and figures below are read from the result records (`{SCHEMA}`) in "
        f"`{root}`; nothing is typed in by hand. Intervals are 95% unless a column says "
        "otherwise; p-values are as stored (Holm-adjusted where the column says so). Every "
        "figure is also linked as a PDF.",
        "",
    ]


def _rel(target: Path, report: Path) -> str:
    return Path(os.path.relpath(target.resolve(), report.resolve().parent)).as_posix()


def _provenance(results: dict[str, ExperimentResults]) -> list[str]:
    rows: list[list[str]] = []
    models: dict[str, list[str]] = {}
    versions: set[tuple[str, ...]] = set()
    times: list[str] = []
    for name, exp in results.items():
        versions |= exp.versions
        times += exp.times or ()
        for label, prov in exp.provenance.items():
            sha = prov.get("prompt_sha256")
            prompts = prov.get("prompt_set") or md.DASH
            shown = [prov.get(key) or md.DASH for key in SHOWN]
            prompt_set = f"{prompts} ({sha[:12]})" if sha else prompts
            remote = "yes" if prov.get("remote") else "no"
            rows.append([label, name, *shown, remote, prompt_set, md.num(prov.get("seed"))])
            models.setdefault(label, _model_row(label, prov))
    if not rows:
        return []
    header = ["model", "experiment", "family", "dtype", "device", "attention", "capture"]
    models_header = ["model", "family", "heads (layers x heads)", "checkpoint"]
    lines = [
        "## Models and provenance",
        "",
        f"*How to read these numbers.* {md.prose('provenance')}",
        "",
        f"*Models.* {md.prose('models')}",
        "",
        *md.table(models_header, list(models.values()), left=4),
        *md.table([*header, "remote", "prompt set (sha256)", "seed"], rows, left=9),
    ]
    lines += md.table(list(VERSION_FIELDS), sorted(versions), left=4)
    if len(versions) > 1:
        lines += ["The records were written by more than one software version (rows above).", ""]
    if times and min(times) != max(times):
        lines += [f"Records written between {min(times)} and {max(times)} (UTC).", ""]
    elif times:
        lines += [f"Records written at {min(times)} (UTC).", ""]
    return lines


def _model_row(label: str, prov: dict) -> list[str]:
    heads = prov.get("heads")
    shape = f"{heads[0]} x {heads[1]} = {heads[0] * heads[1]}" if heads else md.DASH
    return [label, prov.get("family") or md.DASH, shape, prov.get("training") or "not stated"]


def _limits(results: dict[str, ExperimentResults]) -> list[str]:
    found = [
        (name, limit)
        for name in sections()
        for limit in ((results[name].summary or {}).get("limits") or [])
        if not results[name].missing
    ]
    if not found:
        return []
    lines = ["## Limits of these results", "", f"*How to read these.* {md.prose('limits')}", ""]
    lines += [f"- `{name}` ({limit['kind']}): {limit['message']}" for name, limit in found]
    return [*lines, ""]


def _not_included(results: dict[str, ExperimentResults], figures: FigureReport) -> list[str]:
    missing = [(name, exp.missing) for name, exp in results.items() if exp.missing]
    notes = [n for exp in results.values() for n in exp.notes]
    if not (missing or figures.skipped or notes):
        return []
    lines = ["## Not in this report", ""]
    lines += [f"- experiment `{name}`: {reason}" for name, reason in missing]
    reasons = {reason for _, reason in missing}
    lines += [
        f"- figure `{name}` skipped: {reason}"
        for name, reason in figures.skipped
        if reason not in reasons  # already said once for the whole experiment
    ]
    lines += [f"- note: {note}" for note in notes]
    return [*lines, ""]


__all__ = ["write_report"]

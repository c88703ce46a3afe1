"""Draw every figure the stored results allow: ``bindscope figures RESULTS_DIR --out DIR``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from matplotlib.figure import Figure

from bindscope.errors import BindscopeError
from bindscope.figures.sections import sections
from bindscope.figures.style import rc_context, save
from bindscope.results.summaries import ExperimentResults, MissingData, load_results


@dataclass(frozen=True)
class FigureFile:
    """One drawn figure: its name, experiment, caption and the two files written."""

    name: str
    experiment: str
    caption: str
    png: Path
    pdf: Path


@dataclass(frozen=True)
class FigureReport:
    """What ``make_figures`` wrote (``figures`` in report order) and skipped (name, reason)."""

    out_dir: Path
    written: list[Path] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    figures: list[FigureFile] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    not_run: list[str] = field(default_factory=list)  # experiments with no results here

    def lines(self) -> list[str]:
        """One line per figure written, one line for all that were not, then the notes."""
        out = [f"wrote {f.png} (+ {f.pdf.name})" for f in self.figures]
        missing = {f"no {name} results" for name in self.not_run}
        parts = [f"{', '.join(self.not_run)} (not run here)"] if self.not_run else []
        parts += [
            f"{name} ({reason})"
            for name, reason in self.skipped
            if not any(reason.startswith(m) for m in missing)
        ]
        if parts:
            out.append(f"not drawn: {'; '.join(parts)}")
        out += [f"note: {note}" for note in self.notes]
        return out


def make_figures(results_dir: str | Path, out_dir: str | Path | None = None) -> FigureReport:
    """A PNG and a PDF (in ``out_dir``, default ``results_dir/figures``) of each drawable figure."""
    root = Path(results_dir)
    out = Path(out_dir) if out_dir is not None else root / "figures"
    results = load_results(root, sections())
    report = FigureReport(out_dir=out)
    for name, section in sections().items():
        exp = results[name]
        report.notes.extend(exp.notes)
        if exp.missing:
            report.skipped.extend((kind, exp.missing) for kind in section.sizes)
            if exp.summary is None and not exp.n_records:
                report.not_run.append(name)
            continue
        for figure_name, build in section.plots(exp):
            _draw(exp, figure_name, build, out, report)
    return report


def _draw(
    exp: ExperimentResults,
    name: str,
    build: Callable[[], tuple[Figure, str]],
    out: Path,
    report: FigureReport,
) -> None:
    with rc_context():
        try:
            fig, caption = build()
        except BindscopeError:
            raise
        except MissingData as exc:
            report.skipped.append((name, f"{exc}; rerun `bindscope summarize` if it is stale"))
            return
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            # a summary of an unexpected shape skips this figure, not the whole run
            report.skipped.append((name, f"{exp.where}: unexpected shape ({exc!r})"))
            return
        png, pdf = save(fig, out, name)
    report.figures.append(FigureFile(name, exp.name, caption, png, pdf))
    report.written.extend([png, pdf])


__all__ = ["FigureFile", "FigureReport", "make_figures"]

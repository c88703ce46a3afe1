"""Figures and a Markdown report drawn from stored result records (never computing science).

``make_figures(results_dir)`` writes a PNG and a PDF per figure the results support and
says why each missing one was skipped; ``write_report(results_dir)`` writes one Markdown
report with tables, provenance and the figures linked by relative path.
"""

from __future__ import annotations

from bindscope.figures.make import FigureFile, FigureReport, make_figures
from bindscope.figures.report import write_report

__all__ = ["FigureFile", "FigureReport", "make_figures", "write_report"]

"""Figures and a Markdown report of stored results: they read results, never compute science."""

from __future__ import annotations

from bindscope.figures.make import FigureFile, FigureReport, make_figures
from bindscope.figures.report import write_report

__all__ = ["FigureFile", "FigureReport", "make_figures", "write_report"]

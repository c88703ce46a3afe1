"""Summaries rebuilt from records alone: the folder loop, shared estimates and test options."""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

from bindscope.errors import InputError
from bindscope.metrics import stats
from bindscope.results.records import read_records, write_summary


def per_model_text(
    s: dict, header: list[str], lines: Callable[[str, dict], Iterable[str]]
) -> list[str]:
    """A summary's terminal text: the ``header`` lines, then ``lines(label, m)`` per model."""
    return [*header, *(line for label, m in s["models"].items() for line in lines(label, m))]


def per_model_view(
    title: str, lines: Callable[[str, dict], Iterable[str]]
) -> Callable[[dict], list[str]]:
    """An experiment's ``text``: ``per_model_text`` under the one ``title`` line."""
    return functools.partial(per_model_text, header=[title], lines=lines)


def summarize_folder(
    folder: str | Path,
    build: Callable[[list[dict]], dict],
    *,
    name: str,
    check: Callable[[Path, list[dict]], None] | None = None,
) -> dict:
    """Rebuild ``folder/summary.json`` from ``folder/records.jsonl`` alone; return it."""
    folder = Path(folder)
    records = list(read_records(folder / "records.jsonl"))
    _check_records_belong(folder, records, name)
    if check is not None:
        check(folder, records)
    summary = build(records)
    write_summary(folder / "summary.json", summary)
    return summary


def folder_summary(
    name: str,
    build: Callable[[list[dict]], dict],
    *,
    check: Callable[[Path, list[dict]], None] | None = None,
) -> Callable[[str | Path], dict]:
    """An experiment's ``summarize(folder)``: ``summarize_folder`` with its name and builder."""
    return functools.partial(summarize_folder, build=build, name=name, check=check)


def _check_records_belong(folder: Path, records: list[dict], experiment: str) -> None:
    if not records or any(
        r["experiment"] == experiment or str(r["experiment"]).startswith(experiment + "-")
        for r in records
    ):
        return
    kinds = sorted({str(r["experiment"]) for r in records})
    raise InputError(
        f"{folder / 'records.jsonl'}: none of its {len(records)} records belongs to "
        f"{experiment} (they are {', '.join(kinds)} records, copied or moved here?); "
        f"put them under OUT/{kinds[0]}/ and summarize that folder, or rerun the "
        f"{experiment} experiment"
    )


def summarize_tests(
    folder: str | Path,
    build: Callable[..., dict],
    *,
    name: str,
    correction: str | None = None,
    n_resamples: int | None = None,
) -> dict:
    """``summarize_folder`` for the per-head tests; options default to the summary's own."""
    path = Path(folder) / "summary.json"
    try:
        previous = json.loads(path.read_text("utf-8")) if path.is_file() else {}
    except ValueError:
        previous = {}
    options = {
        "correction": correction or previous.get("correction") or "bh",
        "n_resamples": n_resamples or previous.get("n_resamples"),
    }
    return summarize_folder(folder, lambda records: build(records, **options), name=name)


def by_name(records: Iterable[dict], experiment: str) -> dict[str, list[dict]]:
    """``experiment``'s records grouped by model name (every revision together)."""
    groups: dict[str, list[dict]] = {}
    for r in records:
        if r["experiment"] == experiment:
            groups.setdefault(r["model"], []).append(r)
    return groups


def mean_estimate(values: Iterable[float], *, seed: int = 0) -> dict | None:
    """Mean with a bootstrap CI as a dict; with one value the CI is null, with none None."""
    values = [float(v) for v in values]
    if not values:
        return None
    if len(values) == 1:
        return {
            "value": values[0],
            "low": None,
            "high": None,
            "confidence": 0.95,
            "method": "single value: no interval",
            "n": 1,
        }
    return stats.mean_ci(values, seed=seed).to_dict()


def skipped_reasons(records: Iterable[dict]) -> dict[str, int]:
    """How many records have no EB*, per reason."""
    return dict(
        Counter(_reason(r["metrics"]) for r in records if r["metrics"].get("eb_star") is None)
    )


def _reason(metrics: dict) -> str:
    flags = metrics.get("flags") or []
    known = [f for f in ("not_found", "too_long", "single_token", "at_position_0") if f in flags]
    return known[0] if known else str(metrics.get("skipped") or ", ".join(flags) or "no EB*")


__all__ = [
    "by_name",
    "folder_summary",
    "mean_estimate",
    "per_model_text",
    "per_model_view",
    "skipped_reasons",
    "summarize_folder",
    "summarize_tests",
]

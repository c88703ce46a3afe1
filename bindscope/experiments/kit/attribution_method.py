"""The attribution method of the scan and of patching: estimate every head, verify the top."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import spearmanr

from bindscope.errors import InputError
from bindscope.experiments.kit.experiment import ModelRun, model_records
from bindscope.experiments.kit.options import option
from bindscope.experiments.kit.per_head_tests import HeadTestOptions
from bindscope.interventions.flow_specs import Spec
from bindscope.protocols import LanguageModel
from bindscope.runners.attribution_metrics import Metric
from bindscope.runners.attribution_patching import attribution_scores

ESTIMATE = "scan-estimate"
METHODS = ("exact", "attribution")
DEFAULT_VERIFY = 20


@dataclass(frozen=True)
class AttributionOptions(HeadTestOptions):
    """A per-head test's ``--method`` and ``--verify`` (``scan``, ``patch``), checked once."""

    method: str = option(
        "exact",
        "exact: measure every head exactly; attribution: estimate every head by attribution "
        "patching (AtP*), then measure the --verify top heads exactly",
        choices=METHODS,
    )
    verify: int | None = option(
        None,
        f"heads measured exactly under --method attribution (default {DEFAULT_VERIFY})",
        metavar="K",
        least=1,
    )

    def check(self) -> None:
        """The per-head tests' options, then the method with its ``verify``."""
        super().check()
        if self.method == "exact" and self.verify is not None:
            raise InputError("--verify applies to --method attribution; drop it or add the method")
        if self.method == "attribution" and self.unit != "head":
            raise InputError("--method attribution estimates heads: it needs --unit head")

    def method_settings(self) -> dict[str, Any]:
        """What ``settings.json`` records: the method and, under attribution, ``verify``."""
        if self.method == "exact":
            return {"method": self.method}
        return {"method": self.method, "verify": self.verify or DEFAULT_VERIFY}


#: One item as attribution patching runs it: its text, its metric, the spec on every head.
Row = tuple[Any, Metric, Spec]


def estimate_heads(
    run: ModelRun,
    items: Sequence[Any],
    *,
    experiment: str,
    rows: Callable[[Any], Row],
    fields: Callable[[Any, float, np.ndarray], dict],
    verify: int,
    batch_size: int,
) -> list[str]:
    """Write one ``estimate`` record per item; return the ``verify`` heads to measure exactly."""
    model = run.model

    def work(chunk: list[Any]) -> list[dict]:
        texts, metrics, specs = map(list, zip(*(rows(item) for item in chunk)))
        value = np.zeros(len(texts))
        change = np.zeros((len(texts), model.n_layers, model.n_heads))
        for group in _groups(texts, specs):
            value[group], change[group] = attribution_scores(
                model,
                [texts[i] for i in group],
                [metrics[i] for i in group],
                per_row=[specs[i] for i in group],
                batch_size=batch_size,
            )
        return [fields(item, float(v), c) for item, v, c in zip(chunk, value, change)]

    run.chunks(
        items,
        work,
        key=lambda item: run.key(item.key, "estimate", name=experiment),
        chunk_size=batch_size,
        desc=f"{experiment} {model.name}",
    )
    return _select(model, items, run.writer.path, verify, experiment)


def _groups(texts: list, specs: list) -> list[list[int]]:
    # Resample refuses a text equal to its reference, even in another row of the same call
    donors = [list(s.reference[0]) if getattr(s, "reference", None) else None for s in specs]
    groups: list[list[int]] = []
    for i, donor in enumerate(donors):
        for group in groups:
            theirs = [(texts[j], donors[j]) for j in group]
            if all(donor != text and texts[i] != other for text, other in theirs):
                group.append(i)
                break
        else:
            groups.append([i])
    return groups


def _select(
    model: LanguageModel, items: Sequence[Any], path: Path, verify: int, experiment: str
) -> list[str]:
    keys = {item.key for item in items}
    records = model_records(path, experiment, model)
    maps = [r["metrics"]["estimate"] for r in records if r["prompt_key"] in keys]
    mean = np.mean(np.array(maps, dtype=float), 0)  # [L, H]
    order = sorted(np.ndindex(*mean.shape), key=lambda lh: (-abs(mean[lh]), lh))
    return [f"L{layer}.H{head}" for layer, head in order[:verify]]


def add_estimates(entry: dict, estimates: list[dict], prompts: list[str]) -> None:
    """Add the estimate map and the agreement on the verified heads to a model's entry."""
    block = entry["metrics"].get("logprob")
    by_prompt = {r["prompt_key"]: r["metrics"]["estimate"] for r in estimates}
    used = [p for p in prompts if p in by_prompt]
    if block is None or not used:
        return
    add_estimate(block, [by_prompt[p] for p in used], "n_estimated_prompts")
    for other in entry["metrics"].values():
        other["verified"] = [list(c["head"]) for c in block["top"]]


def add_estimate(block: dict, maps: list, count: str) -> None:
    """The mean of the items' estimate ``maps`` ([L][H]) in ``block``, beside its ``top`` cells."""
    mean = np.mean(np.array(maps, dtype=float), 0)  # [L, H]
    block["estimate"] = mean.tolist()
    block[count] = len(maps)
    for cell in block["top"]:
        layer, head = cell["head"]
        cell["estimate"] = float(mean[layer, head])
    block["agreement"] = agreement(block["top"])


def agreement(top: list[dict]) -> dict:
    """Estimate vs exact effect over the verified heads: Spearman, sign agreement, error."""
    pairs = [
        (c["estimate"], c["value"])
        for c in top
        if c.get("value") is not None and not math.isnan(c["value"])
    ]
    out: dict = {"n_verified": len(pairs), "spearman": None, "sign_agreement": None}
    if not pairs:
        return out
    est, exact = np.array(pairs).T
    out["sign_agreement"] = float(np.mean(np.sign(est) == np.sign(exact)))
    out["max_abs_error"] = float(np.max(np.abs(est - exact)))
    if len(pairs) >= 3 and np.ptp(est) > 0 and np.ptp(exact) > 0:
        out["spearman"] = float(spearmanr(est, exact).statistic)
    return out


__all__ = [
    "DEFAULT_VERIFY",
    "ESTIMATE",
    "METHODS",
    "AttributionOptions",
    "add_estimate",
    "add_estimates",
    "agreement",
    "estimate_heads",
]

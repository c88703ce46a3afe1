"""C5's named designs (``bindscope c5 --preset NAME``; ``make c5-powered``)."""

from __future__ import annotations

import hashlib
from typing import Any

from bindscope.experiments.kit.options import Preset
from bindscope.metrics.stats.frontier import TAIL_CALIBRATED_SETS
from bindscope.prompts.prompt_sets import PromptSet, load

#: The three embedded models (None: the default, SmolLM2-135M-Instruct).
EMBEDDED_MODELS: tuple[str | None, ...] = (None, "gemma-3-270m", "qwen2.5-coder-0.5b")
#: Random sets per null: the fewest at which the GPD tail p is calibrated
#: (benchmarks/c5_frontier.py picks this design; 199 sets take 2x as long).
POWERED_N_RANDOM = TAIL_CALIBRATED_SETS


def _by_task(pset: PromptSet, task: str) -> PromptSet:
    keep = tuple(r for r in pset if r.task == task)
    digest = hashlib.sha256((pset.sha256 + "|task=" + task).encode()).hexdigest()
    return PromptSet(f"{pset.name}-{task}", keep, digest)


def _powered_options() -> dict[str, Any]:
    canonical = load("canonical")
    items = _by_task(canonical, "recognition")
    n, terms = POWERED_N_RANDOM, len({r.term for r in items})
    design = (
        f"the powered design (bindscope c5 --preset powered): all {len(items)} recognition "
        f"items ({terms} terms x 5), heads ranked on every canonical prompt; a random and a "
        f"layer-matched null per model, each drawn sequentially up to {n} sets: the exact p "
        f"reaches 1/{n + 1} = {1 / (n + 1):.3f}, and the GPD tail p, calibrated from {n} sets, "
        "goes below 0.005 where few sets reach the top set; Holm across the models"
    )
    return {
        "prompts": items,
        "ranking": canonical,
        "k": 4,
        "n_random": POWERED_N_RANDOM,
        "sampling": "sequential",
        "matched_layers": True,
        "design": design,
    }


PRESETS = {
    "powered": Preset(
        f"all 205 recognition items, random and layer-matched nulls of up to "
        f"{POWERED_N_RANDOM} sets (the GPD tail p down to 0.005 and below), on the three "
        "embedded models unless --model is given; Holm across the models",
        _powered_options,
        EMBEDDED_MODELS,
    )
}

__all__ = ["EMBEDDED_MODELS", "POWERED_N_RANDOM", "PRESETS"]

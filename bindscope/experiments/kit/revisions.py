"""Training checkpoints: named revision lists, and loading one revision of a sweep."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from bindscope.errors import InputError
from bindscope.protocols import LanguageModel

_PYTHIA = [f"step{s}" for s in (0, 15000, 30000, 60000, 90000, 120000, 140000, 143000)]
_OLMO_STEPS = (1000, 80000, 110000, 330000, 460000, 620000, 720000, 738020)
_OLMO_TOKENS = (4, 335, 461, 1383, 1928, 2599, 3018, 3094)  # billions, by step
_OLMO = [f"step{s}-tokens{t}B" for s, t in zip(_OLMO_STEPS, _OLMO_TOKENS)]
_CRFM = [f"checkpoint-{s}" for s in (0, 1000, 5000, 10000, 50000, 100000, 200000, 400000)]
_SMOL_STEPS = (40000, 120000, 400000, 800000, 1200000, 1600000, 2400000, 3440000)
_SMOL = [f"stage1-step-{s}" for s in _SMOL_STEPS]

#: Named revision lists of the published study (spec 4.1), with the Hub id each belongs to.
PRESETS: dict[str, dict] = {
    "pythia-paper": {"model": "EleutherAI/pythia-160m-deduped", "revisions": _PYTHIA},
    "olmo-1b": {"model": "allenai/OLMo-1B-hf", "revisions": _OLMO},
    "crfm": {"model": "stanford-crfm/alias-gpt2-small-x21", "revisions": _CRFM},
    "smollm3": {"model": "HuggingFaceTB/SmolLM3-3B-checkpoints", "revisions": _SMOL},
}
#: The five CRFM GPT-2 small seeds share the ``crfm`` revisions.
CRFM_SEEDS = [
    "stanford-crfm/alias-gpt2-small-x21",
    "stanford-crfm/battlestar-gpt2-small-x49",
    "stanford-crfm/caprica-gpt2-small-x81",
    "stanford-crfm/darkmatter-gpt2-small-x343",
    "stanford-crfm/expanse-gpt2-small-x777",
]


def resolve_revisions(spec: str | Sequence[str]) -> list[str]:
    """A preset name (``pythia-paper``, ``olmo-1b``, ``crfm``, ``smollm3``) or a list."""
    if isinstance(spec, str):
        if spec in PRESETS:
            return list(PRESETS[spec]["revisions"])
        spec = [s.strip() for s in spec.split(",") if s.strip()]
    revisions = list(spec)
    if not revisions:
        raise InputError(
            f"no revisions given; pass a comma-separated list or a preset ({', '.join(PRESETS)})"
        )
    dupes = sorted({r for r in revisions if revisions.count(r) > 1})
    if dupes:
        raise InputError(f"revision(s) {dupes} listed twice; each revision is one checkpoint")
    return revisions


def load_revision(
    loader: Callable[..., LanguageModel], model: str, revision: str, **load_options: Any
) -> LanguageModel:
    """One checkpoint of a sweep, refused unless it is the revision asked for."""
    loaded = loader(model, revision=revision, **load_options)
    if loaded.revision != revision:
        raise InputError(
            f"asked for {model}@{revision}, but the loaded model is at revision "
            f"{loaded.revision!r}; the sweep would label one checkpoint as another"
        )
    loaded.name = model
    return loaded


__all__ = ["CRFM_SEEDS", "PRESETS", "load_revision", "resolve_revisions"]

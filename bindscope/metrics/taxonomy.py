"""Head taxonomy maths: what kind of head each (layer, head) is."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from bindscope.metrics.binding import pair_probs
from bindscope.metrics.ranking import top_heads
from bindscope.protocols import LanguageModel

#: Scores measured on natural text (the prompt templates).
TEXT_SCORES = ("sink", "previous_token", "spread")
#: Scores measured on repeated random-token sequences.
REPEATED_SCORES = ("induction", "duplicate_token")
SCORES = ("sink", "previous_token", "induction", "duplicate_token", "binding", "spread")

#: A head is in a class at or above its mean score's threshold: several times chance (about
#: 1/n for n keys, 0.03-0.1 on the prompt sets). Options: ``classify(..., thresholds=...)``.
THRESHOLDS: dict[str, float] = {
    "induction": 0.3,
    "duplicate_token": 0.3,
    "previous_token": 0.4,
    "binding": 0.3,
    "sink": 0.5,
}
#: A head's primary class: the first of these it crosses (its labels keep every one).
PRECEDENCE = ("induction", "duplicate_token", "previous_token", "binding", "sink")
OTHER = "other"
CLASSES = (*PRECEDENCE, OTHER)

#: Pythia's tokens per optimizer step: 1024 sequences x 2048 tokens (Biderman et al. 2023).
PYTHIA_TOKENS_PER_STEP = 1024 * 2048


def text_pairs(n: int) -> dict[str, list[tuple[int, int]]]:
    """The (query, key) pairs of ``sink`` and ``previous_token`` for a text of ``n`` tokens."""
    return {
        "sink": [(q, 0) for q in range(1, n)],
        "previous_token": [(q, q - 1) for q in range(1, n)],
    }


def repeated_pairs(start: int, length: int) -> dict[str, list[tuple[int, int]]]:
    """The (query, key) pairs of ``induction`` and ``duplicate_token``, copies from ``start``."""
    second = [start + length + j for j in range(length)]
    return {
        "induction": [(q, start + j + 1) for j, q in enumerate(second)],
        "duplicate_token": [(q, start + j) for j, q in enumerate(second)],
    }


def repeated_sequences(
    model: LanguageModel, *, n: int, length: int, seed: int
) -> tuple[list[list[int]], int, list[list[int]]]:
    """``n`` seeded sequences of ``length`` distinct ordinary tokens, each repeated twice.

    Returns the rows as the model sees them (BOS where it prepends one), the first random
    token's position, and each sequence's random tokens once.
    """
    vocab = min(len(model.tokenizer), model.hf.get_input_embeddings().weight.shape[0])
    special = set(model.tokenizer.all_special_ids)
    candidates = torch.tensor([i for i in range(vocab) if i not in special])
    if len(candidates) < length:
        raise ValueError(f"{model.name}: only {len(candidates)} ordinary tokens, need {length}")
    gen = torch.Generator().manual_seed(seed)
    bos = [model.tokenizer.bos_token_id] if model.prepend_bos else []
    tokens = [
        candidates[torch.randperm(len(candidates), generator=gen)[:length]].tolist()
        for _ in range(n)
    ]
    return [bos + t + t for t in tokens], len(bos), tokens


def scores_from_probs(probs: torch.Tensor) -> dict[str, torch.Tensor]:
    """``sink``, ``previous_token`` and ``spread`` ``[L, H]`` of one text's ``[L, H, n, n]``."""
    p = probs.double()
    if p.shape[-1] < 2:
        nan = torch.full(p.shape[:2], float("nan"), dtype=torch.float64)
        return {"sink": nan, "previous_token": nan.clone(), "spread": nan.clone()}
    ratio = 1.0 / (p * p).sum(-1)  # [L, H, n]
    return {
        "sink": p[:, :, 1:, 0].mean(-1),
        "previous_token": p.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1),
        "spread": ratio[:, :, 1:].mean(-1),
    }


def repeated_scores_from_probs(
    probs: torch.Tensor, *, start: int, length: int
) -> dict[str, torch.Tensor]:
    """``induction`` and ``duplicate_token`` ``[L, H]`` from a repeated sequence's probabilities."""
    pairs = repeated_pairs(start, length)
    return {name: pair_probs(probs, p).double().mean(-1) for name, p in pairs.items()}


def bootstrap_heads(
    values: np.ndarray,
    *,
    seed: int,
    n_resamples: int = 2000,
    confidence: float = 0.95,
) -> dict:
    """Mean per head of ``[n_texts, L, H]`` (NaN texts dropped), percentile bootstrap CI."""
    arr = np.asarray(values, dtype=np.float64)
    arr = arr[~np.isnan(arr).reshape(len(arr), -1).any(1)]
    n = len(arr)
    shape = arr.shape[1:]
    if n == 0:
        empty = dict.fromkeys(("value", "low", "high"))
        return {**empty, "n": 0, "confidence": confidence, "method": "no texts"}
    flat = arr.reshape(n, -1)
    mean = flat.mean(0)
    out = {"value": mean.reshape(shape).tolist(), "n": n, "confidence": confidence}
    if n == 1:
        return {**out, "low": None, "high": None, "method": "single text: no interval"}
    rng = np.random.default_rng(seed)
    # resample counts, not indices: [B, n] @ [n, L*H] keeps memory at O(B x heads)
    counts = rng.multinomial(n, np.full(n, 1.0 / n), size=n_resamples)  # [B, n]
    means = counts @ flat / n  # [B, L*H]
    alpha = (1 - confidence) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha], axis=0)
    return {
        **out,
        "low": low.reshape(shape).tolist(),
        "high": high.reshape(shape).tolist(),
        "method": f"bootstrap-percentile over texts ({n_resamples} resamples)",
    }


def classify(
    means: Mapping[str, Sequence], *, thresholds: Mapping[str, float] | None = None
) -> dict:
    """Every head's classes (``labels``) and ``primary`` class by thresholds on its mean scores."""
    rule = {**THRESHOLDS, **(thresholds or {})}
    unknown = sorted(set(rule) - set(PRECEDENCE))
    if unknown:
        raise ValueError(f"no class {unknown}; thresholds apply to {', '.join(PRECEDENCE)}")
    shape = next(np.asarray(v, dtype=float).shape for v in means.values() if v is not None)
    arrays = {c: np.asarray(means[c], dtype=float) for c in PRECEDENCE if means.get(c) is not None}
    labels: list[list[list[str]]] = [[[] for _ in range(shape[1])] for _ in range(shape[0])]
    for c in PRECEDENCE:
        if c in arrays:
            for layer, head in zip(*np.nonzero(arrays[c] >= rule[c])):
                labels[layer][head].append(c)
    primary = [[h[0] if h else OTHER for h in row] for row in labels]
    return {
        "thresholds": {c: rule[c] for c in PRECEDENCE},
        "labels": labels,
        "primary": primary,
        "counts": {c: sum(c in h for row in labels for h in row) for c in PRECEDENCE},
        "primary_counts": {c: sum(p == c for row in primary for p in row) for c in CLASSES},
    }


def overlap(heads: Sequence[Sequence[int]], labels: list) -> dict[str, int]:
    """How many of ``heads`` carry each class label (``other``: none)."""
    out = dict.fromkeys(CLASSES, 0)
    for layer, head in heads:
        for c in labels[layer][head] or [OTHER]:
            out[c] += 1
    return out


def draw_class_matched_sets(
    primary: Sequence[Sequence[str]],
    top: Sequence[Sequence[int]],
    *,
    n: int,
    seed: int,
) -> list[list[list[int]]]:
    """``n`` seeded head sets drawn outside ``top``, a head of each top head's primary class."""
    rng = np.random.default_rng(seed)
    excluded = {tuple(h) for h in top}
    pools: dict[str, list[tuple[int, int]]] = {}
    for layer, row in enumerate(primary):
        for head, cls in enumerate(row):
            if (layer, head) not in excluded:
                pools.setdefault(cls, []).append((layer, head))
    needed: dict[str, int] = {}
    for layer, head in top:
        cls = primary[layer][head]
        needed[cls] = needed.get(cls, 0) + 1
        if needed[cls] > len(pools.get(cls, [])):
            raise ValueError(
                f"top head L{layer}.H{head} is a {cls} head, but only "
                f"{len(pools.get(cls, []))} {cls} head(s) lie outside the top set; lower "
                "that class's threshold or match layers instead"
            )
    sets = []
    for _ in range(n):
        chosen: list[list[int]] = []
        for layer, head in top:
            options = [p for p in pools[primary[layer][head]] if list(p) not in chosen]
            chosen.append(list(options[rng.integers(len(options))]))
        sets.append(sorted(chosen))
    return sets


def revision_tokens(model: str, revision: str | None) -> int | None:
    """Training tokens at a checkpoint: OLMo's ``tokens4B`` in its name, or Pythia's step."""
    if not revision:
        return None
    found = re.search(r"tokens(\d+(?:\.\d+)?)([KMBT]?)", revision)
    if found:
        scale = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}[found.group(2)]
        return int(float(found.group(1)) * scale)
    step = re.fullmatch(r"step(\d+)", revision)
    if step and "pythia" in model.lower():
        return int(step.group(1)) * PYTHIA_TOKENS_PER_STEP
    return None


TOKENS_SOURCE = (
    "revision names (OLMo stepN-tokensXB; Pythia stepN x 2,097,152 tokens per step, "
    "1024 x 2048-token sequences, Biderman et al. 2023)"
)


def emergence(
    revisions: Sequence[str],
    means: Sequence[Mapping[str, Sequence]],
    *,
    model: str,
    thresholds: Mapping[str, float] | None = None,
    top_k: int = 4,
) -> dict:
    """Each class's emergence over ``revisions`` (training order) from their mean scores."""
    classes = [classify(m, thresholds=thresholds) for m in means]
    n_heads_total = next(
        int(np.asarray(v).size) for m in means for v in m.values() if v is not None
    )
    tokens = [revision_tokens(model, r) for r in revisions]
    first = _first_crossings(revisions, classes, tokens)
    return {
        "revisions": list(revisions),
        "tokens": tokens,
        "thresholds": classes[0]["thresholds"],
        "fraction": {c: [cl["counts"][c] / n_heads_total for cl in classes] for c in PRECEDENCE},
        "max_score": {
            c: [float(np.nanmax(m[c])) if m.get(c) is not None else None for m in means]
            for c in PRECEDENCE
        },
        "first": first,
        "trajectories": _trajectories(means, top_k),
        "induction_lead_tokens": _induction_lead(first),
        "tokens_source": TOKENS_SOURCE,
    }


def _first_crossings(
    revisions: Sequence[str], classes: Sequence[dict], tokens: Sequence[int | None]
) -> dict[str, dict | None]:
    hits = {
        c: next((i for i, cl in enumerate(classes) if cl["counts"][c] > 0), None)
        for c in PRECEDENCE
    }
    return {
        c: None if i is None else {"revision": revisions[i], "index": i, "tokens": tokens[i]}
        for c, i in hits.items()
    }


def _induction_lead(first: Mapping[str, dict | None]) -> int | None:
    sink, induction = first["sink"], first["induction"]
    if not (sink and induction) or sink["tokens"] is None or induction["tokens"] is None:
        return None
    return sink["tokens"] - induction["tokens"]


def _trajectories(means: Sequence[Mapping[str, Sequence]], top_k: int) -> dict:
    trajectories = {}
    for score in SCORES:
        if means[-1].get(score) is None:
            continue
        heads = [list(head) for head in top_heads(np.asarray(means[-1][score], dtype=float), top_k)]
        trajectories[score] = {
            "heads": heads,
            "values": [
                [None if m.get(score) is None else float(np.asarray(m[score])[l, h])
                 for m in means]
                for l, h in heads  # noqa: E741
            ],
        }  # fmt: skip
    return trajectories


def spread_fraction(spread: Sequence, mean_keys: float) -> list:
    """Spread as a fraction of the keys a query can see on average (for a shared 0-1 scale)."""
    arr = np.asarray(spread, dtype=float)
    return (arr / mean_keys).tolist() if mean_keys and not math.isnan(mean_keys) else arr.tolist()


__all__ = [
    "CLASSES",
    "PRECEDENCE",
    "PYTHIA_TOKENS_PER_STEP",
    "REPEATED_SCORES",
    "SCORES",
    "TEXT_SCORES",
    "THRESHOLDS",
    "bootstrap_heads",
    "classify",
    "draw_class_matched_sets",
    "emergence",
    "overlap",
    "repeated_pairs",
    "repeated_scores_from_probs",
    "repeated_sequences",
    "revision_tokens",
    "scores_from_probs",
    "spread_fraction",
    "text_pairs",
]

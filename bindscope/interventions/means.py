"""Reference means of a site, for ``Mean`` at a site (``head_means`` is the heads' form)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from bindscope.batch import DEFAULT_BATCH_SIZE
from bindscope.protocols import LanguageModel

__all__ = ["SiteMeans", "site_means"]


@dataclass(frozen=True)
class SiteMeans:
    """Mean activation of one site per layer over a reference set of texts.

    Attributes:
        site: The site (``families.SITE_NAMES``).
        means: ``{layer: [d_model]}`` float32 (``[H, head_dim]`` at head_out), over every
            real (non-pad) position.
        n_positions: Number of token positions averaged.
    """

    site: str
    means: dict[int, torch.Tensor]
    n_positions: int


@torch.no_grad()
def site_means(
    model: LanguageModel,
    texts: Sequence[str],
    site: str,
    layers: Iterable[int] | None = None,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> SiteMeans:
    """Average ``site`` of ``layers`` (default all) over every position of ``texts``."""
    wanted = model.check_layers(layers)
    captured = model.capture(texts, sites=[site], layers=wanted, batch_size=batch_size)
    count = sum(found[site][wanted[0]].shape[0] for found in captured)
    means = {
        layer: torch.cat([found[site][layer] for found in captured]).sum(0) / count
        for layer in wanted
    }
    return SiteMeans(site, means, count)

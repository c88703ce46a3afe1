"""Reference means: of a site for ``Mean``, of every edge sender for ``PathPatch(means=)``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from bindscope.batch import DEFAULT_BATCH_SIZE
from bindscope.interventions.trace.records import TraceMeans
from bindscope.protocols import LanguageModel

__all__ = ["EdgeMeans", "SiteMeans", "edge_means", "site_means"]


@dataclass(frozen=True)
class SiteMeans:
    """Mean activation of one site per layer (``[d]``, ``[H, hd]`` at head_out) over real tokens."""

    site: str
    means: dict[int, torch.Tensor]
    n_positions: int

    def __reduce__(self):
        # bindscope is not installed on the server: it travels as a plain TraceMeans
        return (TraceMeans, (dict(self.means), self.n_positions))


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
    return SiteMeans(site, {layer: _mean(captured, site, layer, count) for layer in wanted}, count)


def _mean(captured: list, site: str, layer: int, count: int) -> torch.Tensor:
    return torch.cat([found[site][layer] for found in captured]).sum(0) / count


@dataclass(frozen=True)
class EdgeMeans:
    """Each edge sender's mean output over a reference set (``PathPatch(means=...)``).

    ``heads`` are the output projection's inputs ``[H * hd]`` (a head's mean output is its
    slice through the projection and any sandwich norm).
    """

    embed: torch.Tensor
    heads: dict[int, torch.Tensor]
    mlps: dict[int, torch.Tensor]
    n_positions: int

    def trace_means(self) -> dict:
        """The plain dict a trace body reads (``ops.PathPlan.means``)."""
        found: dict = {"embed": self.embed}
        found.update({("z", layer): z for layer, z in self.heads.items()})
        found.update({("mlp", layer): y for layer, y in self.mlps.items()})
        return found


@torch.no_grad()
def edge_means(
    model: LanguageModel, texts: Sequence, *, batch_size: int = DEFAULT_BATCH_SIZE
) -> EdgeMeans:
    """Every edge sender's mean output over every real position of ``texts``."""
    sites = ["resid_pre", "head_out", "mlp_out"]
    captured = model.capture(texts, sites=sites, batch_size=batch_size)
    count = sum(found["resid_pre"][0].shape[0] for found in captured)
    layers = range(model.n_layers)
    return EdgeMeans(
        _mean(captured, "resid_pre", 0, count),
        {layer: _mean(captured, "head_out", layer, count).reshape(-1) for layer in layers},
        {layer: _mean(captured, "mlp_out", layer, count) for layer in layers},
        count,
    )

"""Reference means, and their checks: of a site for ``Mean``, of edge senders for ``PathPatch``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from bindscope.batch import DEFAULT_BATCH_SIZE
from bindscope.errors import InterventionError
from bindscope.families import HEAD_SITES
from bindscope.interventions.rowops import Units, unit_shape
from bindscope.interventions.trace.records import TraceMeans
from bindscope.protocols import LanguageModel

__all__ = [
    "EdgeMeans",
    "SiteMeans",
    "checked_feature_means",
    "checked_means",
    "edge_means",
    "site_means",
]


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


def checked_means(
    model: LanguageModel, spec: Any, site: str, units: Units
) -> dict[int, torch.Tensor]:
    """A ``Mean``'s means, each layer's as ``[U, k]``: checked for presence, shape, finiteness."""
    means = getattr(spec.means, "means", spec.means)
    helper = (
        "head_means(model, reference, heads)"
        if site == "head_out"
        else f"site_means(model, reference, {site!r}, layers)"
    )
    taken_at = getattr(spec.means, "site", site)  # SiteMeans says; a dict cannot
    if taken_at != site:
        raise InterventionError(
            f"{model.name}: {spec.describe()} replaces site {site!r} but its means were taken "
            f"at site {taken_at!r}; build them with {helper}"
        )
    if not isinstance(means, dict):
        raise InterventionError(
            f"{model.name}: {spec.describe()} needs means={helper}, got {type(spec.means).__name__}"
        )
    shape = unit_shape(model, site)
    wanted = list(shape) if site in HEAD_SITES else [shape[0] * shape[1]]
    out = {}
    for layer, unit_list in units:
        if layer not in means:
            where = f"head ({layer}, {unit_list[0]})" if site == "head_out" else site
            raise InterventionError(
                f"{model.name}: no reference means for layer {layer} ({where}); "
                f"include the layer in {helper}"
            )
        value = means[layer]
        if not isinstance(value, torch.Tensor) or list(value.shape) != wanted:
            got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise InterventionError(
                f"{model.name}: {spec.describe()}: the means of layer {layer} are {got}, not a "
                f"tensor [{', '.join(map(str, wanted))}]; build them with {helper}"
            )
        for unit in unit_list if site == "head_out" else (None,):
            part = value if unit is None else value[unit]
            if not bool(torch.isfinite(part).all()):
                name = f"head ({layer}, {unit})" if unit is not None else site
                raise InterventionError(
                    f"{model.name}: {spec.describe()}: the means of {name} (layer {layer}) are "
                    f"not finite; recompute them with {helper} on texts the model runs cleanly"
                )
        out[layer] = value.view(*shape)
    return out


def checked_feature_means(model: LanguageModel, spec: Any, units: Units) -> dict[int, torch.Tensor]:
    """A feature ``Mean``'s means (``feature_means(...)``, ``[d_sae]``) as ``{layer: [F, 1]}``."""
    dictionary = spec.heads.dictionary
    means = spec.means
    if not isinstance(means, torch.Tensor) or tuple(means.shape) != (dictionary.d_sae,):
        got = tuple(means.shape) if isinstance(means, torch.Tensor) else type(means).__name__
        raise InterventionError(
            f"{model.name}: {spec.describe()} needs means=feature_means(model, reference, "
            f"dictionary), a [{dictionary.d_sae}] tensor; got {got}"
        )
    if not bool(torch.isfinite(means).all()):
        raise InterventionError(f"{model.name}: {spec.describe()}: the means are not finite")
    return {layer: means.float().view(-1, 1) for layer, _ in units}

"""A dictionary's quality as the field reports it: FVU, dead latents, L0, spliced loss."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from bindscope.errors import InputError
from bindscope.interventions.trace.sites import site_module
from bindscope.nnsight_private import underlying_module

Encoder = Any  # an SAE with encode(x) -> [..., d_sae] and decode(f) -> [..., d_in]


@dataclass(frozen=True)
class Reconstruction:
    """How well a dictionary reconstructs activations (``dead_share``: never active)."""

    fvu: float
    l0: float
    dead_share: float
    tokens: int

    @property
    def explained_variance(self) -> float:
        """``1 - fvu``."""
        return 1.0 - self.fvu


@dataclass(frozen=True)
class SplicedLoss:
    """Mean next-token loss (nats): plain, reconstruction spliced in, site zeroed."""

    clean: float
    spliced: float
    zero: float
    tokens: int

    @property
    def delta(self) -> float:
        """The loss the splice adds."""
        return self.spliced - self.clean

    @property
    def recovered(self) -> float:
        """``(zero - spliced) / (zero - clean)``: 1 is the plain model, 0 the zeroed site."""
        return (self.zero - self.spliced) / (self.zero - self.clean)


@torch.no_grad()
def reconstruction(sae: Encoder, activations: torch.Tensor, *, chunk: int = 4096) -> Reconstruction:
    """FVU, L0 and the dead share of ``sae`` on ``activations`` ``[tokens, d_in]``."""
    x = activations.float()
    error = torch.zeros(())
    active = 0.0
    alive: torch.Tensor | None = None
    for part in x.split(chunk):
        latents = sae.encode(part)
        error += (part - sae.decode(latents)).pow(2).sum()
        on = latents != 0
        active += on.sum().item()
        alive = on.any(0) if alive is None else alive | on.any(0)
    if alive is None:
        raise InputError("reconstruction: no activations given")
    total = (x - x.mean(0)).pow(2).sum()
    dead = 1.0 - alive.float().mean().item()
    return Reconstruction((error / total).item(), active / len(x), dead, len(x))


@torch.no_grad()
def spliced_loss(
    model: Any, texts: Sequence[str], sae: Encoder, *, site: str, layer: int
) -> SplicedLoss:
    """Next-token loss with ``site`` of ``layer`` (but position 0) replaced by ``sae``'s."""
    module, index = _output_module(model, site, layer)
    edits: dict[str, Callable | None] = {
        "clean": None,
        "spliced": lambda x: sae.decode(sae.encode(x)),
        "zero": torch.zeros_like,
    }
    losses = dict.fromkeys(edits, 0.0)
    tokens = 0
    for text in texts:
        ids = torch.tensor([model.tokenize(text)])
        for name, edit in edits.items():
            losses[name] += _summed_loss(model.hf, ids, module, index, edit)
        tokens += ids.shape[1] - 1
    clean, spliced, zero = (losses[name] / tokens for name in edits)
    return SplicedLoss(clean, spliced, zero, tokens)


def _output_module(model: Any, site: str, layer: int) -> tuple[torch.nn.Module, int]:
    where = model.sites.get(site)
    if where is None or where[1] != "output":
        outputs = sorted(name for name, at in model.sites.items() if at[1] == "output")
        raise InputError(f"{model.name}: the splice needs a module output site, one of {outputs}")
    module = underlying_module(site_module(model.nnsight, layer, where[0]))
    return module, where[2]


def _summed_loss(
    hf: Any, ids: torch.Tensor, module: torch.nn.Module, index: int, edit: Callable | None
) -> float:

    # a plain torch hook, not bindscope's trace, so the splice checks the feature sites
    def hook(_module: Any, _inputs: Any, output: Any) -> Any:
        value = output[index] if isinstance(output, tuple) else output
        changed = torch.cat([value[:, :1], edit(value[:, 1:])], dim=1)  # type: ignore[misc]
        if isinstance(output, tuple):
            return (*output[:index], changed, *output[index + 1 :])
        return changed

    handle = module.register_forward_hook(hook) if edit is not None else None
    try:
        logits = hf(ids).logits[0, :-1].float()  # [n - 1, vocab]
    finally:
        if handle is not None:
            handle.remove()
    return torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="sum").item()

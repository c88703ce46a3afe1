"""A small TopK sparse autoencoder trained on one site's captured activations (torch only)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from bindscope.errors import InputError
from bindscope.interventions.dictionary import Dictionary
from bindscope.interventions.hook_names import hook_name
from bindscope.interventions.trace.features import TraceDictionary
from bindscope.prompts import load

AUX_COEFFICIENT = 1 / 32  # AuxK's weight (Gao et al. 2024, "Scaling and evaluating SAEs")


class TopKSAE(nn.Module):
    """SAELens' TopK SAE: ``f = relu(topk((x - b_dec) @ W_enc + b_enc))``, ``f @ W_dec + b_dec``."""

    def __init__(self, d_in: int, d_sae: int, k: int, *, seed: int = 0) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        decoder = torch.randn(d_sae, d_in, generator=generator)
        decoder /= decoder.norm(dim=1, keepdim=True)
        self.W_dec = nn.Parameter(decoder)  # [d_sae, d_in]
        self.W_enc = nn.Parameter(decoder.T.clone())  # [d_in, d_sae]
        self.b_enc = nn.Parameter(torch.zeros(d_sae))
        self.b_dec = nn.Parameter(torch.zeros(d_in))
        self.k = k

    def pre_activations(self, x: torch.Tensor) -> torch.Tensor:
        """Encoder pre-activations ``[..., d_sae]``."""
        return (x - self.b_dec) @ self.W_enc + self.b_enc

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Latents ``[..., d_sae]``: at most ``k`` nonzero per row."""
        return keep_top(self.pre_activations(x), self.k)

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """The reconstruction ``[..., d_in]``."""
        return latents @ self.W_dec + self.b_dec

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``decode(encode(x))``."""
        return self.decode(self.encode(x))

    def to_dictionary(self, *, site: str, layer: int, model_name: str | None = None) -> Dictionary:
        """The weights as a `Dictionary` of ``site`` at ``layer`` (``save`` writes SAELens')."""
        enc, b_enc, dec, b_dec = (
            p.detach().clone() for p in (self.W_enc, self.b_enc, self.W_dec, self.b_dec)
        )
        weights = TraceDictionary(enc, b_enc, dec, b_dec, threshold=None, k=self.k, input_bias=True)
        return Dictionary(site, layer, weights, "topk", hook_name(site, layer), model_name)


def keep_top(pre: torch.Tensor, k: int) -> torch.Tensor:
    """The ``k`` largest entries of each row through a ReLU, the rest zero."""
    top = pre.topk(k, dim=-1)
    return torch.zeros_like(pre).scatter(-1, top.indices, top.values.relu())


@dataclass(frozen=True)
class TrainOptions:
    """How `train_topk` trains (``dead_after``: idle steps before a latent joins AuxK)."""

    width: int = 2048
    k: int = 32
    steps: int = 2000
    batch_size: int = 512
    lr: float = 5e-4
    aux_k: int = 256
    dead_after: int = 100
    seed: int = 0


def train_topk(activations: torch.Tensor, options: TrainOptions = TrainOptions()) -> TopKSAE:
    """A TopK SAE trained on ``activations`` ``[tokens, d]`` with Adam on the normalised MSE."""
    x = _checked(activations, options)
    # trained at mean norm sqrt(d), the scale folded into the weights after
    scale = math.sqrt(x.shape[1]) / x.norm(dim=1).mean().item()
    x = x * scale
    sae = TopKSAE(x.shape[1], options.width, options.k, seed=options.seed)
    sae.b_dec.data = x.mean(0)
    variance = (x - x.mean(0)).pow(2).sum(1).mean()  # per token: the FVU denominator
    optimizer = torch.optim.Adam(sae.parameters(), lr=options.lr)
    idle = torch.zeros(options.width, dtype=torch.long)
    generator = torch.Generator().manual_seed(options.seed)
    for _ in range(options.steps):
        batch = x[torch.randint(len(x), (options.batch_size,), generator=generator)]
        loss, fired = _loss(sae, batch, variance, idle >= options.dead_after, options.aux_k)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            sae.W_dec.data /= sae.W_dec.norm(dim=1, keepdim=True)
        idle = torch.where(fired, 0, idle + 1)
    return _folded(sae, scale)


def _checked(activations: torch.Tensor, options: TrainOptions) -> torch.Tensor:
    if activations.ndim != 2 or not activations.isfinite().all():
        shape = tuple(activations.shape)
        raise InputError(f"train_topk: activations must be finite [tokens, d], got {shape}")
    if not 0 < options.k <= options.width:
        raise InputError(f"train_topk: k={options.k} must be in 1..width={options.width}")
    return activations.detach().float()


def _loss(
    sae: TopKSAE, x: torch.Tensor, variance: torch.Tensor, dead: torch.Tensor, aux_k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    pre = sae.pre_activations(x)
    latents = keep_top(pre, sae.k)
    residual = x - sae.decode(latents)
    loss = residual.pow(2).sum(1).mean() / variance
    if dead.any():
        aux = keep_top(pre.masked_fill(~dead, -math.inf), min(aux_k, int(dead.sum())))
        error = residual.detach() - aux @ sae.W_dec
        loss = loss + AUX_COEFFICIENT * error.pow(2).sum(1).mean() / variance
    return loss, (latents != 0).any(0)


@torch.no_grad()
def _folded(sae: TopKSAE, scale: float) -> TopKSAE:
    sae.W_enc.data *= scale
    sae.W_dec.data /= scale
    sae.b_dec.data /= scale
    return sae.requires_grad_(False)


def training_texts(
    model: Any,
    *,
    samples: int = 64,
    new_tokens: int = 96,
    seed: int = 0,
    prompt_sets: Sequence[str] = ("canonical", "controls"),
) -> list[str]:
    """Text the model samples from its start token (seeded), then the prompt sets' templates."""
    start = model.tokenizer.bos_token_id
    start = model.tokenizer.eos_token_id if start is None else start
    torch.manual_seed(seed)
    start_ids = torch.full((samples, 1), start)
    mask, pad = torch.ones_like(start_ids), model.tokenizer.pad_token_id
    ids = model.hf.generate(
        start_ids, attention_mask=mask, do_sample=True, max_new_tokens=new_tokens, pad_token_id=pad
    )
    sampled = model.tokenizer.batch_decode(ids[:, 1:], skip_special_tokens=True)
    prompts = [record.template for name in prompt_sets for record in load(name)]
    return [text.strip() for text in sampled if text.strip()] + prompts


def site_activations(
    model: Any, texts: Sequence[str], *, site: str, layer: int, batch_size: int = 8
) -> torch.Tensor:
    """``[tokens, d]`` activations of ``site`` at ``layer``, but the sink at each position 0."""
    got = model.capture(texts, sites=[site], layers=[layer], batch_size=batch_size)
    return torch.cat([captured[site][layer][1:] for captured in got])

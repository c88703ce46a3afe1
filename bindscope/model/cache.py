"""``Model.run_with_cache``: activations with TransformerLens' ``ActivationCache`` helpers.

Parts are float64 and sum exactly to the stream: a norm after attention (OLMo 2, Gemma 2/3)
is applied to each part with its scale frozen at this run's value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from bindscope.batch import DEFAULT_BATCH_SIZE
from bindscope.errors import InputError
from bindscope.interventions import head_weights, ops
from bindscope.metrics.attribution import frozen_norm
from bindscope.nnsight_private import underlying_module
from bindscope.protocols import LanguageModel

CACHED_SITES = ("resid_pre", "head_out", "mlp_out", "resid_post")


@dataclass(frozen=True)
class Stack:
    """Parts of a residual stream: ``values`` ``[parts, n, d]`` float64, one label per part."""

    values: torch.Tensor
    labels: tuple[str, ...]


@dataclass(eq=False, repr=False)
class Cache:
    """One text's captures: ``cache["resid_pre", 2]`` ``[n, d]``; ``cache["resid_pre"]`` a dict."""

    model: LanguageModel
    acts: dict[str, dict[int, torch.Tensor]]

    def __getitem__(self, key: str | tuple[str, int]):
        if isinstance(key, tuple):
            return self.acts[key[0]][key[1]]
        return self.acts[key]

    @property
    def final_resid(self) -> torch.Tensor:
        """``[n, d]`` float64: the residual stream entering the final norm."""
        return self.acts["resid_post"][self.model.n_layers - 1].double()

    def _layers(self, layer: int | None) -> range:
        last = self.model.n_layers if layer is None else layer
        if not 0 <= last <= self.model.n_layers:
            raise InputError(
                f"{self.model.name}: layer={layer} is outside 0..{self.model.n_layers} "
                "(n_layers, or None, is the final residual stream)"
            )
        return range(last)

    def accumulated_resid(self, layer: int | None = None) -> Stack:
        """``resid_pre`` of layers ``0..layer`` (None: every layer, then the final stream)."""
        n, top = self.model.n_layers, len(self._layers(layer))
        values = [self.acts["resid_pre"][i].double() for i in range(min(top + 1, n))]
        labels = [f"{i}_pre" for i in range(len(values))]
        if top == n:
            values.append(self.final_resid)
            labels.append("final_post")
        return Stack(torch.stack(values), tuple(labels))

    def _layer_parts(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        z = self.acts["head_out"][layer].double()  # [n, H, hd]
        heads = torch.einsum("nhk,hkd->nhd", z, head_weights.layer_w_o(self.model, layer).double())
        bias = head_weights.layer_b_o(self.model, layer).double().expand(z.shape[0], -1)
        post = self.model.family_row.attention_post_norm
        if post:  # the norm after attention, its scale frozen at this run's value
            norm = underlying_module(ops.site_module(self.model.nnsight, layer, post))
            source = heads.sum(1) + bias
            heads, bias = frozen_norm(norm, source, heads), frozen_norm(norm, source, bias)
        return heads.transpose(0, 1), bias

    def stack_head_results(self, layer: int | None = None) -> Stack:
        """Every head's output of layers before ``layer`` (None: all), as added to the stream."""
        layers = self._layers(layer)
        none = self.final_resid[None][:0]  # [0, n, d]: the stack of no layer
        heads = [self._layer_parts(i)[0] for i in layers]
        labels = [f"L{i}H{h}" for i in layers for h in range(self.model.n_heads)]
        return Stack(torch.cat([none, *heads]), tuple(labels))

    def decompose_resid(self, layer: int | None = None) -> Stack:
        """``resid_pre`` of ``layer`` (None: the final stream) as embedding, heads, biases, MLPs."""
        parts, labels = [self.acts["resid_pre"][0].double()[None]], ["embed"]
        for i in self._layers(layer):
            heads, bias = self._layer_parts(i)
            parts += [heads, bias[None], self.acts["mlp_out"][i].double()[None]]
            labels += [f"L{i}H{h}" for h in range(self.model.n_heads)]
            labels += [f"L{i}_attn_bias", f"L{i}_mlp"]
        return Stack(torch.cat(parts), tuple(labels))

    def apply_ln_to_stack(self, stack: Stack) -> Stack:
        """The final norm applied to each part, its scale frozen at this run's, without bias."""
        norm = underlying_module(
            getattr(self.model.nnsight.model, self.model.family_row.final_norm)
        )
        normed = frozen_norm(norm, self.final_resid, stack.values.transpose(0, 1))  # [n, C, d]
        return Stack(normed.transpose(0, 1), stack.labels)

    def logit_attrs(
        self,
        stack: Stack,
        tokens: int | Sequence[int],
        incorrect: int | Sequence[int] | None = None,
    ) -> torch.Tensor:
        """Direct logit attribution ``[parts, n]`` onto ``tokens`` (less ``incorrect``'s)."""
        direction = self._unembed(tokens)
        if incorrect is not None:
            direction = direction - self._unembed(incorrect)
        return (self.apply_ln_to_stack(stack).values * direction).sum(-1)

    def _unembed(self, tokens: int | Sequence[int]) -> torch.Tensor:
        n = self.final_resid.shape[0]
        ids = [int(tokens)] * n if isinstance(tokens, int) else [int(t) for t in tokens]
        if len(ids) != n:
            raise InputError(
                f"{self.model.name}: {len(ids)} tokens for {n} positions; "
                "give one id or one per position"
            )
        return head_weights.W_U(self.model).double().T[ids]


@torch.no_grad()
def run_with_cache(
    model: LanguageModel, texts: Sequence[str], *, batch_size: int = DEFAULT_BATCH_SIZE
) -> list[Cache]:
    """A `Cache` per text (local models only: the helpers read the weights)."""
    head_weights.weights_here(model)
    captured = model.capture(texts, sites=CACHED_SITES, batch_size=batch_size)
    return [Cache(model, acts) for acts in captured]

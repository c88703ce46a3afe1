"""Dictionary features (SAE and transcoder latents) as a site: encode, edit, decode the change.

Only ``decode(edited f) - decode(f)`` is written back: the reconstruction error stays and
a cell the edit leaves alone is bit-identical.
"""

from __future__ import annotations

from typing import Any

import torch

from bindscope.interventions.trace.edits import DonorEdit, Edit


def features_key(site: str):
    """The name a dictionary's features at ``site`` go by in claims and estimates."""
    return "features of " + site


class TraceDictionary:
    """A dictionary's weights and activation as plain tensors (SAELens' layout).

    ``source``: the site a transcoder's encoder reads (``mlp_in`` or ``resid_mid``), else None.
    """

    def __init__(
        self,
        W_enc: torch.Tensor,
        b_enc: torch.Tensor,
        W_dec: torch.Tensor,
        b_dec: torch.Tensor,
        threshold: torch.Tensor | None = None,
        k: int | None = None,
        input_bias: bool = True,
        source: str | None = None,
    ):
        self.W_enc, self.b_enc, self.W_dec, self.b_dec = W_enc, b_enc, W_dec, b_dec
        self.threshold, self.k = threshold, k  # JumpReLU's [F] threshold, TopK's k, or None
        self.input_bias = input_bias  # b_dec is subtracted before encoding
        self.source = source

    def encode(self, x: torch.Tensor):
        """Feature activations ``[..., F]`` of ``x`` ``[..., d_in]``."""
        W = self.W_enc.to(x.device)
        x = x.to(W.dtype)
        if self.input_bias:
            x = x - self.b_dec.to(x.device)
        pre = x @ W + self.b_enc.to(x.device)  # [..., F]
        if self.k is not None:
            top = pre.topk(self.k, dim=-1)
            pre = torch.zeros_like(pre).scatter(-1, top.indices, top.values)
        acts = torch.relu(pre)
        if self.threshold is not None:
            acts = acts * (pre > self.threshold.to(x.device))
        return acts

    def decode(self, f: torch.Tensor):
        """The reconstruction ``f @ W_dec + b_dec`` ``[..., d_in]`` of features ``f``."""
        return f @ self.W_dec.to(f.device) + self.b_dec.to(f.device)

    def decode_change(self, change: torch.Tensor):
        """``decode(f + change) - decode(f)``: ``change @ W_dec`` (the decoder is affine)."""
        return change @ self.W_dec.to(change.device)


class FeatureEdit(Edit):
    """An edit of a dictionary's features at a site: ``inner`` edits the ``[b, s, F, 1]`` view.

    A donor edit's donors are encoded the same way; a transcoder's ``f`` encodes ``reads``,
    ``(source, layer)``, handed in ``donors["inputs"]`` by the walk.
    """

    def __init__(self, inner: Edit, dictionary: TraceDictionary, layer: int = 0):
        Edit.__init__(self, inner.where)
        self.every_position = inner.every_position
        self.inner, self.dictionary = inner, dictionary
        self.reads = None if dictionary.source is None else (dictionary.source, layer)

    def features(self, view: torch.Tensor, donors: Any):
        """``(f, new f)`` of the view ``[b, s, U, k]``, each ``[b, s, F, 1]``."""
        x = view if self.reads is None else donors["inputs"][self.reads]  # a transcoder's
        f = self.dictionary.encode(x.flatten(2))[..., None]
        if isinstance(self.inner, DonorEdit):
            acts = donors[self.inner.key].flatten(2)  # [d, W, d_in]
            donors = {self.inner.key: self.dictionary.encode(acts)[..., None]}
        inner = self.inner
        return f, torch.where(inner.mask(f), inner.target(f, donors), f)

    def target(self, view: torch.Tensor, donors: Any):
        """The view with the features' change decoded into it."""
        f, new = self.features(view, donors)
        change = self.dictionary.decode_change((new - f)[..., 0])  # [b, s, d_in]
        return view + change.to(view.dtype).reshape(view.shape)

    def apply(self, view: torch.Tensor, donors: Any):
        """Edit ``view`` in place (every position: a feature reads the whole vector)."""
        view.copy_(self.target(view, donors))

    def delta(self, view: torch.Tensor, donors: Any):
        """``new - view``: the decoded change of the edited features."""
        return self.target(view, donors) - view

    def estimate(self, view: torch.Tensor, grad: torch.Tensor, donors: Any):
        """``[b, F]``: each latent's ``sum((f' - f) * dm/df)``, ``dm/df = dm/dx @ W_dec.T``."""
        f, new = self.features(view, donors)
        dm_df = grad.flatten(2).float() @ self.dictionary.W_dec.to(grad.device).T  # [b, s, F]
        return ((new - f)[..., 0] * dm_df).sum(1)

"""Sparse dictionaries trained here: a TopK SAE on one site, and its quality numbers."""

from __future__ import annotations

from bindscope.dictionaries.quality import (
    Reconstruction,
    SplicedLoss,
    reconstruction,
    spliced_loss,
)
from bindscope.dictionaries.train import (
    TopKSAE,
    TrainOptions,
    site_activations,
    train_topk,
    training_texts,
)

__all__ = [
    "Reconstruction",
    "SplicedLoss",
    "TopKSAE",
    "TrainOptions",
    "reconstruction",
    "site_activations",
    "spliced_loss",
    "train_topk",
    "training_texts",
]

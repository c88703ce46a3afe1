"""The TopK trainer, its SAELens-format save and the quality numbers (issue 45, item 4)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from bindscope.dictionaries.quality import SplicedLoss, reconstruction, spliced_loss
from bindscope.dictionaries.train import (
    TopKSAE,
    TrainOptions,
    site_activations,
    train_topk,
)
from bindscope.errors import InputError
from bindscope.interventions import Zero, load_dictionary
from bindscope.metrics import token_loss
from tests.conftest import CORPUS, LAYOUTS, _tiny
from tests.tolerance import logit_bound

OPTIONS = TrainOptions(width=128, k=8, steps=150, batch_size=64, lr=3e-3, dead_after=20)


@pytest.fixture(scope="module")
def llama(byte_tokenizer, sp_tokenizer):
    return _tiny("llama", byte_tokenizer, sp_tokenizer)


@pytest.fixture(scope="module")
def activations(llama):
    return site_activations(llama, CORPUS, site="resid_post", layer=1)


def test_training_reduces_the_reconstruction_error(activations):
    untrained = reconstruction(
        train_topk(activations, TrainOptions(**{**vars(OPTIONS), "steps": 0})), activations
    )
    trained = reconstruction(train_topk(activations, OPTIONS), activations)
    assert trained.fvu < untrained.fvu
    # the field's baseline, on the same tokens: the best k-dimensional subspace (PCA), same L0
    centred = activations - activations.mean(0)
    spectrum = torch.linalg.svdvals(centred).pow(2)
    pca_fvu = (spectrum[OPTIONS.k :].sum() / spectrum.sum()).item()
    assert trained.fvu < pca_fvu
    assert trained.l0 <= OPTIONS.k


def test_topk_keeps_exactly_the_k_largest():
    sae = TopKSAE(6, 20, 3, seed=1)
    x = torch.randn(50, 6, generator=torch.Generator().manual_seed(0))
    pre = sae.pre_activations(x)
    latents = sae.encode(x)
    # exactly k nonzero wherever the k-th largest pre-activation is positive, else the positives
    positives = (pre > 0).sum(1).clamp(max=3)
    assert torch.equal((latents != 0).sum(1), positives)
    with torch.no_grad():
        sae.b_enc += pre.abs().max() + 1.0  # every pre-activation positive: exactly k each
    latents = sae.encode(x)
    assert torch.equal((latents != 0).sum(1), torch.full((50,), 3))
    top = sae.pre_activations(x).topk(3, dim=1)
    assert torch.equal(latents.gather(1, top.indices), top.values)


def _hand_sae() -> TopKSAE:
    """d_in 2, three latents, k 1: latent 0 decodes at half length, latent 2 never fires."""
    sae = TopKSAE(2, 3, 1)
    sae.W_enc.data = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    sae.W_dec.data = torch.tensor([[0.5, 0.0], [0.0, 1.0], [0.0, 0.0]])
    sae.b_enc.data.zero_()
    sae.b_dec.data.zero_()
    return sae


def test_quality_numbers_match_a_hand_computation():
    x = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 0.0], [0.0, 0.0]])
    got = reconstruction(_hand_sae(), x, chunk=3)  # two chunks: the sums run across them
    # reconstructions [.5, 0], [0, 2], [1.5, 0], [0, 0]: squared error .25 + 0 + 2.25 + 0
    # mean token [1, .5]: squared deviations .25 + 3.25 + 4.25 + 1.25 = 9
    assert got.fvu == pytest.approx(2.5 / 9.0, rel=1e-6)
    assert got.explained_variance == pytest.approx(1 - 2.5 / 9.0, rel=1e-6)
    assert got.l0 == 0.75  # one latent on each token but the zero one
    assert got.dead_share == pytest.approx(1 / 3)
    loss = SplicedLoss(clean=3.0, spliced=4.0, zero=13.0, tokens=10)
    assert (loss.delta, loss.recovered) == (1.0, 0.9)  # (13 - 4) / (13 - 3)


class _Identity:
    def encode(self, x):
        return x

    def decode(self, latents):
        return latents


class _Nothing(_Identity):
    def decode(self, latents):
        return torch.zeros_like(latents)


def _engine_zero_loss(model, texts, site, layer):
    """The mean loss with ``site`` zeroed from position 1, through bindscope's own trace."""
    ids = [model.tokenize(text) for text in texts]
    rows = [Zero(site, layers=[layer], positions=range(1, len(i))) for i in ids]
    logits = model.logits(texts, per_row=rows)
    losses = torch.cat([token_loss(row, i) for row, i in zip(logits, ids)])
    return losses.mean().item(), sum(len(i) - 1 for i in ids)


@pytest.mark.parametrize("family", LAYOUTS)
@pytest.mark.parametrize("site", ["resid_post", "mlp_out"])
def test_spliced_loss_matches_the_engine(family, site, byte_tokenizer, sp_tokenizer):
    model = _tiny(family, byte_tokenizer, sp_tokenizer)
    texts = CORPUS[:3]
    identity = spliced_loss(model, texts, _Identity(), site=site, layer=1)
    zeroed = spliced_loss(model, texts, _Nothing(), site=site, layer=1)
    expected, tokens = _engine_zero_loss(model, texts, site, 1)
    wrong_layer, _ = _engine_zero_loss(model, texts, site, 0)
    bound = 2 * logit_bound(model, texts)  # a loss is a log-sum-exp minus one logit
    assert identity.tokens == zeroed.tokens == tokens
    assert abs(identity.spliced - identity.clean) <= bound
    assert abs(zeroed.spliced - expected) <= bound
    assert abs(zeroed.zero - expected) <= bound
    # the margin: zeroing another layer misses by over 10x the bound (52x at the least,
    # Gemma 3's mlp_out), while the splice agrees to within 1/300 of it
    assert abs(wrong_layer - expected) > 10 * bound
    assert identity.recovered == pytest.approx(1.0, abs=bound / abs(identity.zero - identity.clean))


def test_splice_refuses_an_input_site(llama):
    with pytest.raises(InputError, match="resid_post"):
        spliced_loss(llama, CORPUS[:1], _Identity(), site="resid_pre", layer=1)


def test_train_refuses_bad_input():
    with pytest.raises(InputError, match=r"k=9 must be in 1..width=8"):
        train_topk(torch.randn(10, 4), TrainOptions(width=8, k=9))
    with pytest.raises(InputError, match="finite"):
        train_topk(torch.full((10, 4), float("nan")), OPTIONS)


def test_saved_in_saelens_format_and_loaded_back(tmp_path, llama):
    sae = train_topk(torch.randn(300, 64, generator=torch.Generator().manual_seed(0)), OPTIONS)
    folder = sae.to_dictionary(site="resid_post", layer=1, model_name="tiny").save(tmp_path / "d")
    config = json.loads((folder / "cfg.json").read_text())
    assert (config["architecture"], config["k"], config["d_in"], config["d_sae"]) == (
        "topk",
        OPTIONS.k,
        64,
        OPTIONS.width,
    )
    assert config["metadata"]["hook_name"] == "blocks.1.hook_resid_post"
    weights = load_file(str(folder / "sae_weights.safetensors"))
    for name in ("W_enc", "b_enc", "W_dec", "b_dec"):
        assert torch.equal(weights[name], getattr(sae, name))
    loaded = load_dictionary(folder, llama)
    x = site_activations(llama, CORPUS[:2], site="resid_post", layer=1)
    assert torch.equal(loaded.encode(x), sae.encode(x))  # the loader's TopK is the trainer's

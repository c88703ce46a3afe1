"""TransformerLens conveniences (issue 44): ``to_str_tokens``, ``loss`` and ``token_loss``'s
offset, against transformers' own loss on a plain forward."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tests.conftest import PROMPTS
from tests.tolerance import logit_bound, misses


def test_str_tokens_join_to_the_text(tiny_layout):
    text = PROMPTS[0]
    ids = tiny_layout.tokenize(text)
    pieces = tiny_layout.to_str_tokens(text)
    assert len(pieces) == len(ids) and pieces == tiny_layout.to_str_tokens(ids)
    bos = tiny_layout.tokenizer.bos_token if tiny_layout.prepend_bos else ""
    assert "".join(pieces).replace(bos, "", 1).strip() == text
    words = [p for p in pieces if p.startswith(" ")]  # a word's leading space stays with it
    assert len(words) >= 1


def test_loss_is_transformers_loss_and_token_loss_is_offset_by_one(tiny):
    """``model.loss`` (batched, padded) equals ``hf(ids, labels=ids).loss``; entry ``t`` of
    ``loss(per_token=True)`` (`token_loss`) is the loss of token ``t + 1`` read from logit
    row ``t``, transformers' per-token loss, ``[n - 1]``."""
    means, per_token = tiny.loss(PROMPTS), tiny.loss(PROMPTS, per_token=True)
    atol = 2 * logit_bound(tiny, PROMPTS)  # log-softmax moves by at most twice its logits'
    for text, mean, tokens in zip(PROMPTS, means, per_token):
        ids = torch.tensor([tiny.tokenize(text)])
        with torch.no_grad():
            out = tiny.hf(ids, labels=ids)
        assert mean.shape == () and tokens.shape == (ids.shape[1] - 1,)
        torch.testing.assert_close(mean.double(), out.loss.double(), rtol=0, atol=atol)
        logits = out.logits[0].double()
        want = F.cross_entropy(logits[:-1], ids[0, 1:], reduction="none")
        torch.testing.assert_close(tokens.double(), want, rtol=0, atol=atol)
        same_row = F.cross_entropy(logits[1:], ids[0, 1:], reduction="none")  # no offset
        assert misses(tokens.double(), same_row, atol) > 100

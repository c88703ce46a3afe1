"""A two-layer GPT-2 with hand-set weights: a previous-token head, a sink head and an
induction head that reads the previous-token head's output.

Residual layout (128 dims): positions one-hot in 0..31 (learned absolute position
embeddings), token identity (random unit vectors) in 32..63, the previous token's identity
(written by head L0.H0) in 64..95. Every embedding is zero-mean and all have the same norm,
so GPT-2's LayerNorm is one constant scale at every position and the construction stays
linear. MLPs are zeroed; heads not listed below have zero weights (uniform attention).

* L0.H0 previous-token: query of position i = key of position i - 1 (a shift of the
  one-hot positions); its value copies the token identity into 64..95.
* L0.H1 sink: a constant query (bias) against a key that only position 0 has.
* L1.H0 induction: query = the current token's identity, key = the previous token's
  identity (64..95), so each token attends to the position after its earlier occurrence.
"""

from __future__ import annotations

import torch

N_POSITIONS = 32
HIDDEN = 128
HEAD_DIM = 32
P, T, S = slice(0, 32), slice(32, 64), slice(64, 96)
PREV, SINK, INDUCTION = (0, 0), (0, 1), (1, 0)


def planted_model(tokenizer, *, seed: int = 0):
    import transformers as tf

    import bindscope

    cfg = tf.GPT2Config(
        vocab_size=704,
        n_embd=HIDDEN,
        n_layer=2,
        n_head=4,
        n_positions=N_POSITIONS,
        bos_token_id=1,
        eos_token_id=0,
    )
    hf = tf.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in hf.parameters():
            p.zero_()
        for block in hf.transformer.h:
            block.ln_1.weight.fill_(1.0)
            block.ln_2.weight.fill_(1.0)
        hf.transformer.ln_f.weight.fill_(1.0)
        tokens = torch.randn(cfg.vocab_size, 32, generator=gen)
        tokens -= tokens.mean(1, keepdim=True)
        hf.transformer.wte.weight[:, T] = tokens / tokens.norm(dim=1, keepdim=True)
        positions = torch.eye(32) - 1.0 / 32  # zero-mean one-hot
        hf.transformer.wpe.weight[:, P] = positions / positions.norm(dim=1, keepdim=True)
        q, k, v = 0, HIDDEN, 2 * HIDDEN  # column offsets of c_attn's q | k | v
        layer0 = hf.transformer.h[0].attn
        w = layer0.c_attn.weight  # [in, out]: y = x @ w + b
        for i in range(1, 32):  # L0.H0: q(i) = e_{i-1}, k(j) = e_j
            w[i, q + i - 1] = 2.0
        for j in range(32):
            w[j, k + j] = 1.0
        for d in range(32):  # L0.H0 value: the token identity ...
            w[32 + d, v + d] = 1.0
        proj = layer0.c_proj.weight  # ... written to the previous-token slot
        for d in range(32):
            proj[d, 64 + d] = 1.0
        layer0.c_attn.bias[q + HEAD_DIM] = 4.0  # L0.H1: constant query ...
        w[0, k + HEAD_DIM] = 4.0  # ... against a key only position 0 has
        layer1 = hf.transformer.h[1].attn
        w = layer1.c_attn.weight
        for d in range(32):  # L1.H0: query current token, key previous token
            w[32 + d, q + d] = 10.0
            w[64 + d, k + d] = 1.0
    return bindscope.load_model(hf, tokenizer=tokenizer)

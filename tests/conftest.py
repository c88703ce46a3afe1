"""Tiny random-weight models for every family, built from configs: no downloads."""

from __future__ import annotations

import importlib.util
import json
import os
import string
from pathlib import Path

import pytest
import torch

CORPUS = [
    "In web accessibility, a screen reader is software that reads the page aloud.",
    "Alt text describes an image for people who cannot see it.",
    "A skip link lets keyboard users jump past repeated navigation.",
    "Color contrast between text and background must be high enough.",
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Focus indicators show which element has keyboard focus.",
    "Captions and audio description help deaf and blind users.",
    "Once upon a time there was a small town between two mountains.",
    "True or False: aria attributes add meaning for assistive technology.",
    "Developers should test landmark regions and heading structure.",
]

FAMILY_NAMES = [
    "gpt_neox",
    "gpt2",
    "olmo",
    "olmo2",
    "smollm3",
    "qwen2",
    "qwen3",
    "llama",
    "mistral",
    "gemma",
    "gemma2",
    "gemma3",
    "phi3",
]
# One family per attention layout, for checks that do not depend on the family (a test that
# compares family-specific numbers runs on all 13): learned positions and Conv1D (GPT-2),
# parallel attention and MLP with partial rotary (GPT-NeoX), grouped-query attention (Llama),
# sliding windows (Gemma 3), fused qkv and gate-up projections (Phi-3), post-norm (OLMo2).
LAYOUTS = ["gpt2", "gpt_neox", "llama", "gemma3", "phi3", "olmo2"]


def _train_tokenizer(kind: str):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from tokenizers.processors import TemplateProcessing
    from transformers import PreTrainedTokenizerFast

    special = ["<|endoftext|>", "<s>", "<pad>"]
    tk = Tokenizer(models.BPE())
    if kind == "byte":  # GPT-2 style: leading-space tokens
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tk.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    else:  # SentencePiece style: "▁" word-start marker
        tk.normalizer = normalizers.Replace(" ", "▁")
        tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
        tk.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
        alphabet = list(string.ascii_letters + string.digits + string.punctuation + "▁")
    trainer = trainers.BpeTrainer(
        vocab_size=700, special_tokens=special, initial_alphabet=alphabet, show_progress=False
    )
    tk.train_from_iterator(CORPUS * 4, trainer)
    if kind == "sentencepiece":  # adds BOS like Llama's own tokenizers
        tk.post_processor = TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, eos_token="<|endoftext|>", bos_token="<s>", pad_token="<pad>"
    )


@pytest.fixture(scope="session")
def byte_tokenizer():
    return _train_tokenizer("byte")


@pytest.fixture(scope="session")
def sp_tokenizer():
    return _train_tokenizer("sentencepiece")


@pytest.fixture(autouse=True)
def error_report(request, monkeypatch):
    """BINDSCOPE_ERROR_REPORT=FILE: every `assert_close` with an absolute bound and every
    `tolerance.misses` control appends ``{test, kind, error, bound}`` to FILE (JSON lines);
    tools/error_report.py summarises them. Unset, nothing changes."""
    path = os.environ.get("BINDSCOPE_ERROR_REPORT")
    if not path:
        return
    from tests import tolerance

    def report(kind: str, error: float, bound: float) -> None:
        line = {"test": request.node.nodeid, "kind": kind, "error": error, "bound": bound}
        with open(path, "a") as out:
            out.write(json.dumps(line) + "\n")

    close = torch.testing.assert_close

    def assert_close(actual, expected, *args, atol=None, **kwargs):
        tensors = isinstance(actual, torch.Tensor) and isinstance(expected, torch.Tensor)
        if atol and tensors and actual.shape == expected.shape:
            want = expected.detach().to(actual.device).double()
            error = (actual.detach().double() - want).abs().max()
            report("within", float(error) if actual.numel() else 0.0, float(atol))
        return close(actual, expected, *args, atol=atol, **kwargs)

    monkeypatch.setattr(torch.testing, "assert_close", assert_close)
    monkeypatch.setattr(tolerance, "REPORT", report)


def tiny_config(family: str):
    """A 3-layer, 4-head config; init large enough that attention is peaked."""
    import transformers as tf

    common = {
        "vocab_size": 704,
        "hidden_size": 64,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "intermediate_size": 128,
        "initializer_range": 0.25,
        "pad_token_id": 2,
        "bos_token_id": 1,
        "eos_token_id": 0,
        "max_position_embeddings": 256,
    }
    if family == "gpt2":
        return tf.GPT2Config(
            vocab_size=704,
            n_embd=64,
            n_layer=3,
            n_head=4,
            n_positions=256,
            initializer_range=0.25,
            bos_token_id=1,
            eos_token_id=0,
            scale_attn_by_inverse_layer_idx=True,
            reorder_and_upcast_attn=True,
        )
    return {
        "gpt_neox": lambda: tf.GPTNeoXConfig(**common, rotary_pct=0.25),
        "olmo": lambda: tf.OlmoConfig(**common, clip_qkv=8.0),
        "olmo2": lambda: tf.Olmo2Config(**common),
        "smollm3": lambda: tf.SmolLM3Config(
            **common, num_key_value_heads=2, no_rope_layer_interval=2
        ),
        "qwen2": lambda: tf.Qwen2Config(**common, num_key_value_heads=2),
        "qwen3": lambda: tf.Qwen3Config(**common, num_key_value_heads=2, head_dim=16),
        "llama": lambda: tf.LlamaConfig(**common, num_key_value_heads=2),
        "mistral": lambda: tf.MistralConfig(**common, num_key_value_heads=2, head_dim=16),
        "gemma": lambda: tf.GemmaConfig(**common, num_key_value_heads=1, head_dim=16),
        # soft-capping at 5 (not 50 and 30) so both caps bend these small models' scores and
        # logits (std about 2, up to about 8)
        "gemma2": lambda: tf.Gemma2Config(
            **common,
            num_key_value_heads=2,
            head_dim=16,
            query_pre_attn_scalar=16,
            attn_logit_softcapping=5.0,
            final_logit_softcapping=5.0,
            tie_word_embeddings=False,  # tied, the scaled input embedding decides every token
        ),
        # window 4 and layers sliding, full, sliding: PROMPTS[0] and [2] are longer than the
        # window, so capture and ablation must honour the sliding mask to match HF
        "gemma3": lambda: tf.Gemma3TextConfig(
            **common,
            num_key_value_heads=1,
            head_dim=16,
            query_pre_attn_scalar=16,
            sliding_window=4,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            tie_word_embeddings=False,
        ),
        "phi3": lambda: tf.Phi3Config(**common, num_key_value_heads=2),
    }[family]()


def build_tiny(family: str, tokenizer, *, attn: str = "eager", self_check: bool = True):
    from transformers import AutoModelForCausalLM

    import bindscope

    torch.manual_seed(sum(map(ord, family)))
    hf = AutoModelForCausalLM.from_config(tiny_config(family), attn_implementation=attn).eval()
    return bindscope.load_model(hf, tokenizer=tokenizer, self_check=self_check)


_TINY: dict[str, object] = {}


def _tiny(family: str, byte_tokenizer, sp_tokenizer):
    if family not in _TINY:
        tok = sp_tokenizer if family == "llama" else byte_tokenizer
        _TINY[family] = build_tiny(family, tok)
    return _TINY[family]


@pytest.fixture(scope="session", params=FAMILY_NAMES)
def tiny(request, byte_tokenizer, sp_tokenizer):
    """Each family's tiny model; the Llama one uses a BOS-adding SentencePiece tokenizer."""
    return _tiny(request.param, byte_tokenizer, sp_tokenizer)


@pytest.fixture(scope="session", params=LAYOUTS)
def tiny_layout(request, byte_tokenizer, sp_tokenizer):
    """One family's tiny model per attention layout (``LAYOUTS``): the same objects as
    ``tiny``'s, for checks whose outcome does not depend on the family."""
    return _tiny(request.param, byte_tokenizer, sp_tokenizer)


def load_embedded(name: str):
    """An embedded model, converted once into the usual cache; skipped (outside CI) without
    its packages."""
    import bindscope
    from bindscope.loading import EMBEDDED

    spec = EMBEDDED[name]
    missing = [p for p in spec.packages if importlib.util.find_spec(p.replace("-", "_")) is None]
    if missing and not os.environ.get("CI"):
        pytest.skip(f"{name}: {', '.join(missing)} not installed: {spec.install}")
    return bindscope.load_model(name)


@pytest.fixture(scope="session")
def smollm2():
    """The embedded default model, SmolLM2-135M-Instruct."""
    return load_embedded("SmolLM2-135M-Instruct")


@pytest.fixture(scope="session")
def gemma3_real():
    """The embedded Gemma 3 270M (base)."""
    return load_embedded("gemma-3-270m")


@pytest.fixture(scope="session")
def qwen_real():
    """The embedded Qwen2.5-Coder-0.5B-Instruct."""
    return load_embedded("qwen2.5-coder-0.5b")


def gguf_stand_in(scratch: Path) -> Path:
    """A file standing in for an embedded model's GGUF (tests replace the conversion too)."""
    path = scratch / "stand-in.gguf"
    path.write_bytes(b"GGUF")
    return path


PROMPTS = [
    "In web accessibility, a screen reader is",
    "Alt text",
    "The quick brown fox jumps over the lazy dog near the river bank.",
]

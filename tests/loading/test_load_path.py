"""``load_model`` reads as one path: weights, family, wrap, provenance, check, simulation."""

from __future__ import annotations

import pytest

from bindscope import loading
from bindscope.errors import ModelLoadError


def test_load_model_calls_each_step_once_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """issue 42: each step of getting a model is a named call in ``load_model``, in order."""
    calls: list[str] = []

    def step(name: str, result: object = None):
        def record(*args: object, **kwargs: object) -> object:
            calls.append(name)
            return result

        return record

    class Wrapped:
        name = "stand-in"

    wrapped = Wrapped()
    monkeypatch.setattr(loading, "read_weights", step("read_weights", ("hf", "tok", "m", None)))
    monkeypatch.setattr(loading, "resolve_family", step("resolve_family", ("row", False)))
    monkeypatch.setattr(loading, "wrap_model", step("wrap_model", wrapped))
    monkeypatch.setattr(loading, "_record_provenance", step("record_provenance"))
    monkeypatch.setattr(loading, "self_check_model", step("self_check"))
    monkeypatch.setattr(loading, "simulate", step("simulate"))
    monkeypatch.setattr(loading, "probe_capture", step("probe_capture"))
    assert loading.load_model("m", remote="local") is wrapped
    assert calls == [
        "read_weights",
        "resolve_family",
        "wrap_model",
        "record_provenance",
        "self_check",
        "simulate",
        "probe_capture",
    ]


def test_remote_true_takes_the_ndif_path_before_reading_anything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``remote=True`` never reads weights here; a bad ``remote`` value is refused first."""
    monkeypatch.setattr(loading, "read_weights", lambda *a, **k: pytest.fail("read weights"))
    monkeypatch.setattr(loading, "load_remote", lambda model, **k: ("remote", model))
    assert loading.load_model("org/m", remote=True) == ("remote", "org/m")
    with pytest.raises(ModelLoadError, match="remote must be True, 'local' or False"):
        loading.load_model("org/m", remote="ndif")

"""No EB* aggregate silently includes a span that starts on the attention sink."""

from __future__ import annotations

import math

import pytest

import bindscope
from bindscope import cli
from bindscope.errors import BindscopeError, InputError
from bindscope.experiments import binding as binding_experiment
from bindscope.prompts.prompt_sets import PromptRecord, load
from bindscope.prompts.spans import locate
from bindscope.runners.binding import SINK_SKIP, binding
from tests.conftest import build_tiny


def _record(template: str, term: str, prompt_id: str) -> PromptRecord:
    return PromptRecord(prompt_id=prompt_id, term=term, task="generation", template=template)


@pytest.fixture(scope="module")
def tiny_gpt2(byte_tokenizer):
    return build_tiny("gpt2", byte_tokenizer)  # byte tokenizer: no BOS


def test_span_on_the_sink_is_skipped_by_default_and_counted(tiny_gpt2, tmp_path):
    sink = _record("screen reader users rely on it", "screen reader", "gen_sink")
    inner = _record("A screen reader reads the page", "screen reader", "gen_inner")
    assert "at_position_0" in locate(tiny_gpt2, sink.template, sink.term).flags
    skipped, measured = binding(tiny_gpt2, [sink, inner], on_missing="skip")
    assert skipped.skipped == SINK_SKIP and math.isnan(skipped.eb_star)
    assert measured.skipped is None and not math.isnan(measured.eb_star)
    kept = binding(tiny_gpt2, [sink], on_sink="keep")[0]
    assert kept.skipped is None and not math.isnan(kept.eb_star)

    from bindscope.prompts.prompt_sets import PromptSet

    summary = binding_experiment.run(
        tiny_gpt2, prompts=PromptSet("sink", (sink, inner), "0" * 64), out=tmp_path, progress=False
    )
    (entry,) = summary["models"].values()
    assert entry["n"] == 1 and entry["n_skipped"] == 1
    assert entry["skipped_reasons"] == {"at_position_0": 1}


def test_a_prepended_bos_moves_the_span_off_the_sink(tiny_gpt2, sp_tokenizer):
    llama = build_tiny("llama", sp_tokenizer)  # its tokenizer adds BOS
    sink = _record("screen reader users rely on it", "screen reader", "gen_sink")
    assert "at_position_0" not in locate(llama, sink.template, sink.term).flags
    assert binding(llama, [sink])[0].skipped is None


def test_bad_on_sink_is_refused(tiny_gpt2):
    with pytest.raises(InputError, match="on_sink"):
        binding(tiny_gpt2, [], on_sink="maybe")


@pytest.mark.parametrize(
    ("argv", "expected"), [([], None), (["--prepend-bos"], True), (["--no-prepend-bos"], False)]
)
@pytest.mark.parametrize("command", ["binding", "c5", "controls", "heads", "fewshot", "scan"])
def test_prepend_bos_option_reaches_the_model(monkeypatch, tmp_path, command, argv, expected):
    seen = {}

    def fake_load(*args, **kwargs):
        seen.update(kwargs)
        raise BindscopeError("stop after load")

    monkeypatch.setattr(bindscope, "load_model", fake_load)
    assert cli.main([command, "--out", str(tmp_path), *argv]) == 2
    assert seen["prepend_bos"] is expected


@pytest.mark.slow
def test_canonical_and_control_spans_on_the_sink_are_all_excluded(smollm2):
    """On the default tokenizer (no BOS) every span at position 0 is skipped, before any
    forward pass; with BOS prepended no span of either set starts on the sink."""
    for name in ("canonical", "controls"):
        records = list(load(name))
        sink = [
            r
            for r in records
            if "at_position_0" in locate(smollm2, r.template, r.term, prompt_id=r.key).flags
        ]
        if name == "canonical":
            assert len(sink) == 41  # the independent check's count (issue 9)
        results = binding(smollm2, sink, on_missing="skip")
        assert all(
            res.skipped in (SINK_SKIP, None) or "single_token" in res.flags for res in results
        )
        assert all(math.isnan(res.eb_star) for res in results)
    with_bos = bindscope.load_model(prepend_bos=True)
    for name in ("canonical", "controls"):
        assert not [
            r
            for r in load(name)
            if "at_position_0" in locate(with_bos, r.template, r.term, prompt_id=r.key).flags
        ]

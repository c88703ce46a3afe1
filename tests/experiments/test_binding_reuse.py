"""Binding results are computed once per results folder and reused, with provenance."""

from __future__ import annotations

from bindscope.experiments import binding as binding_experiment
from bindscope.experiments import c5, controls
from bindscope.experiments.kit import binding_reuse
from bindscope.experiments.kit.binding_reuse import BINDING_FROM
from bindscope.results.records import read_records
from tests.experiments import prompts_tiny


def _counting(monkeypatch):
    seen: list[str] = []
    real = binding_reuse.binding

    def counted(model, records, **kwargs):
        records = list(records)
        seen.extend(r.key for r in records)
        return real(model, records, **kwargs)

    monkeypatch.setattr(binding_reuse, "binding", counted)
    return seen


def _metrics(path, experiment):
    return {
        r["prompt_key"]: r
        for r in read_records(path)
        if r["experiment"] == experiment and r["condition"] == "clean"
    }


def test_c5_and_controls_reuse_the_folders_binding(
    tiny_llama, tiny_prompts, tiny_controls, tmp_path, monkeypatch
):
    binding_experiment.run(tiny_llama, prompts=tiny_prompts, out=tmp_path, progress=False)
    stored = _metrics(tmp_path / "binding" / "records.jsonl", "binding")
    in_c5 = _counting(monkeypatch)
    options = {"k": 2, "n_random": 1, "rubric": prompts_tiny.RUBRIC, "progress": False}
    c5.run(tiny_llama, prompts=tiny_prompts, out=tmp_path, **options)
    assert in_c5 == []  # no binding forward pass for the ranking
    ranking = _metrics(tmp_path / "c5" / "records.jsonl", "c5-ranking")
    assert ranking.keys() == stored.keys()
    for key, record in ranking.items():
        assert record["metrics"] == stored[key]["metrics"]  # identical numbers
        assert record["provenance"]["binding_from"] == BINDING_FROM

    in_controls = _counting(monkeypatch)
    controls.run(
        tiny_llama, controls=tiny_controls, real=tiny_prompts, out=tmp_path, progress=False
    )
    real = {
        k: r
        for k, r in _metrics(tmp_path / "controls" / "records.jsonl", "controls").items()
        if r["control_group"] is None
    }
    assert real and not set(in_controls) & set(real)  # only control items were computed
    for key, record in real.items():
        assert record["metrics"] == stored[key]["metrics"]
        assert record["provenance"]["binding_from"] == BINDING_FROM


def test_heads_reuse_the_folders_binding(tiny_llama, tiny_prompts, tmp_path, monkeypatch):
    from bindscope.experiments import heads

    binding_experiment.run(tiny_llama, prompts=tiny_prompts, out=tmp_path, progress=False)
    stored = _metrics(tmp_path / "binding" / "records.jsonl", "binding")
    in_heads = _counting(monkeypatch)
    heads.run(
        tiny_llama,
        prompts=tiny_prompts,
        out=tmp_path,
        n_repeated=2,
        repeat_length=4,
        progress=False,
    )
    assert in_heads == []  # no binding forward pass for the heads' binding score
    found = _metrics(tmp_path / "heads" / "records.jsonl", "heads")
    assert found.keys() == stored.keys()
    for key, record in found.items():
        assert record["metrics"]["bsi"] == stored[key]["metrics"]["bsi"]
        assert record["metrics"]["eb_star"] == stored[key]["metrics"]["eb_star"]
        assert record["provenance"]["binding_from"] == BINDING_FROM


def test_without_binding_results_c5_computes_its_ranking(
    tiny_llama, tiny_prompts, tmp_path, monkeypatch
):
    in_c5 = _counting(monkeypatch)
    c5.run(
        tiny_llama,
        prompts=tiny_prompts,
        out=tmp_path,
        k=2,
        n_random=1,
        rubric=prompts_tiny.RUBRIC,
        progress=False,
    )
    assert in_c5  # negative control: the counter sees a computed ranking
    ranking = _metrics(tmp_path / "c5" / "records.jsonl", "c5-ranking")
    assert all("binding_from" not in r["provenance"] for r in ranking.values())


def test_another_bos_policy_is_not_reused(sp_tokenizer, tiny_prompts, tmp_path, monkeypatch):
    import bindscope
    from tests.conftest import build_tiny

    with_bos = build_tiny("llama", sp_tokenizer)
    assert with_bos.prepend_bos
    binding_experiment.run(with_bos, prompts=tiny_prompts, out=tmp_path, progress=False)
    without = bindscope.load_model(with_bos.hf, tokenizer=sp_tokenizer, prepend_bos=False)
    in_c5 = _counting(monkeypatch)
    c5.run(
        without,
        prompts=tiny_prompts,
        out=tmp_path,
        k=2,
        n_random=1,
        rubric=prompts_tiny.RUBRIC,
        progress=False,
    )
    assert in_c5  # binding from another BOS policy is another computation


def test_model_records_keeps_the_models_revision_and_experiment(tiny_llama, tiny_prompts, tmp_path):
    from types import SimpleNamespace

    from bindscope.experiments.kit.experiment import model_records

    binding_experiment.run(tiny_llama, prompts=tiny_prompts, out=tmp_path, progress=False)
    path = tmp_path / "binding" / "records.jsonl"
    every = list(read_records(path))
    mine = model_records(path, "binding", tiny_llama)
    assert mine == [r for r in every if r["experiment"] == "binding"] and mine
    other_revision = SimpleNamespace(name=tiny_llama.name, revision="step-1")
    assert model_records(path, "binding", other_revision) == []
    assert model_records(path, "heads", tiny_llama) == []

"""One test per finding of the audit of silent wrong numbers (each failed before its fix)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

import bindscope
from bindscope import cli
from bindscope.errors import InputError, ModelLoadError
from bindscope.experiments import binding as binding_experiment
from bindscope.experiments import controls, fewshot, sweep
from bindscope.figures.fewshot import SECTION as FEWSHOT_SECTION
from bindscope.interventions import Mean, head_means
from bindscope.metrics import stats
from bindscope.prompts import PromptRecord, load
from bindscope.runners.behaviour import generation
from bindscope.runners.binding import binding
from tests.experiments import prompts_tiny
from tests.tolerance import prob_bound


def _generation_records(tmp_path):
    return list(load(prompts_tiny.write(tmp_path)).filter(task="generation"))


def test_1_mean_ablation_reaches_generation(tiny_llama, tmp_path):
    records = _generation_records(tmp_path)
    heads = [(layer, h) for layer in range(3) for h in range(4)]  # every head: a visible change
    means = head_means(tiny_llama, [r.template for r in records], heads)
    rows = [heads] * len(records)
    zero = generation(tiny_llama, records, per_row=rows, rubric=prompts_tiny.RUBRIC)
    meaned = [Mean(heads, means)] * len(records)
    mean = generation(tiny_llama, records, per_row=meaned, rubric=prompts_tiny.RUBRIC)
    direct = tiny_llama.generate_ids(
        [r.template for r in records], max_new_tokens=4, per_row=meaned
    )
    decode = tiny_llama.tokenizer.decode
    assert [m.text for m in mean] == [decode(ids, skip_special_tokens=True) for ids in direct]
    assert [m.text for m in mean] != [z.text for z in zero]


def test_2_a_revision_is_applied_or_refused(tmp_path, tiny_llama, byte_tokenizer, capsys):
    with pytest.raises(ModelLoadError, match="revision 'step1000'"):
        bindscope.load_model(None, revision="step1000")  # refused before any load
    with pytest.raises(ModelLoadError, match="cannot be applied"):
        bindscope.load_model(tiny_llama.hf, tokenizer=tiny_llama.tokenizer, revision="step1")
    folder = tmp_path / "model"
    tiny_llama.hf.save_pretrained(folder / "step1000")
    tiny_llama.tokenizer.save_pretrained(folder / "step1000")
    loaded = bindscope.load_model(folder, revision="step1000")
    assert loaded.revision == "step1000"
    with pytest.raises(ModelLoadError, match="no checkpoint for revision 'step999999'"):
        bindscope.load_model(folder, revision="step999999")
    prompts = prompts_tiny.write(tmp_path)
    argv = ["binding", "--model", str(folder), "--revision", "step999999"]
    assert cli.main([*argv, "--prompts", str(prompts), "--out", str(tmp_path / "o")]) == 2
    assert "step1000" in capsys.readouterr().err  # names the checkpoints it has
    assert not (tmp_path / "o" / "binding" / "records.jsonl").exists()


def test_2_a_sweep_loader_that_ignores_the_revision_is_refused(tiny_llama, tmp_path):
    with pytest.raises(InputError, match="the loaded model is at revision None"):
        sweep.run("m", ["step1"], prompts=prompts_tiny.write(tmp_path), out=tmp_path,
                  loader=lambda name, revision: tiny_llama, rubric=prompts_tiny.RUBRIC,
                  progress=False)  # fmt: skip


def _sweep_record(revision, term, declared, eb, beh):
    return {
        "experiment": "sweep", "model": "m", "revision": revision, "term": term,
        "metrics": {"eb_star": eb, "behaviour": beh},
        "provenance": {"seed": 0, "sweep": {"revisions": declared}},
    }  # fmt: skip


def test_3_sweep_summary_keeps_resumed_revisions_in_step_order():
    first = ["step1000", "step2000", "step3000", "step4000"]
    records = [_sweep_record(v, "t", first, 0.1 * i, 0.2 * i) for i, v in enumerate(first)]
    records.append(_sweep_record("step5000", "t", [*first, "step5000"], 0.5, 1.0))
    assert sweep.summarize_sweep(records)["models"]["m"]["revisions"] == [*first, "step5000"]
    names = ["step1000", "step143000", "step15000"]  # sorted as strings
    records = [_sweep_record(v, "t", None, 0.1, 0.2) for v in names]
    assert sweep.checkpoint_order(records) == ["step1000", "step15000", "step143000"]
    olmo = ["step80000-tokens335B", "step1000-tokens4B"]
    assert sweep.checkpoint_order([_sweep_record(v, "t", None, 0, 0) for v in olmo]) == olmo[::-1]


def test_4_nested_terms_in_one_stem_get_their_own_bsi(tiny_llama):
    stem = "Developers should test a screen reader"
    outer = PromptRecord("gen_001", "a screen reader", "generation", stem)
    inner = PromptRecord("gen_001", "screen reader", "generation", stem)
    together = binding(tiny_llama, [outer, inner])
    alone = [binding(tiny_llama, [r])[0] for r in (outer, inner)]
    bound = prob_bound(tiny_llama)
    for a, b in zip(together, alone):
        assert abs(a.eb_star - b.eb_star) <= 2 * bound
    assert abs(together[0].eb_star - together[1].eb_star) > 1000 * bound


def test_5_means_equal_up_to_rounding_are_a_constant_series():
    scores = np.random.default_rng(0).random(11)
    means = {float(np.mean(np.random.default_rng(s).permutation(scores))) for s in range(200)}
    assert len(means) > 1  # the same mean, different last bits
    late = sorted(means)[:4] if len(means) >= 4 else [*sorted(means)] * 2
    result = stats.correlation([1.0, 2.0, 3.0, 4.0], late[:4], method="spearman")
    assert math.isnan(result.statistic) and result.method.endswith(":constant")


def test_6_every_experiment_refuses_to_resume_with_other_inputs(tiny_llama, tmp_path):
    a = prompts_tiny.write(tmp_path, name="a.jsonl")
    b = prompts_tiny.write(tmp_path, prompts_tiny.records()[:5], name="b.jsonl")
    binding_experiment.run(tiny_llama, prompts=a, out=tmp_path, progress=False)
    with pytest.raises(InputError, match="prompt_sha256"):
        binding_experiment.run(tiny_llama, prompts=b, out=tmp_path, progress=False)
    options = {"prompts": a, "out": tmp_path, "rubric": prompts_tiny.RUBRIC, "progress": False}
    fewshot.run(tiny_llama, exemplars=prompts_tiny.EXEMPLARS, **options)
    other = {"terms": {t: {"exemplar": "x", "paraphrase": "y"} for t in prompts_tiny.TERMS}}
    with pytest.raises(InputError, match="exemplars_sha256"):
        fewshot.run(tiny_llama, exemplars=other, **options)
    with pytest.raises(InputError, match="seed"):
        fewshot.run(tiny_llama, exemplars=prompts_tiny.EXEMPLARS, seed=5, **options)
    ctl = prompts_tiny.write(tmp_path, prompts_tiny.control_rows(), name="c.jsonl")
    controls.run(tiny_llama, controls=ctl, real=a, out=tmp_path, progress=False)
    with pytest.raises(InputError, match="real_sha256"):
        controls.run(tiny_llama, controls=ctl, real=b, out=tmp_path, progress=False)


def test_6_a_model_in_another_dtype_does_not_resume_its_records(tiny_llama, tmp_path):
    a = prompts_tiny.write(tmp_path)
    binding_experiment.run(tiny_llama, prompts=a, out=tmp_path, progress=False)
    half = bindscope.load_model(
        tiny_llama.hf.to(torch.bfloat16), tokenizer=tiny_llama.tokenizer, self_check=False
    )
    try:
        with pytest.raises(InputError, match="dtype"):
            binding_experiment.run(half, prompts=a, out=tmp_path, progress=False)
    finally:
        tiny_llama.hf.to(torch.float32)


def test_7_binding_seed_reaches_the_intervals_and_the_records(tiny_llama, tmp_path):
    prompts = prompts_tiny.write(tmp_path)
    one = binding_experiment.run(
        tiny_llama, prompts=prompts, out=tmp_path / "1", seed=1, progress=False
    )
    two = binding_experiment.run(
        tiny_llama, prompts=prompts, out=tmp_path / "2", seed=2, progress=False
    )
    (label,) = one["models"]
    assert one["models"][label]["eb_star"]["low"] != two["models"][label]["eb_star"]["low"]
    lines = (tmp_path / "2" / "binding" / "records.jsonl").read_text().splitlines()
    assert {json.loads(x)["provenance"]["seed"] for x in lines} == {2}


def test_8_lead_lag_counts_one_n_and_names_the_excluded():
    rising = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    series = {
        "a": {"eb_star": rising, "behaviour": [0.0, 0.1, 0.3, 0.2, 0.5, 0.6]},
        "b": {"eb_star": [0.1, 0.3, 0.2, 0.5, 0.4, 0.6], "behaviour": rising},
        "flat_early": {"eb_star": [0.2, 0.2, 0.2, 0.2, 0.2, 0.9], "behaviour": rising},
        "flat": {"eb_star": [0.3] * 6, "behaviour": rising},
    }
    result = sweep.leadlag(series)
    assert result["excluded"] == {"flat": "constant series"}
    for method in ("pearson", "spearman"):
        assert "flat_early" in result["excluded_by_method"][method]
        assert result["n"][method] == 2 == result["binomial"][method]["n"]
        assert result["lead_fraction"][method]["n"] == 2


def test_9_the_few_shot_guide_describes_the_paraphrase_condition():
    guide = FEWSHOT_SECTION.how_to_read
    assert "stem always unchanged" in guide and "copied" in guide
    assert "wording" not in guide


def test_10_single_token_prompts_are_counted_as_skipped(tiny_llama, tmp_path):
    rows = prompts_tiny.records()[:5]
    rows.append(
        {"prompt_id": "gen_009", "term": "dog", "task": "generation",
         "template": "The quick brown fox jumps over the lazy dog", "max_tokens": 2}
    )  # fmt: skip
    summary = binding_experiment.run(
        tiny_llama, prompts=prompts_tiny.write(tmp_path, rows), out=tmp_path, progress=False
    )
    (entry,) = summary["models"].values()
    assert entry["n"] + entry["n_skipped"] == len(rows)
    assert entry["skipped_reasons"].get("single_token", 0) >= 1

"""Activation patching on tiny models: a planted head recovers ~1, the others ~0."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bindscope.errors import PromptFileError
from bindscope.experiments import patching
from bindscope.experiments.kit.registry import validate_file
from bindscope.prompts.continuations import continuation_ids
from tests.experiments import planted
from tests.reference_patching import logit_atol

# clean/corrupted texts of equal length under the tiny byte tokenizer (checked below)
PHRASES = ["a screen reader", "a skip link", "color contrast", "heading structure", "the dog",
           "the river", "blind users", "the town", "the page", "keyboard focus"]  # fmt: skip
SWAPS = [(a, b) for a in PHRASES for b in PHRASES if a != b]
STEMS = [
    "In web accessibility, {x} helps",
    "True or False: {x} helps keyboard users",
    "Developers should test {x} and",
    "Alt text describes {x} for",
    "Focus indicators show {x} near",
    "Captions help {x} and",
]


def _pairs(model) -> list[dict]:
    """Pairs whose answers (the model's own top tokens) differ between clean and corrupted."""
    rows = []
    for i, stem in enumerate(STEMS):
        for j, (a, b) in enumerate(SWAPS):
            clean, corrupted = stem.format(x=a), stem.format(x=b)
            if len(model.tokenize(clean)) != len(model.tokenize(corrupted)):
                continue
            top = [int(x[-1].argmax()) for x in model.logits([clean, corrupted])]
            if top[0] == top[1]:
                continue
            # answers are written without their leading space (one is put before them)
            answers = [model.tokenizer.decode([t]).removeprefix(" ") for t in top]
            if [continuation_ids(model.tokenizer, a) for a in answers] != [[t] for t in top]:
                continue  # not a space-led word, or decoding does not round-trip to one token
            if len(rows) == 12:
                return rows
            rows.append(
                {
                    "pair_id": f"p{i}{j}",
                    "term": a,
                    "clean": clean,
                    "corrupted": corrupted,
                    "clean_answer": answers[0],
                    "corrupted_answer": answers[1],
                }
            )
    return rows


def _write(tmp_path, rows):
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    return path


def test_planted_head_recovers_one_others_zero(byte_tokenizer, tmp_path):
    model = planted.one_layer_model(byte_tokenizer)
    head = 5
    planted.plant(model, head, up=20.0, down=0.02)  # one head carries what differs
    rows = _pairs(model)
    assert len(rows) >= 6
    summary = patching.run(
        model, pairs=_write(tmp_path, rows), out=tmp_path / "out", n_resamples=999,
        progress=False,
    )  # fmt: skip
    m = next(iter(summary["models"].values()))
    recovery = np.array(m["recovery"], dtype=float)[0]
    assert recovery[head] == pytest.approx(1.0, abs=0.1)
    others = np.delete(recovery, head)
    assert np.abs(others).max() < 0.1
    assert m["top"][0]["head"] == [0, head] and m["top"][0]["p_adjusted"] < 0.05
    assert validate_file(tmp_path / "out" / "patching" / "records.jsonl") == len(rows) * 9


def test_resume_gives_the_same_summary(tiny_llama, tmp_path):
    rows = _pairs(tiny_llama)[:4]
    kwargs = {"pairs": _write(tmp_path, rows), "out": tmp_path / "out", "n_resamples": 99}
    full = patching.run(tiny_llama, progress=False, **kwargs)
    path = tmp_path / "out" / "patching" / "records.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[: len(lines) // 2]) + "\n")
    resumed = patching.run(tiny_llama, progress=False, **kwargs)
    assert json.dumps(resumed, sort_keys=True) == json.dumps(full, sort_keys=True)
    assert len(path.read_text().splitlines()) == len(lines)


def test_builtin_pairs_load_and_bad_file_is_named(tmp_path):
    pairs, name, _ = patching.load_pairs("pairs")
    assert name == "pairs" and len(pairs) == 205
    assert len({p.term for p in pairs}) == 41
    assert all(p.target and p.clean != p.corrupted for p in pairs)
    path = _write(tmp_path, [{"pair_id": "x", "term": "t", "clean": "a", "corrupted": "b"}])
    with pytest.raises(PromptFileError, match=r"pairs\.jsonl:1: give a 'target'"):
        patching.load_pairs(path)


def test_cli_scan_and_patch(tiny_llama, tiny_prompts, tmp_path, monkeypatch, capsys):
    from bindscope import cli

    monkeypatch.setattr(cli, "_load", lambda *a: tiny_llama)
    out = tmp_path / "out"
    common = ["--out", str(out), "--n-resamples", "99", "--no-progress"]
    assert cli.main(["scan", "--prompts", str(tiny_prompts), "--limit", "3", *common]) == 0
    assert "Head scan" in capsys.readouterr().out
    pairs = _write(tmp_path, _pairs(tiny_llama)[:3])
    assert cli.main(["patch", "--pairs", str(pairs), "--unit", "layer", *common]) == 0
    assert "Activation patching" in capsys.readouterr().out
    assert cli.main(["summarize", str(out)]) == 0
    assert (out / "scan" / "summary.json").is_file() and (
        out / "patching" / "summary.json"
    ).is_file()


def test_position_unit_recovers_nothing_before_the_first_differing_token(tiny_llama, tmp_path):
    """Causal attention: what the clean run computes before the first token where the pair
    differs equals the corrupted run's, so patching there recovers exactly 0."""
    rows = _pairs(tiny_llama)[:4]
    summary = patching.run(
        tiny_llama, pairs=_write(tmp_path, rows), out=tmp_path / "out", unit="position",
        n_resamples=99, progress=False,
    )  # fmt: skip
    m = next(iter(summary["models"].values()))
    recovery = np.array(m["recovery"], dtype=float)  # [L, positions from the end]
    assert recovery.shape[0] == tiny_llama.n_layers

    def first_difference(row):
        clean, corrupted = (tiny_llama.tokenize(row[k]) for k in ("clean", "corrupted"))
        return next(i for i, (x, y) in enumerate(zip(clean, corrupted)) if x != y), len(clean)

    found = [first_difference(r) for r in rows]
    # offsets from the end whose position lies before the difference in every pair
    before = [o for o in range(recovery.shape[1]) if all(n - 1 - o < d for d, n in found)]
    assert before and np.all(recovery[:, before] == 0)  # positions before every difference
    assert np.abs(recovery).max() > 0.1  # patching at or after the difference recovers


def test_cli_head_position_grid_equals_the_sweep_and_bad_input_exits_2(
    tiny_llama, tmp_path, monkeypatch, capsys
):
    """``--unit head_position``: each record's patched metric equals `patching_sweep`'s
    head x position grid (itself checked against hooks, test_patching_sweep.py) for its
    pair; the summary map is [layers, heads, positions] and draws; a bad unit exits 2."""
    from bindscope import cli
    from bindscope.figures.head_maps import heads_figure
    from bindscope.runners import patching_sweep
    from bindscope.viewer.folders import _head_map

    monkeypatch.setattr(cli, "_load", lambda *a: tiny_llama)
    rows = _pairs(tiny_llama)[:2]
    pairs, out = _write(tmp_path, rows), tmp_path / "out"
    common = ["--pairs", str(pairs), "--out", str(out), "--n-resamples", "99", "--no-progress"]
    assert cli.main(["patch", "--unit", "head_positions", *common]) == 2
    assert "head_position" in capsys.readouterr().err
    assert not (out / "patching").exists()  # no numbers written
    assert cli.main(["patch", "--unit", "head_position", *common]) == 0
    summary = json.loads((out / "patching" / "summary.json").read_text())
    m = next(iter(summary["models"].values()))
    n = min(len(tiny_llama.tokenize(r["corrupted"])) for r in rows)
    shape = (tiny_llama.n_layers, tiny_llama.n_heads, n)
    assert np.array(m["recovery"], dtype=float).shape == shape
    records = [json.loads(x) for x in (out / "patching" / "records.jsonl").open()]
    for row in rows[:1]:
        prepared = patching.prepare(tiny_llama, patching.Pair(**row))
        grid = patching_sweep(
            tiny_llama, row["clean"], row["corrupted"], sites="head_out", by_head=True,
            positions=list(range(-1, -n - 1, -1)), metric=prepared.measure,
        )["head_out"]  # fmt: skip  # [L, offsets from the end, H]
        mine = [r for r in records if r["prompt_key"] == prepared.key and r["condition"] != "clean"]
        assert len(mine) == grid.numel()
        # a difference of two logits, computed in two batch layouts: twice the logits' bound
        atol = 2 * logit_atol(tiny_llama.logits([row["corrupted"]])[0], tiny_llama.n_layers)
        for r in mine:
            (layer, head), offset = r["heads"][0], r["metrics"]["position_from_end"]
            assert abs(r["metrics"]["patched"] - float(grid[layer, offset, head])) <= atol
    heads_figure("tiny", m["recovery"], m["significant"], m["top"], "recovery", (12.0, 5.0))
    drawn = _head_map("patching", "t", m["recovery"], m["significant"], "head_position")
    assert np.array(drawn["values"], dtype=float).shape == (shape[0], shape[1] * shape[2])
    assert drawn["columns"][:2] == ["H0.-1", "H0.-2"]  # each head's positions from the end

"""Every bad input the CLI can get: exit code 2, a message naming the file and line or the
option, no traceback, no record written, and (where it can be known) no model loaded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bindscope import cli
from bindscope.experiments import c5
from bindscope.experiments.kit import registry
from tests.experiments import prompts_tiny


def _fails(argv, capsys, *needles):
    assert cli.main([*argv, "--no-progress"] if argv[0] != "summarize" else argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    return err


def _no_records(out: Path) -> None:
    assert not list(Path(out).glob("*/records.jsonl"))


@pytest.mark.parametrize(
    ("option", "value", "needle"),
    [
        ("--batch-size", "-1", "argument --batch-size: -1 is not a positive integer"),
        ("--batch-size", "0", "argument --batch-size: 0 is not a positive integer"),
        ("--batch-size", "x", "argument --batch-size: 'x' is not an integer"),
        ("--dtype", "float8", "argument --dtype: invalid choice: 'float8'"),
        ("--dtype", "nn", "argument --dtype: invalid choice: 'nn'"),
    ],
)
def test_bad_options_stop_before_the_model(tmp_path, capsys, loads, option, value, needle):
    _fails(["binding", "--out", str(tmp_path), option, value], capsys, needle)
    assert not loads
    _no_records(tmp_path)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--k", "-1"], "argument --k: -1 is not a positive integer"),
        (["--k", "0"], "argument --k: 0 is not a positive integer"),
        (["--n-random", "-2"], "argument --n-random: -2 is negative"),
    ],
)
def test_c5_k_and_n_random_checked_before_the_model(tmp_path, capsys, loads, argv, needle):
    _fails(["c5", "--out", str(tmp_path), *argv], capsys, needle)
    assert not loads


def test_c5_k_too_large_for_the_model_stops_before_any_work(tmp_path, capsys, loads, tiny_prompts):
    _fails(
        ["c5", "--prompts", str(tiny_prompts), "--out", str(tmp_path), "--k", "7"],
        capsys,
        "--k 7: LlamaForCausalLM@main has 12 heads (3 layers x 4)",
        "pass --k 6 or less",
    )
    _no_records(tmp_path)


def test_matched_layers_that_cannot_be_matched_say_so(tiny_llama):
    with pytest.raises(c5.InputError, match="--matched-layers: layer 0 has 4 heads"):
        c5.draw_random_sets(3, 4, [[0, 0], [0, 1], [0, 2]], k=3, n=1, seed=0, matched_layers=True)


def test_device_without_a_gpu(tmp_path, capsys, loads):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    _fails(
        ["binding", "--out", str(tmp_path), "--device", "cuda"],
        capsys,
        "device 'cuda': this machine has no CUDA GPU",
        "--device cpu",
    )
    _fails(["binding", "--out", str(tmp_path), "--device", "tpu7"], capsys, "device 'tpu7'")
    assert not loads


def test_dtype_and_device_in_the_api():
    import bindscope
    from bindscope.errors import ModelLoadError

    for bad in ("float8", "nn", "int8"):
        with pytest.raises(ModelLoadError, match=f"dtype '{bad}' is not supported"):
            bindscope.load_model("nowhere", dtype=bad)


def test_prompt_file_not_utf8_names_file_and_line(tmp_path, capsys, loads):
    path = tmp_path / "latin1.jsonl"
    rows = prompts_tiny.records()[:2]
    rows[1]["template"] = "Caf\u00e9: a screen reader is"
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    path.write_bytes(text.encode("latin-1"))
    _fails(
        ["binding", "--prompts", str(path), "--out", str(tmp_path / "o")],
        capsys,
        f"{path}:2: not UTF-8 text",
        "save the file as UTF-8",
    )
    assert not loads
    _no_records(tmp_path / "o")


def test_prompt_folder_is_not_a_prompt_file(tmp_path, capsys, loads):
    _fails(
        ["binding", "--prompts", str(tmp_path), "--out", str(tmp_path / "o")],
        capsys,
        f"{tmp_path}: is a folder, not a prompt file",
    )
    assert not loads


def test_out_is_a_file(tmp_path, capsys, loads, tiny_prompts):
    (tmp_path / "taken").write_text("x")
    _fails(
        ["binding", "--prompts", str(tiny_prompts), "--out", str(tmp_path / "taken")],
        capsys,
        "is a file, not a folder; pass a folder for --out",
    )
    assert not loads


def test_out_cannot_be_written(tmp_path, capsys, loads, tiny_prompts, monkeypatch):
    def refuse(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "write_bytes", refuse)
    _fails(
        ["binding", "--prompts", str(tiny_prompts), "--out", str(tmp_path / "o")],
        capsys,
        "cannot write results here (Permission denied); pass an --out folder you can write to",
    )
    assert not loads


def test_half_written_c5_folder(tmp_path, capsys, tiny_llama, tiny_prompts):
    from bindscope.results.records import RecordWriter

    c5.run(tiny_llama, prompts=tiny_prompts, out=tmp_path / "full", k=2, n_random=2,
           progress=False)  # fmt: skip
    full = (tmp_path / "full" / "c5" / "records.jsonl").read_text().splitlines()
    ranking = [line for line in full if '"experiment": "c5-ranking"' in line]
    half = tmp_path / "half"
    with RecordWriter(half / "c5" / "records.jsonl"):
        pass
    (half / "c5" / "records.jsonl").write_text("".join(line + "\n" for line in ranking))
    needle = f"holds only {len(ranking)} C5 ranking record(s) and no evaluated condition"
    err = _fails(["summarize", str(half)], capsys, needle, "rerun the same `bindscope c5")
    assert "--force" not in err
    assert not (half / "c5" / "summary.json").exists()
    for command in ("report", "figures"):
        assert cli.main([command, str(half)]) == 2
        assert needle in capsys.readouterr().err


def test_reader_hints_name_only_options_the_command_has(tmp_path, capsys, tiny_llama):
    from bindscope.experiments import binding as binding_experiment

    binding_experiment.run(
        tiny_llama, prompts=prompts_tiny.write(tmp_path), out=tmp_path, progress=False
    )
    path = tmp_path / "binding" / "records.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + "{oops\n" + "".join(lines[1:]))
    for command in ("summarize", "figures", "report"):
        assert cli.main([command, str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert "records.jsonl:2: not valid JSON" in err and "--force" not in err
        assert "rerun the experiment that wrote it" in err


def _long_rows() -> list[dict]:
    rows = prompts_tiny.records()
    rows[3]["template"] = "In web accessibility, " + "the dog " * 150 + "a screen reader is"
    return rows


def test_prompt_longer_than_the_context_window(tmp_path, capsys, loads, tiny_llama):
    path = prompts_tiny.write(tmp_path, _long_rows())
    needle = f"prompt screen reader/gen_001 ({path}:4):"
    err = _fails(
        ["c5", "--prompts", str(path), "--out", str(tmp_path / "c5"), "--k", "2"],
        capsys,
        "1 prompt(s) do not fit the context window",
        needle,
        "exceed LlamaForCausalLM's context window of 256 tokens",
    )
    assert "lower max_tokens" in err
    _no_records(tmp_path / "c5")
    _fails(
        ["binding", "--prompts", str(path), "--out", str(tmp_path / "b"), "--on-missing",
         "error"],
        capsys,
        needle,
    )  # fmt: skip
    _no_records(tmp_path / "b")
    assert cli.main(["binding", "--prompts", str(path), "--out", str(tmp_path / "s"),
                     "--no-progress"]) == 0  # fmt: skip
    capsys.readouterr()
    skipped = [
        json.loads(line)
        for line in (tmp_path / "s" / "binding" / "records.jsonl").read_text().splitlines()
    ]
    reasons = {r["prompt_id"] + r["term"]: r["metrics"]["skipped"] for r in skipped}
    assert "context window of 256 tokens" in reasons["gen_001screen reader"]


def test_audit_flags_prompts_too_long(tmp_path, capsys, loads):
    path = prompts_tiny.write(tmp_path, _long_rows())
    assert cli.main(["audit", "--prompts", str(path), "--write", str(tmp_path / "a.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "too_long" in out and "1 without a 2+ token span or too long" in out
    rows = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    flagged = [r for r in rows if "too_long" in r["flags"]]
    assert [r["key"] for r in flagged] == ["screen reader/gen_001"]
    assert "context window of 256 tokens" in flagged[0]["reason"]


def test_on_missing_skip_accepts_a_term_absent_from_its_template(
    tmp_path, capsys, loads, tiny_llama
):
    rows = prompts_tiny.records()
    rows[0]["template"] = "In web accessibility, this helps: A) blind users B) the dog"
    path = prompts_tiny.write(tmp_path, rows)
    _fails(
        ["binding", "--prompts", str(path), "--out", str(tmp_path / "e"), "--on-missing",
         "error"],
        capsys,
        f"{path}:1: field 'template': term 'screen reader' does not occur",
    )  # fmt: skip
    assert not loads
    argv = ["binding", "--prompts", str(path), "--out", str(tmp_path / "s"), "--no-progress"]
    assert cli.main(argv) == 0
    records = (tmp_path / "s" / "binding" / "records.jsonl").read_text().splitlines()
    first = next(json.loads(x) for x in records if '"rec_001"' in x and "screen reader" in x)
    assert "term 'screen reader' not found" in first["metrics"]["skipped"]


def test_keys_that_collide_through_a_slash_are_refused(tmp_path, capsys, loads):
    """Term 'screen reader/a' + id 'b' and term 'screen reader' + id 'a/b' share one key."""
    first, second = dict(prompts_tiny.records()[3]), dict(prompts_tiny.records()[3])
    first.update(term="screen reader/a", prompt_id="b")
    first["template"] += " screen reader/a"
    second.update(prompt_id="a/b")
    path = prompts_tiny.write(tmp_path, [first, second])
    err = _fails(
        ["binding", "--prompts", str(path), "--out", str(tmp_path / "o")],
        capsys,
        f"{path}:2: field 'prompt_id' is 'a/b'; it may not contain '/'",
    )
    assert "repeats line" not in err
    assert not loads


def test_bad_exemplars_file_stops_before_the_model(tmp_path, capsys, loads, tiny_prompts):
    bad = tmp_path / "ex.json"
    bad.write_text('{"terms": {"screen reader": {"exemplar": 3}}}')
    _fails(
        ["fewshot", "--prompts", str(tiny_prompts), "--out", str(tmp_path / "o"),
         "--exemplars", str(bad)],
        capsys,
        f"{bad}: not shaped",
    )  # fmt: skip
    assert not loads


def test_a_locked_folder_stops_before_the_model(tmp_path, capsys, loads, tiny_prompts):
    from bindscope.results.lock import FolderLock

    with FolderLock(tmp_path / "binding"):
        _fails(
            ["binding", "--prompts", str(tiny_prompts), "--out", str(tmp_path)],
            capsys,
            "is being written by another bindscope run",
        )
    assert not loads


@pytest.mark.parametrize("name", sorted(registry.definitions()))
@pytest.mark.parametrize("batch_size", [0, -1])
def test_experiments_refuse_a_batch_size_below_one(tmp_path, tiny_llama, name, batch_size):
    """Every experiment goes through the one run skeleton, which checks the batch size first."""
    from bindscope.errors import InputError

    definition = registry.definitions()[name]
    revisions = definition.models == "revisions"  # a sweep takes a model id and its revisions
    options = {"revisions": ["step1"]} if revisions else {}
    out = tmp_path / "out"
    with pytest.raises(InputError, match=rf"batch_size={batch_size} is not a whole number >= 1"):
        definition.run("m" if revisions else tiny_llama, out=out, batch_size=batch_size, **options)
    assert not out.exists()  # refused before anything is written

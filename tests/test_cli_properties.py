"""Property-based: any command line either stops with exit code 2 (a clear message, no
model loaded, no record written) or gets as far as loading the model."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import bindscope
from bindscope import cli, loading
from tests.experiments import prompts_tiny


class Loaded(Exception):
    """The command got as far as loading a model: its input passed every check."""


def _loaded(*args, **kwargs):
    raise Loaded


COMMANDS = ("binding", "audit", "c5", "sweep", "fewshot", "controls", "summarize", "figures",
            "report", "demo")  # fmt: skip
OPTIONS = {
    "--batch-size": "int",
    "--k": "int",
    "--n-random": "int",
    "--dtype": "dtype",
    "--device": "device",
    "--prompts": "path",
    "--ranking": "path",
    "--controls": "path",
    "--real": "path",
    "--exemplars": "path",
    "--out": "out",
    "--on-missing": "text",
    "--ablation": "text",
    "--revisions": "text",
    "--model": "text",
    "--seed": "int",
}
FLAGS = ("--force", "--no-progress", "--matched-layers", "--quick", "--strict")


def values(kind: str, paths: dict[str, str]):
    ints = st.integers(-3, 400).map(str) | st.sampled_from(["x", "1.5", "", "1e3"])
    return {
        "int": ints,
        "dtype": st.sampled_from(["float32", "bfloat16", "float8", "nn", "int8", ""]),
        "device": st.sampled_from(["cpu", "cuda", "cuda:3", "mps", "tpu", "", "cpu:0"]),
        "path": st.sampled_from(["canonical", "controls", *paths.values(), "nope.jsonl"]),
        "out": st.sampled_from([paths["out"]] * 4 + [paths["file"], paths["prompts"] + "/x"]),
        "text": st.sampled_from(["skip", "error", "zero", "mean", "a,b", "", "default"])
        | st.text(max_size=6),
    }[kind]


@pytest.fixture(scope="module")
def paths():
    folder = Path(tempfile.mkdtemp(prefix="cli-properties-"))
    (folder / "a-file").write_text("not a folder")
    (folder / "latin1.jsonl").write_bytes('{"term": "caf\u00e9"}\n'.encode("latin-1"))
    return {
        "prompts": str(prompts_tiny.write(folder)),
        "dir": str(folder),
        "latin1": str(folder / "latin1.jsonl"),
        "file": str(folder / "a-file"),
        "out": str(folder / "out"),
    }


@st.composite
def command_lines(draw, paths):
    command = draw(st.sampled_from(COMMANDS))
    argv = [command]
    if command in ("summarize", "figures", "report"):
        argv.append(draw(values("out", paths) | values("path", paths)))
    options = draw(st.lists(st.sampled_from(sorted(OPTIONS)), max_size=4, unique=True))
    if command not in ("summarize", "figures", "report", "audit") and draw(st.booleans()):
        options = ["--out", *(o for o in options if o != "--out")]  # most runs name a folder
    for option in options:
        argv += [option, draw(values(OPTIONS[option], paths))]
    argv += draw(st.lists(st.sampled_from(FLAGS), max_size=2, unique=True))
    return argv


@settings(
    max_examples=800,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_any_command_line_stops_cleanly_or_reaches_the_model(data, paths, monkeypatch, capsys):
    # bindscope.load_model first: its first lookup caches loading.load_model, which must be
    # the real one, so that undoing the patches restores it
    monkeypatch.setattr(bindscope, "load_model", _loaded)
    monkeypatch.setattr(cli, "_load", _loaded)
    monkeypatch.setattr(loading, "load_model", _loaded)
    monkeypatch.chdir(paths["dir"])  # a command without --out makes its default folder here
    argv = data.draw(command_lines(paths))
    try:
        code = cli.main(argv)
    except Loaded:
        code = None
    err = capsys.readouterr().err
    event("reached the model load" if code is None else f"exit {code}")
    assert "Traceback" not in err
    if code is not None and argv[0] in ("figures", "report"):
        assert code in (0, 2), (argv, err)  # a folder with no results has nothing to draw
    elif code is not None:
        assert code == 2 and "error" in err, (argv, err)
    assert not list(Path(paths["out"]).glob("*/records.jsonl"))

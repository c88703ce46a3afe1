"""No CLI option is silently ignored: a table over the argparse definitions.

Every option of every subcommand has an entry. An option that changes the computation is run
twice on a tiny model with two values: what the run writes (records and summary) must differ,
and the records' provenance must hold the value actually used. Options that do not change the
computation say why, or name the test that covers them. A new option without an entry fails
``test_every_option_has_an_entry``.
"""

from __future__ import annotations

import argparse
import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from bindscope import cli
from tests.conftest import build_tiny

PACKAGE_DATA = Path(__file__).parents[2] / "bindscope" / "prompts" / "data"
TERMS = ("alt text", "alert dialog")


@dataclass(frozen=True)
class Changes:
    """Two values that must give different results, and where the value is recorded."""

    a: str | None  # None: the option left out (a flag, or the default)
    b: str | None
    recorded: Callable[[dict, str | None], bool]  # (a record, the value) -> the record holds it


@dataclass(frozen=True)
class NoEffect:
    """The option does not change the computation (or is covered elsewhere): why."""

    reason: str
    covered_by: str = ""  # "tests/module.py::test_name" when another test covers it


def prompt_file(record, stem):
    """The prompt set named after the file used (controls name both of their sets)."""
    return stem in record["provenance"]["prompt_set"].split("+")


def c5_setting(record, name):
    return record["provenance"]["c5"][name]


def head_setting(record, name):
    return record["provenance"]["settings"][name]


def scan_setting(record, name):
    return record["provenance"]["scan"][name]


def patch_setting(record, name):
    return record["patching"][name]


def circuit_setting(record, name):
    return record["circuit"][name]


def seed_recorded(record, value):
    return record["provenance"]["seed"] == int(value or 0)


LOAD = {
    "--dtype": Changes(None, "bfloat16", lambda r, v: r["provenance"]["dtype"] == (v or "float32")),
    "--device": NoEffect("where the weights live; only cpu here", "test_device_is_recorded"),
    "--remote": NoEffect(
        "runs every trace on NDIF",
        "tests/remote/test_backend.py::test_remote_model_runs_on_the_server_and_matches_its_twin",
    ),
    "--no-prepend-bos": NoEffect(
        "the tiny byte tokenizer has no BOS token; the flag reaches load_model and provenance",
        "tests/experiments/test_sink.py::test_prepend_bos_option_reaches_the_model",
    ),
}
RUN = {
    "--out": NoEffect("where results go"),
    "--force": NoEffect(
        "discards finished records",
        "tests/experiments/test_c5.py::test_resuming_with_other_settings_is_refused",
    ),
    "--no-progress": NoEffect("hides progress bars"),
    "--batch-size": NoEffect(
        "groups rows into forward passes; results equal to rounding",
        "test_batch_size_changes_only_rounding",
    ),
    "--seed": Changes("1", "2", seed_recorded),
}
MODEL = {
    "--model": Changes("A", "B", lambda r, v: r["model"].endswith(v)),
    "--revision": Changes("step1", "step2", lambda r, v: r["revision"] == v),
}
TABLE: dict[str, dict[str, Changes | NoEffect]] = {
    "binding": {
        **LOAD,
        **RUN,
        **MODEL,
        "--prompts": Changes("two", "one", prompt_file),
        "--on-missing": NoEffect(
            "what to do with a term the tokenizer cannot place",
            "tests/metrics/test_binding.py::test_missing_term_errors_or_skips_with_reason",
        ),
    },
    "audit": {
        **{
            option: NoEffect("audit only tokenizes; the load options work as in binding's")
            for option in LOAD
        },
        "--model": NoEffect("the tokenizer to audit with; the same loader as binding's --model"),
        "--revision": NoEffect("the tokenizer's revision; the same loader as binding's"),
        "--prompts": NoEffect(
            "the file audited",
            "tests/experiments/test_demo_cli.py::test_audit_flags_missing_and_single_token_spans",
        ),
        "--write": NoEffect("where the audit goes"),
        "--strict": NoEffect("sets the exit code only"),
    },
    "c5": {
        **LOAD,
        **RUN,
        **MODEL,
        "--prompts": Changes("two", "one", prompt_file),
        "--ranking": Changes(
            None, "one", lambda r, v: r["provenance"]["c5"]["ranking_set"] == (v or "two")
        ),
        "--k": Changes("1", "2", lambda r, v: c5_setting(r, "k") == int(v)),
        "--n-random": Changes("1", "2", lambda r, v: c5_setting(r, "n_random") == int(v)),
        "--sampling": Changes(
            "fixed",
            "sequential",
            lambda r, v: r["provenance"]["c5"].get("sampling", "fixed") == v,
        ),
        "--stop-at": Changes("1", "2", lambda r, v: c5_setting(r, "stop_at") == int(v)),
        "--ablation": Changes("zero", "mean", lambda r, v: c5_setting(r, "ablation") == v),
        "--matched-layers": Changes(
            None, "", lambda r, v: c5_setting(r, "matched_layers") == (v is not None)
        ),
        "--matched-classes": Changes(
            None,
            "",
            lambda r, v: bool(r["provenance"]["c5"].get("matched_classes")) == (v is not None),
        ),
        "--generation-batch-size": NoEffect(
            "groups generation rows into batches; results equal to rounding",
            "test_generation_batch_size_changes_only_batches",
        ),
        "--limit": Changes("1", "2", lambda r, v: c5_setting(r, "limit") == int(v)),
        "--preset": NoEffect(
            "sets other options' values (checked there)",
            "tests/experiments/test_c5_presets.py::test_the_powered_preset_expands_to_its_design",
        ),
        "--spread": NoEffect(
            "which --limit prompts are taken; refused without --limit",
            "tests/experiments/test_c5_stats.py::"
            "test_c5_limit_and_spread_take_prompts_as_scan_does",
        ),
    },
    "sweep": {
        **LOAD,
        **RUN,
        "--model": Changes("ckptA", "ckptB", lambda r, v: r["model"].endswith(v)),
        "--revisions": Changes("step1", "step2", lambda r, v: r["revision"] == v),
        "--prompts": Changes("two", "one", prompt_file),
        "--heads": Changes(None, "", lambda r, v: r["experiment"] != "heads" or v is not None),
        "--generation-batch-size": NoEffect(
            "groups generation rows into batches; results equal to rounding",
            "test_generation_batch_size_changes_only_batches",
        ),
        **{
            option: NoEffect("applies with --heads, as in bindscope heads")
            for option in ("--threshold", "--n-repeated", "--repeat-length", "--top-k")
        },
    },
    "heads": {
        **LOAD,
        **RUN,
        **MODEL,
        "--prompts": Changes("two", "one", prompt_file),
        "--n-repeated": Changes("2", "3", lambda r, v: head_setting(r, "n_repeated") == int(v)),
        "--repeat-length": Changes(
            "4", "5", lambda r, v: head_setting(r, "repeat_length") == int(v)
        ),
        "--threshold": NoEffect(
            "reclassifies heads in the summary only",
            "tests/experiments/test_heads.py::test_thresholds_and_top_k_change_only_the_summary",
        ),
        "--top-k": NoEffect(
            "the binding top-k compared with the classes, in the summary only",
            "tests/experiments/test_heads.py::test_thresholds_and_top_k_change_only_the_summary",
        ),
    },
    "fewshot": {
        **LOAD,
        **RUN,
        **MODEL,
        "--prompts": Changes("two", "one", prompt_file),
        "--exemplars": Changes(
            None,
            "exemplars",
            lambda r, v: r["provenance"]["settings"]["exemplars_sha256"] == EXEMPLAR_SHA[v],
        ),
    },
    "controls": {
        **LOAD,
        **RUN,
        **MODEL,
        "--controls": Changes("controls", "controls_one", prompt_file),
        "--real": Changes("two", "one", prompt_file),
    },
    "scan": {
        **LOAD,
        **RUN,
        **MODEL,
        "--prompts": Changes("two", "one", prompt_file),
        "--ablation": Changes("zero", "mean", lambda r, v: scan_setting(r, "ablation") == v),
        "--unit": Changes("head", "layer", lambda r, v: scan_setting(r, "unit") == v),
        "--limit": Changes("1", "2", lambda r, v: scan_setting(r, "limit") == int(v)),
        "--spread": NoEffect(
            "which --limit prompts are taken; refused without --limit",
            "tests/experiments/test_reliability.py::test_scan_spread_takes_prompts_from_every_term",
        ),
        "--correction": NoEffect(
            "multiple-comparison method of the summary",
            "tests/experiments/test_scan.py::test_layer_unit_and_holm",
        ),
        "--n-resamples": NoEffect("bootstrap and permutation draws of the summary"),
        "--matched-classes": Changes(
            None, "3", lambda r, v: scan_setting(r, "matched_classes") == int(v or 0)
        ),
        "--k": NoEffect(
            "the EB* top set compared under --matched-classes; refused without it",
            "test_scan_k_changes_the_comparison_and_is_refused_without_matched_classes",
        ),
        "--method": Changes(
            None, "attribution", lambda r, v: scan_setting(r, "method") == (v or "exact")
        ),
        "--verify": NoEffect(
            "how many heads --method attribution verifies (refused without it)",
            "tests/experiments/test_scan_attribution.py::"
            "test_verified_heads_equal_the_exact_scan_and_are_the_top_estimates",
        ),
    },
    "circuit": {
        **{option: NoEffect("the same loader as scan's") for option in (*LOAD, *MODEL)},
        **{option: NoEffect("the same run options as scan's") for option in RUN},
        "--task": NoEffect(
            "the tiny tokenizers split every name after its leading space, so no IOI pair "
            "has answers that start apart; the generators are tested on their own",
            "tests/prompts/test_tasks.py::test_ioi_pairs_name_the_indirect_object",
        ),
        "--method": Changes("eap", "eap-ig", lambda r, v: circuit_setting(r, "method") == v),
        "--steps": Changes("2", "3", lambda r, v: circuit_setting(r, "steps") == int(v)),
        "--pairs": Changes("2", "3", lambda r, v: circuit_setting(r, "pairs") == int(v)),
        "--edges": Changes("5", "10", lambda r, v: circuit_setting(r, "edges") == [int(v)]),
        "--selection": Changes("top", "greedy", lambda r, v: circuit_setting(r, "selection") == v),
        "--verify": Changes(None, "1", lambda r, v: circuit_setting(r, "verify") == int(v or 0)),
        "--n-random": Changes("1", "2", lambda r, v: circuit_setting(r, "n_random") == int(v)),
        "--ablation": Changes(
            "corrupted", "mean", lambda r, v: circuit_setting(r, "ablation") == v
        ),
    },
    "patch": {
        **{option: NoEffect("the same loader as scan's") for option in (*LOAD, *MODEL)},
        **{option: NoEffect("the same run options as scan's") for option in RUN},
        "--seed": Changes("1", "2", seed_recorded),
        "--pairs": Changes("pairs_two", "pairs_one", lambda r, v: patch_setting(r, "pairs") == v),
        "--unit": Changes("head", "layer", lambda r, v: patch_setting(r, "unit") == v),
        "--limit": Changes("1", "2", lambda r, v: patch_setting(r, "limit") == int(v)),
        "--correction": NoEffect("multiple-comparison method of the summary"),
        "--n-resamples": NoEffect("bootstrap and permutation draws of the summary"),
        "--method": Changes(
            None, "attribution", lambda r, v: patch_setting(r, "method") == (v or "exact")
        ),
        "--verify": NoEffect(
            "how many heads --method attribution patches exactly (refused without it)",
            "tests/experiments/test_patching_attribution.py::"
            "test_verified_heads_equal_the_exact_patch_answer_pairs",
        ),
    },
    "ndif": {
        "action": NoEffect(
            "up, down or status of the local server; no numbers",
            "tests/local_ndif/test_local_ndif.py::test_cli_checks_the_port_and_says_what_runs",
        ),
        "--port": NoEffect(
            "where the local server listens",
            "tests/local_ndif/test_local_ndif.py::test_up_refuses_busy_ports_before_building_anything",
        ),
        "--home": NoEffect("where the server's venv, logs and models live"),
        "--sandboxed": NoEffect("which model actor the server deploys; the client is unchanged"),
        "--sandbox-key": NoEffect("which key's requests the server runs sandboxed"),
        "--allow-exposed-ports": NoEffect(
            "whether the server may start without its network namespace; no numbers",
            "tests/local_ndif/test_netns.py::"
            "test_without_a_namespace_up_refuses_unless_the_exposure_is_accepted",
        ),
    },
    "view": {
        "results": NoEffect(
            "the folders the page reads; no numbers are written",
            "tests/viewer/test_page_data.py::test_folders_give_span_bsi_maps_and_circuit",
        ),
        "--model": NoEffect("the model whose patterns the page shows (loaded as everywhere)"),
        "--revision": NoEffect("the model's revision (loaded as everywhere)"),
        "--dtype": NoEffect("the model's dtype (loaded as everywhere)"),
        "--device": NoEffect("where the model runs (loaded as everywhere)"),
        "--remote": NoEffect("where the model runs (loaded as everywhere)"),
        "--no-prepend-bos": NoEffect("the model's BOS rule (loaded as everywhere)"),
        "--text": NoEffect(
            "the text shown",
            "tests/viewer/test_page_data.py::test_embedded_patterns_equal_attention_probs",
        ),
        "--prompt": NoEffect(
            "which binding record is shown",
            "tests/viewer/test_real_folders.py::test_binding_and_c5_folders",
        ),
        "--prompts": NoEffect(
            "the prompt file a binding run used",
            "tests/viewer/test_real_folders.py::test_binding_and_c5_folders",
        ),
        "--ablate": NoEffect(
            "the heads of the second run shown",
            "tests/viewer/test_page_data.py::test_embedded_patterns_equal_attention_probs",
        ),
        "--top-k": NoEffect("next tokens listed per run"),
        "--out": NoEffect("where the page goes"),
    },
    "summarize": {"results": NoEffect("the folder read")},
    "figures": {"results": NoEffect("the folder read"), "--out": NoEffect("where figures go")},
    "report": {"results": NoEffect("the folder read"), "--out": NoEffect("where it goes")},
    "demo": {
        "--out": NoEffect("where results go"),
        "--quick": NoEffect(
            "a few terms only",
            "tests/experiments/test_demo_cli.py::test_demo_writes_records_summaries_figures_and_report",
        ),
        "--force": NoEffect("discards finished records"),
        "--no-progress": NoEffect("hides progress bars"),
        "--model": NoEffect(
            "which models run, in order",
            "tests/test_embedded.py::test_demo_model_option_picks_the_models_in_order",
        ),
    },
}
EXEMPLAR_SHA: dict[str | None, str] = {}


def _options(sub: argparse.ArgumentParser) -> list[str]:
    return [
        a.option_strings[-1] if a.option_strings else a.dest
        for a in sub._actions
        if not isinstance(a, argparse._HelpAction)
    ]


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    top = cli.parser()
    action = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_option_has_an_entry():
    for command, sub in _subparsers().items():
        assert command in TABLE, f"subcommand {command} has no entry in TABLE"
        options = set(_options(sub))
        missing = options - set(TABLE[command])
        assert not missing, f"bindscope {command}: options {sorted(missing)} have no entry"
        stale = set(TABLE[command]) - options
        assert not stale, f"bindscope {command}: TABLE lists {sorted(stale)}, which it lacks"


def test_tests_named_in_the_table_exist():
    here = Path(__file__).parents[2]
    for entries in TABLE.values():
        for entry in entries.values():
            if isinstance(entry, NoEffect) and entry.covered_by:
                path, _, name = entry.covered_by.rpartition("::")
                module = (
                    importlib.import_module(path[:-3].replace("/", "."))
                    if path
                    else importlib.import_module(__name__)
                )
                assert path == "" or (here / path).is_file()
                assert callable(getattr(module, name, None)), entry.covered_by


# ----------------------------------------------------------------------------- runs


def _rows(path: Path, terms) -> list[dict]:
    return [
        row
        for row in map(json.loads, path.read_text("utf-8").splitlines())
        if row.get("term") in terms or row.get("source_term") in terms
    ]


def _write(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    return str(path)


@pytest.fixture(scope="module")
def world(tmp_path_factory, byte_tokenizer):
    """Tiny model folders (two weights, two checkpoints each) and small prompt files."""
    root = tmp_path_factory.mktemp("options")
    import torch

    for name, seeds in {"A": (1,), "B": (2,), "ckptA": (3, 4), "ckptB": (5, 6)}.items():
        folders = (
            [(root / name, seeds[0])]
            if len(seeds) == 1
            else [(root / name / f"step{i + 1}", s) for i, s in enumerate(seeds)]
        )
        for folder, seed in folders:
            model = build_tiny("llama", byte_tokenizer)
            torch.manual_seed(seed)
            for p in model.hf.parameters():  # other weights for each folder
                p.data.add_(0.1 * torch.randn_like(p))
            model.hf.save_pretrained(folder)
            byte_tokenizer.save_pretrained(folder)
    canonical = _rows(PACKAGE_DATA / "canonical.jsonl", TERMS)
    keep = {"rec_001", "rec_005", "gen_001", "gen_002"}
    files = {
        "two": _write(root / "two.jsonl", [r for r in canonical if r["prompt_id"] in keep]),
        "one": _write(
            root / "one.jsonl",
            [r for r in canonical if r["prompt_id"] in keep and r["term"] == TERMS[0]],
        ),
    }
    controls = _rows(PACKAGE_DATA / "controls.jsonl", {"screen reader", "alt text"})
    files["controls"] = _write(root / "controls.jsonl", controls[:6])
    files["controls_one"] = _write(root / "controls_one.jsonl", controls[:3])
    exemplars = json.loads((PACKAGE_DATA / "exemplars.json").read_text("utf-8"))
    terms = exemplars.get("terms", exemplars)
    changed = {
        t: {"exemplar": "Users read the page text.", "paraphrase": "A thing."} for t in terms
    }
    files["exemplars"] = _write(root / "exemplars.json", [])
    Path(files["exemplars"]).write_text(json.dumps({"terms": changed}), "utf-8")
    from bindscope.experiments.fewshot import prefixes
    from bindscope.results.settings import content_sha256

    EXEMPLAR_SHA[None] = content_sha256(prefixes(None))
    EXEMPLAR_SHA["exemplars"] = content_sha256(prefixes(files["exemplars"]))
    files["pairs_two"] = _write(root / "pairs_two.jsonl", _pairs(byte_tokenizer, 4))
    files["pairs_one"] = _write(root / "pairs_one.jsonl", _pairs(byte_tokenizer, 3))
    return root, files


def _pairs(tokenizer, n: int) -> list[dict]:
    """``n`` pairs whose clean and corrupted texts tokenize to equal lengths (target metric)."""
    phrases = ["alt text", "a skip link", "the page", "the dog", "the river", "blind users"]
    rows = []
    for a in phrases:
        for b in phrases:
            clean, corrupted = (
                f"In web accessibility, {a} helps",
                f"In web accessibility, {b} helps",
            )
            if a == b or len(tokenizer(clean)["input_ids"]) != len(
                tokenizer(corrupted)["input_ids"]
            ):
                continue
            rows.append({"pair_id": f"p{len(rows)}", "term": a, "clean": clean,
                         "corrupted": corrupted, "target": "people"})  # fmt: skip
    assert len(rows) >= n, "too few equal-length pairs under the tiny tokenizer"
    return rows[:n]


def _argv(command, option, value, root, files, out) -> list[str]:
    base = {
        "--model": str(root / "A"),
        "--prompts": files["two"],
        "--out": str(out),
        "--batch-size": "8",
    }
    if command == "sweep":
        base.update({"--model": str(root / "ckptA"), "--revisions": "step1"})
    if command == "c5":
        base.update({"--k": "1", "--n-random": "1"})
    if command == "scan":
        base.update({"--n-resamples": "99"})
    if command == "patch":
        del base["--prompts"]
        base.update({"--pairs": files["pairs_two"], "--n-resamples": "99"})
    if command == "circuit":
        del base["--prompts"]
        base.update({"--task": "greater-than", "--pairs": "2", "--edges": "5", "--n-random": "1"})
    if command == "controls":
        del base["--prompts"]
        base.update({"--controls": files["controls"], "--real": files["two"]})
    if option == "--revision":
        base["--model"] = str(root / "ckptA")
    if value is None:
        base.pop(option, None)
    elif option == "--model":
        base[option] = str(root / value)
    else:
        base[option] = files.get(value, value)
    argv = [command]
    for name, v in base.items():
        argv += [name] if v == "" else [name, v]
    return [*argv, "--no-progress"]


def _written(out: Path) -> dict:
    found = {}
    for path in sorted(out.rglob("*.json*")):
        if path.name == "settings.json":
            continue
        lines = path.read_text("utf-8").splitlines() if path.suffix == ".jsonl" else []
        data = [json.loads(x) for x in lines] if lines else json.loads(path.read_text("utf-8"))
        for record in data if isinstance(data, list) else []:
            record["provenance"].pop("time", None)
        found[str(path.relative_to(out))] = data
    return found


CASES = [
    (command, option, entry)
    for command, entries in TABLE.items()
    for option, entry in entries.items()
    if isinstance(entry, Changes)
]


@pytest.mark.parametrize(
    ("command", "option", "entry"), CASES, ids=[f"{c} {o}" for c, o, _ in CASES]
)
def test_option_changes_results_and_is_recorded(world, tmp_path, command, option, entry, capsys):
    root, files = world
    written = {}
    for value in (entry.a, entry.b):
        out = tmp_path / f"run-{value}"
        argv = _argv(command, option, value, root, files, out)
        # the same command line (the default run of a command, most often) runs once
        key = tuple("OUT" if arg == str(out) else arg for arg in argv)
        if key not in _RUNS:
            assert cli.main(argv) == 0, (argv, capsys.readouterr().err)
            _RUNS[key] = _written(out)
        written[value] = _RUNS[key]
        records = [
            r for name, data in written[value].items() if name.endswith(".jsonl") for r in data
        ]
        assert records, argv
        shown = None if value is None else Path(files.get(value, value)).stem
        for record in records:
            assert entry.recorded(record, value if option not in PROMPT_FILES else shown), (
                f"bindscope {command} {option} {value}: the record does not hold the value used"
            )
    assert written[entry.a] != written[entry.b], f"bindscope {command} {option} changed nothing"


PROMPT_FILES = {"--prompts", "--ranking", "--controls", "--real", "--pairs"}
# What a command line wrote (its output folder aside), by command line: runs are seeded, so
# one run stands for every test that makes the same one.
_RUNS: dict[tuple[str, ...], dict] = {}


def test_batch_size_changes_only_rounding(world, tmp_path, capsys):
    from tests.tolerance import rounding_bound

    root, files = world
    runs = []
    for size in ("1", "8"):
        out = tmp_path / size
        argv = _argv("binding", "--batch-size", size, root, files, out)
        assert cli.main(argv) == 0, capsys.readouterr().err
        runs.append({r["key"]: r["metrics"] for r in _written(out)["binding/records.jsonl"]})
    # EB* is a difference of means of probabilities: rounding of a 3-layer, 64-wide model
    bound = 2 * rounding_bound(magnitude=1.0, width=64, depth=3)
    assert runs[0].keys() == runs[1].keys()
    for key, metrics in runs[0].items():
        other = runs[1][key]
        assert metrics["best_layer"] == other["best_layer"]
        if metrics["eb_star"] is not None:
            assert abs(metrics["eb_star"] - other["eb_star"]) <= bound


def test_device_is_recorded(world, tmp_path, capsys):
    root, files = world
    argv = _argv("binding", "--device", "cpu", root, files, tmp_path)
    assert cli.main(argv) == 0, capsys.readouterr().err
    records = _written(tmp_path)["binding/records.jsonl"]
    assert {r["provenance"]["device"] for r in records} == {"cpu"}


@pytest.mark.parametrize("command", ["c5", "sweep", "fewshot"])
def test_generation_batch_size_changes_only_batches(world, tmp_path, capsys, monkeypatch, command):
    """Generation runs in batches of the size asked for, and the texts do not change."""
    from bindscope.model import generation as generating

    root, files = world
    option = "--batch-size" if command == "fewshot" else "--generation-batch-size"
    seen: list[int] = []
    real = generating.generate_session

    def spy(model, jobs, kwargs):
        seen.extend(inputs["input_ids"].shape[0] for inputs, _ in jobs)
        return real(model, jobs, kwargs)

    monkeypatch.setattr(generating, "generate_session", spy)
    texts = []
    for size in ("1", "3"):
        seen.clear()
        out = tmp_path / size
        argv = _argv(command, option, size, root, files, out)
        assert cli.main(argv) == 0, capsys.readouterr().err
        assert seen and max(seen) == int(size), (command, size, seen)
        records = _written(out)[f"{command}/records.jsonl"]
        generated = [r for r in records if r["task"] == "generation"]
        # sweep keeps the rubric score of the text, the others the text itself
        texts.append(
            sorted(
                (r["key"], r["metrics"].get("text", r["metrics"].get("behaviour")))
                for r in generated
            )
        )
    assert texts[0] and texts[0] == texts[1]


def test_scan_k_changes_the_comparison_and_is_refused_without_matched_classes(
    world, tmp_path, capsys
):
    root, files = world
    found = {}
    for k in ("1", "2"):
        out = tmp_path / k
        argv = _argv("scan", "--k", k, root, files, out)
        assert cli.main(argv) == 2  # alone --k would change nothing: refused
        assert "--k applies only with --matched-classes" in capsys.readouterr().err
        assert cli.main([*argv, "--matched-classes", "3"]) == 0, capsys.readouterr().err
        written = _written(out)
        assert all(scan_setting(r, "k") == int(k) for r in written["scan/records.jsonl"])
        found[k] = written["scan/summary.json"]
    (a,), (b,) = (list(found[k]["models"].values()) for k in ("1", "2"))
    assert a["binding_top_vs_matched"] != b["binding_top_vs_matched"]


@pytest.mark.parametrize(("command", "folder"), [("scan", "scan"), ("patch", "patching")])
def test_every_recorded_setting_is_an_option_that_changes_results(
    world, tmp_path, capsys, command, folder
):
    """What a scan or patching run records as its settings is each a Changes entry (scan's
    k: above, only with --matched-classes); a file's hash stands for the file's option."""
    root, files = world
    argv = _argv(command, "--seed", "1", root, files, tmp_path)
    assert cli.main(argv) == 0, capsys.readouterr().err
    settings = _written(tmp_path)[f"{folder}/records.jsonl"][0][folder]
    option = {
        "prompt_sha256": "--prompts",
        "pairs_sha256": "--pairs",
        "matched_classes": "--matched-classes",
    }
    assert "spread" not in settings  # recorded only with --spread (shown to change the items)
    for name in settings:
        entry = TABLE[command][option.get(name, "--" + name.replace("_", "-"))]
        assert isinstance(entry, Changes), f"{command} records {name} but it changes nothing"

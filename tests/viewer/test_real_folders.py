"""The viewer on folders the experiments wrote (binding, C5, circuit) on tiny models."""

from __future__ import annotations

import numpy as np
import pytest

import bindscope
from bindscope.errors import InputError
from bindscope.experiments import binding, c5, circuit
from bindscope.results.records import read_records
from tests.conftest import build_tiny
from tests.experiments import prompts_tiny


@pytest.fixture(scope="module")
def qwen2(byte_tokenizer):
    return build_tiny("qwen2", byte_tokenizer)


def test_binding_and_c5_folders(llama_tiny, tmp_path):
    prompts = prompts_tiny.write(tmp_path)
    binding.run(llama_tiny, prompts=prompts, out=tmp_path, progress=False)
    c5.run(llama_tiny, prompts=prompts, out=tmp_path, k=2, n_random=1,
           rubric=prompts_tiny.RUBRIC, progress=False)  # fmt: skip
    stored = [r for r in read_records(tmp_path / "binding" / "records.jsonl")
              if not r["metrics"]["skipped"]]  # fmt: skip
    with pytest.raises(InputError, match="pass the file the run used with --prompts"):
        bindscope.view(llama_tiny, results=tmp_path)  # records name the file's stem only
    page = bindscope.view(llama_tiny, results=tmp_path, prompts=prompts)
    shown = page.data["binding"]
    assert shown["prompt_key"] == stored[0]["prompt_key"]
    assert (shown["span"], shown["bsi"]) == (stored[0]["metrics"]["span"],
                                             stored[0]["metrics"]["bsi"])  # fmt: skip
    template = {f"{r['term']}/{r['prompt_id']}": r["template"] for r in prompts_tiny.records()}
    assert page.data["text"] == template[shown["prompt_key"]]
    ranking = [r["metrics"]["bsi"] for r in read_records(tmp_path / "c5" / "records.jsonl")
               if r["experiment"] == "c5-ranking" and r["metrics"]["bsi"]]  # fmt: skip
    (c5_map,) = page.data["maps"]
    # printed to 4 decimals: half a step
    np.testing.assert_allclose(c5_map["values"], np.nanmean(ranking, 0), atol=5e-5)
    summary = next(iter(c5.summarize(tmp_path / "c5")["models"].values()))
    assert c5_map["marked"] == summary["top_heads"]


def test_circuit_folder(qwen2, tmp_path):
    circuit.run(qwen2, out=tmp_path, task="greater-than", pairs=2, edges="5", verify=2,
                n_random=1, progress=False)  # fmt: skip
    page = bindscope.view(results=tmp_path / "circuit")
    edges = page.data["circuit"]["edges"]
    assert len(edges) == circuit.TOP_EDGES
    assert sum("exact" in e for e in edges) == 4  # the top 2k edges verified
    assert [s["n_edges"] for s in page.data["circuit"]["sizes"]] == [5]

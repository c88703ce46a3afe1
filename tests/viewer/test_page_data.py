"""The data the viewer page embeds equals the model's calls and the records (no browser)."""

from __future__ import annotations

import base64
import html
import json
import re

import numpy as np
import pytest
import torch

import bindscope
from bindscope.cli import main
from bindscope.errors import InputError
from bindscope.interventions import Zero
from tests.viewer.conftest import TEXT, write_results, write_unit_maps

# Stored weights are round(w * 1e6) / 1e6: at most half a step, 5e-7, from the model's
# float32 value (float32 itself is exact to 6e-8 below 1, well inside that).
ROUNDING = 5e-7 + 1e-7


def embedded(page: str) -> dict:
    """The JSON in the page's data element, read as the browser reads it."""
    found = re.search(r'<script id="bindscope-data" type="application/json">(.*?)</script>',
                      page, re.S)  # fmt: skip
    return json.loads(found.group(1))


def unpack(text: str) -> np.ndarray:
    """The varints (7 bits a byte, high bit: more) of a base64 string, written independently
    of bindscope.viewer.encode."""
    out, value, shift = [], 0, 0
    for byte in base64.b64decode(text):
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            out.append(value)
            value = shift = 0
    return np.array(out, dtype=np.float64) / 1e6


def patterns(data: dict, run: int) -> np.ndarray:
    """``[L, H, n, n]`` of run ``run`` as the page rebuilds it."""
    m, n = data["model"], len(data["tokens"])
    heads, rows, cols = m["n_layers"] * m["n_heads"], *np.tril_indices(n)
    out = np.zeros((heads, n, n))
    clean = unpack(data["runs"][0]["patterns"]).reshape(heads, -1)
    same = data["runs"][run]["same"] or [0] * heads
    own = unpack(data["runs"][run]["patterns"]).reshape(-1, rows.size)
    for k, next_own in zip(range(heads), np.cumsum([0, *[1 - s for s in same]])):
        out[k, rows, cols] = clean[k] if same[k] else own[next_own]
    return out.reshape(m["n_layers"], m["n_heads"], n, n)


def test_embedded_patterns_equal_attention_probs(tiny_layout):
    spec = Zero([(1, 0), (1, 3)])
    page = bindscope.view(tiny_layout, TEXT, intervene=spec)
    data = embedded(page.html)
    for run, kwargs in ((0, {}), (1, {"intervene": spec})):
        expected = tiny_layout.attention_probs([TEXT], **kwargs)[0].double().numpy()
        got = patterns(data, run)
        assert np.abs(got - expected).max() <= ROUNDING
        # negative control: the next head's pattern misses by orders of magnitude more
        assert np.abs(got - np.roll(expected, 1, axis=1)).max() > 1000 * ROUNDING
    assert data["runs"][1]["label"] == "Zero(L1.H0, L1.H3)"
    # a zero-ablated head's own pattern, and every head before layer 1, are unchanged
    same = np.array(data["runs"][1]["same"]).reshape(tiny_layout.n_layers, -1)
    assert same[0].all() and same[1].all()


def test_next_tokens_and_lens_follow_the_model(tiny_layout):
    data = bindscope.view(tiny_layout, TEXT, top_k=3).data
    probs = torch.softmax(tiny_layout.logits([TEXT])[0][-1].double(), -1)
    assert [p for _, p in data["runs"][0]["top"]] == pytest.approx(
        probs.topk(3).values.tolist(), abs=5e-5)  # fmt: skip  # printed to 4 digits
    lens = data["lens"]["top"]
    assert len(lens) == tiny_layout.n_layers and len(lens[0]) == len(data["tokens"])
    # the last layer's lens is the model's own prediction (docs of logit_lens)
    assert lens[-1][-1][0] == data["runs"][0]["top"][0]


def test_patterns_take_at_most_three_bytes_a_weight(tiny_layout):
    data = bindscope.view(tiny_layout, TEXT).data
    n, heads = len(data["tokens"]), tiny_layout.n_layers * tiny_layout.n_heads
    weights = heads * n * (n + 1) // 2  # causal: the lower triangle only
    assert len(data["runs"][0]["patterns"]) <= 4 * -(-3 * weights // 3)  # base64 of 3 bytes


def test_page_fetches_nothing(tiny_layout):
    page = bindscope.view(tiny_layout, TEXT).html
    page = page.replace("http://www.w3.org/2000/svg", "")  # a namespace is a name, not a fetch
    # a fetch needs an address: a URL, a src/href other than an anchor or data:, an import
    assert not re.search(r"https?://|\b(src|href)=(?![\"']?(#|data:))|@import|url\(", page)


def test_folders_give_span_bsi_maps_and_circuit(tmp_path, llama_tiny):
    held = write_results(tmp_path, llama_tiny)
    page = bindscope.view(llama_tiny, results=tmp_path)  # the text: the binding prompt's
    data = page.data
    assert data["text"] == TEXT
    assert data["binding"]["span"] == held["span"] and data["binding"]["bsi"] == held["bsi"]
    maps = {m["name"]: m for m in data["maps"]}
    np.testing.assert_allclose(maps["scan"]["values"], held["effect"], atol=5e-5)
    np.testing.assert_allclose(maps["patching"]["values"], held["recovery"], atol=5e-5)
    assert maps["scan"]["marked"] == [[1, 2]] and maps["c5"]["marked"] == [[2, 3], [0, 1]]
    assert [m["name"] for m in data["maps"]] == ["c5", "scan", "patching"]
    assert maps["scan"]["title"] == "Scan: log-prob drop when the head is ablated"
    np.testing.assert_allclose(maps["c5"]["values"], np.mean(held["ranking"], 0), atol=5e-5)
    edges = data["circuit"]["edges"]
    assert [(e["s"], e["r"], e["score"]) for e in edges] == [
        (s, r, x) for (s, r), x in zip(held["edges"], held["scores"])]  # fmt: skip
    assert edges[0]["exact"] == 0.85 and "exact" not in edges[2]
    assert [s["n_edges"] for s in data["circuit"]["sizes"]] == [2, 5]
    assert embedded(page.html) == json.loads(json.dumps(data))


def test_maps_by_attribution_and_by_position(tmp_path, llama_tiny):
    held = write_unit_maps(tmp_path, llama_tiny)
    maps = {m["name"]: m for m in bindscope.view(results=tmp_path).data["maps"]}
    # attribution: the estimate covers every head, the exact effect only the verified one
    np.testing.assert_allclose(maps["scan"]["values"], held["estimate"], atol=5e-5)
    assert maps["scan"]["title"].endswith("(attribution estimate)")
    np.testing.assert_allclose(maps["patching"]["values"], held["by_position"], atol=5e-5)
    assert maps["patching"]["unit"] == "position"
    assert maps["patching"]["title"] == "Patching: share of the gap recovered per position"


def test_a_circuit_folder_alone_needs_no_model(tmp_path, llama_tiny):
    write_results(tmp_path, llama_tiny)
    out = tmp_path / "page.html"
    assert main(["view", str(tmp_path / "circuit"), "--out", str(out)]) == 0
    data = embedded(out.read_text())
    assert "runs" not in data and len(data["circuit"]["edges"]) == 7


def test_bad_input_is_refused(tmp_path, llama_tiny, capsys):
    write_results(tmp_path, llama_tiny)
    assert main(["view", str(tmp_path / "scan"), "--ablate", "3", "--text", "x"]) == 2
    assert "--ablate '3'" in capsys.readouterr().err
    assert main(["view", str(tmp_path / "nothing")]) == 2
    assert "not a folder" in capsys.readouterr().err
    with pytest.raises(InputError, match="no measured record of prompt 'x/y'"):
        bindscope.view(llama_tiny, results=tmp_path, prompt="x/y")
    with pytest.raises(InputError, match="nothing to show"):
        bindscope.view()


@pytest.mark.slow
def test_smollm2_page_at_40_tokens_is_under_2_mb(smollm2, tmp_path):
    text = " ".join(["In web accessibility, a screen reader reads the page aloud."] * 4)
    text = smollm2.tokenizer.decode(smollm2.tokenize(text)[:40])
    assert len(smollm2.tokenize(text)) == 40
    out = tmp_path / "view.html"
    # the command line, as a reader runs it: a bare model, a text, a second run
    assert main(["view", "--text", text, "--ablate", "9.3,10.1", "--out", str(out)]) == 0
    data = embedded(out.read_text())
    assert len(data["tokens"]) == 40 and data["model"]["n_layers"] * data["model"]["n_heads"] == 270
    assert out.stat().st_size < 2_000_000  # the goal (docs/viewer.md: 1.14 MB)


def test_a_notebook_shows_the_page_in_an_iframe(llama_tiny, tmp_path):
    page = bindscope.view(llama_tiny, TEXT)
    shown = re.fullmatch(r'<iframe srcdoc="(.*)" style="[^"]*"></iframe>', page._repr_html_(), re.S)
    assert shown and html.unescape(shown.group(1)) == page.html
    assert page.save(tmp_path / "v.html").read_text() == page.html
    with pytest.raises(InputError, match="is a folder"):
        page.save(tmp_path)

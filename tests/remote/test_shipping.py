"""What travels to NDIF is remote-safe: registered modules import only what the sandbox
allows, and real payloads name nothing the server's unpickler would refuse.

nnsight's own ``remote="local"`` is laxer than the server (it cannot see an editable
install, and it runs the original objects), so these checks walk the registry and unpickle
the actual requests with NDIF's module whitelist instead.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import pickle

import pytest
import torch
from cloudpickle.cloudpickle import _PICKLE_BY_VALUE_MODULES

import bindscope.remote as remote
from bindscope.errors import RemoteSandboxError
from bindscope.interventions import Mean, Patch, Steer, head_means, ops
from bindscope.prompts import PromptRecord
from bindscope.remote import shipping
from bindscope.runners.behaviour import recognition
from bindscope.runners.binding import binding
from tests.conftest import PROMPTS, build_tiny

HEADS = [(0, 1), (2, 2)]


def _imports(module) -> list[str]:
    """Every module a source file imports at run time, at any depth (functions included).

    ``from __future__`` is a compiler directive, and an ``if TYPE_CHECKING:`` block never
    runs (for annotations only, which stay strings): neither is imported on the server.
    """
    tree = ast.parse(inspect.getsource(module))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            node.body = []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append("." * node.level + (node.module or ""))
    return found


def test_registered_modules_import_only_what_the_sandbox_allows():
    remote.register_shipped()
    registered = sorted(n for n in _PICKLE_BY_VALUE_MODULES if n.split(".")[0] == "bindscope")
    assert registered == sorted(remote.SHIPPED_MODULES)
    for name in registered:
        module = importlib.import_module(name)
        bad = [
            imported
            for imported in _imports(module)
            if not shipping._allowed(imported, remote.SANDBOX_MODULES)
            and imported not in remote.SHIPPED_MODULES
        ]
        assert bad == [], f"{name} imports {bad}; NDIF's sandbox allows {remote.SANDBOX_MODULES}"


def test_the_walk_catches_a_forbidden_import(tmp_path, monkeypatch):
    (tmp_path / "leaky_ops.py").write_text(
        "import math\nfrom abc import ABC\n\ndef f():\n    import os\n    return os\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    leaky = importlib.import_module("leaky_ops")
    bad = [i for i in _imports(leaky) if not shipping._allowed(i, remote.SANDBOX_MODULES)]
    assert bad == ["abc", "os"]


@pytest.fixture(scope="module")
def llama(sp_tokenizer):
    model = build_tiny("llama", sp_tokenizer, self_check=False)
    return remote.simulate(model, audit="record")


def _refs(model, body) -> list[str]:
    """Run ``body(model)`` through the simulated server and return what the audit found."""
    server = model.trace_options["backend"]
    server.findings.clear()
    body(model)
    return sorted(server.findings)


def test_ops_module_and_model_pickle_without_bindscope_or_secrets(llama):
    from nnsight.intervention.serialization import dumps, loads

    remote.register_shipped()
    shipped = pickle.loads(dumps(ops))
    assert isinstance(shipped, ops.ShippedModule)
    assert callable(shipped.span_pair_bsi) and callable(shipped.run_layers)
    blob = dumps(llama)  # what a trace body referencing the model sends
    assert b"bindscope.model" not in blob and b"bindscope.families" not in blob
    assert b"trace_options" not in blob and b"SimulatedServer" not in blob
    view = loads(blob, llama.nnsight._remoteable_persistent_objects())
    assert isinstance(view, ops.TraceModel)
    assert (view.n_layers, view.n_heads, view.head_dim) == (3, 4, 16)
    assert view.check_heads([(2, 1), (0, 3)]) == ((0, 3), (2, 1))


def test_a_model_ships_as_the_trace_model_of_its_fields(llama):
    from nnsight.intervention.serialization import dumps, loads

    remote.register_shipped()
    view = loads(dumps(llama), llama.nnsight._remoteable_persistent_objects())
    assert tuple(vars(view)) == ops.TraceModel.FIELDS  # each set once, in the one list's order
    assert tuple(ops.TraceModel.__annotations__) == ops.TraceModel.FIELDS  # each typed
    assert type(view.nnsight) is type(llama.nnsight)  # the server's copy, found by its key
    assert llama.capture_mode == "eager" and view.attention_call_label is None  # recompute only
    for field in set(ops.TraceModel.FIELDS) - {"nnsight", "attention_call_label"}:
        assert getattr(view, field) == getattr(llama, field), field


@pytest.mark.parametrize(
    "name, body",
    [
        ("logits", lambda m: m.logits(PROMPTS, ablate=HEADS)),
        ("attention_probs", lambda m: m.attention_probs(PROMPTS[:2], ablate=HEADS)),
        ("generate", lambda m: m.generate_ids(PROMPTS, max_new_tokens=3, per_row=[HEADS, [], []])),
        (
            "mean generate",
            lambda m: m.generate_ids(
                PROMPTS[:2], max_new_tokens=3, intervene=Mean(HEADS, head_means(m, PROMPTS, HEADS))
            ),
        ),
        (
            "site specs and capture",
            lambda m: m.capture(
                PROMPTS[:2],
                sites=["resid_post", "head_out"],
                intervene=[
                    Steer("resid_pre", 1, torch.ones(m.d_model)),
                    Patch("mlp_out", PROMPTS[:2], layers=[0]),
                ],
            ),
        ),
        ("probe", remote.probe_capture),
    ],
)
def test_model_requests_are_sandbox_clean(llama, name, body):
    assert _refs(llama, body) == []


RECORDS = [
    PromptRecord(
        "gen_001",
        "screen reader",
        "generation",
        "In web accessibility, a screen reader is",
        max_tokens=3,
    ),
    PromptRecord(
        "rec_001",
        "alt text",
        "recognition",
        "Alt text describes an image for",
        choices=("people", "dogs"),
        answer_idx=0,
    ),
]


def test_binding_request_is_sandbox_clean(llama):
    def run(model):
        with contextlib.suppress(KeyError):
            binding(model, RECORDS[:1], ablate=HEADS, on_missing="skip")

    assert _refs(llama, run) == []


@pytest.mark.parametrize("strategy", ["full", "shared_prefix"])
def test_recognition_requests_are_sandbox_clean(llama, strategy):
    found = _refs(llama, lambda m: recognition(m, RECORDS[1:], per_row=[HEADS], strategy=strategy))
    assert found == []


def _leaky_trace(model):
    """A body calling a bindscope function outside ops (pickled by reference)."""
    from bindscope.interventions.head_checks import normalize_heads

    batch = model.encode(PROMPTS[:1])
    with torch.no_grad(), model.nnsight.trace(**batch.inputs, **model.trace_options):
        ablate = normalize_heads([(0, 1)], n_layers=3, n_heads=4, model_name="m")
        out = ablate and model.nnsight.lm_head.output.save()
    return out


def test_audit_refuses_what_the_server_would_refuse(llama):
    strict = remote.simulate(llama, audit="error")
    try:
        with pytest.raises(
            RemoteSandboxError, match=r"head_checks\.normalize_heads \(pickled by ref"
        ):
            _leaky_trace(strict)
    finally:
        remote.simulate(llama, audit="record")
    assert _refs(llama, _leaky_trace) == [
        "bindscope.interventions.head_checks.normalize_heads (pickled by reference; bindscope is "
        "not installed on the server; call it from bindscope.interventions.ops, which ships "
        "by value)"
    ]

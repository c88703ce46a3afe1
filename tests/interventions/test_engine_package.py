"""The trace engine as a small shipped package: what ships, its records, one name per thing."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil

import pytest

import bindscope.interventions.trace as trace
from bindscope.interventions import (
    ops,
)
from bindscope.interventions.flow_specs import PathPatch
from bindscope.interventions.graph import edge_geometry, edge_graph
from bindscope.interventions.plan import plan_batch
from bindscope.interventions.resolve import resolve_rows
from bindscope.interventions.trace import edits
from bindscope.interventions.trace.records import EdgeGeometry, Receiver
from bindscope.remote.shipping import SHIPPED_MODULES
from tests.conftest import PROMPTS, build_tiny

HEADS = [(0, 1), (2, 2)]


def _runtime_imports(name: str) -> set[str]:
    """The bindscope modules ``name`` imports when it runs (not under TYPE_CHECKING)."""
    tree = ast.parse(inspect.getsource(importlib.import_module(name)))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            node.body = []
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bindscope"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("bindscope")}
    return found


def test_the_shipped_list_covers_every_module_the_engine_imports():
    seen, todo = set(), ["bindscope.interventions.ops"]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += sorted(_runtime_imports(name))
    assert seen <= set(SHIPPED_MODULES), f"imported but not shipped: {seen - set(SHIPPED_MODULES)}"
    modules = {f"{trace.__name__}.{m.name}" for m in pkgutil.iter_modules(trace.__path__)}
    assert modules <= set(SHIPPED_MODULES), f"not shipped: {modules - set(SHIPPED_MODULES)}"


def test_ops_gathers_every_public_name_of_the_engine():
    for name in SHIPPED_MODULES:
        module = importlib.import_module(name)
        public = [
            key
            for key, value in vars(module).items()
            if not key.startswith("_")
            and (inspect.isfunction(value) or inspect.isclass(value))
            and value.__module__ == name
        ]
        assert all(getattr(ops, key) is getattr(module, key) for key in public), name


def test_the_head_primitives_live_in_the_edit_engine():
    assert ops.mean_ablate.__module__ == ops.capture_probs.__module__ == edits.__name__
    with pytest.raises(ImportError):
        importlib.import_module("bindscope.interventions.trace.primitives")


@pytest.fixture(scope="module")
def llama(sp_tokenizer):
    return build_tiny("llama", sp_tokenizer, self_check=False)


def test_the_path_plan_carries_records_not_tuples_or_dicts(llama):
    geo = edge_geometry(llama)
    assert isinstance(geo, EdgeGeometry)
    assert (geo.label, geo.qkv, geo.mlp_reads, geo.post) == (
        llama.knockout_site[0],
        1,
        "resid_mid",
        "",
    )
    texts = PROMPTS[:2]
    ids = [llama.tokenize(t) for t in texts]
    graph = edge_graph(llama)
    rows = resolve_rows(llama, ids, intervene=PathPatch(graph.valid, source=tuple(ids)))
    path = plan_batch(llama, llama.pad([0, 1], ids), rows).plan.path
    assert path is not None and path.geo.label == geo.label
    receivers = [entry for entries in path.at.values() for entry in entries]
    assert receivers and all(isinstance(entry, Receiver) for entry in receivers)
    assert {entry.kind for entry in receivers} == {"q", "k", "v", "mlp"}


_SITE_READERS = {"site", "site_tensor", "attention_call", "attention_module"}


def _layer_loops_reading_sites(name: str) -> list[str]:
    """``function:line`` of each ``for ... in range(...n_layers)`` whose body reads a site."""
    tree = ast.parse(inspect.getsource(importlib.import_module(name)))
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef):
            continue
        for loop in ast.walk(function):
            over_layers = (
                isinstance(loop, ast.For)
                and isinstance(loop.iter, ast.Call)
                and ast.unparse(loop.iter.func) == "range"
                and "n_layers" in ast.unparse(loop.iter)
            )
            calls = [n for n in ast.walk(loop) if isinstance(n, ast.Call)] if over_layers else []
            if any(ast.unparse(call.func) in _SITE_READERS for call in calls):
                found.append(f"{function.name}:{loop.lineno}")
    return found


def test_every_walk_over_the_layers_sites_goes_through_layer_sites():
    # one loop over the layers: a walk that reads sites steps through trace.sites.layer_sites
    loops = {name: _layer_loops_reading_sites(name) for name in SHIPPED_MODULES}
    assert {name: found for name, found in loops.items() if found} == {}

"""Small synthetic result folders that follow docs/records.md, for the figure tests.

Binding and C5 summaries come from the real summarisers run on synthetic records, so the
figures are tested against the shapes the experiments write; sweep, few-shot and controls
summaries are built by hand from the documented shapes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bindscope.experiments.binding import summarize_binding
from bindscope.experiments.c5 import summarize_c5
from bindscope.experiments.patching import summarize_patching
from bindscope.experiments.scan import summarize_scan
from bindscope.metrics.stats import wilson_ci
from bindscope.results.records import SCHEMA, record_key, write_summary

MODELS = ("org/tiny-neox", "tiny-llama")
# One model where a figure is drawn per model (keeps the tests fast); two where a figure
# puts models side by side.
MODELS_OF = {
    "binding": MODELS[:1],
    "controls": MODELS[:1],
    "fewshot": MODELS[:1],
    "c5": MODELS,
    "sweep": MODELS[:1],
    "scan": MODELS[:1],
    "patching": MODELS[:1],
    "circuit": MODELS[:1],
}
N_LAYERS, N_HEADS = 3, 4
TERMS = ("screen reader", "alt text", "skip link")
PROMPTS_PER_TERM = 2
REVISIONS = ("step0", "step1000", "step2000", "step4000")
N_RANDOM = 6
ALL = ("binding", "controls", "c5", "sweep", "fewshot", "heads", "scan", "patching", "circuit")
HEAD_REVISIONS = REVISIONS[:2]  # two checkpoints: a map each and one emergence figure


def provenance(model: str, revision: str | None = None, **extra) -> dict:
    return {
        "bindscope": "0.1.0",
        "nnsight": "0.8.1",
        "transformers": "5.0.0",
        "torch": "2.13.0",
        "model": model,
        "revision": revision,
        "family": "llama",
        "dtype": "float32",
        "device": "cpu",
        "attn_implementation": "eager",
        "capture": "eager",
        "remote": False,
        "prompt_set": "canonical",
        "prompt_sha256": "0123456789abcdef" * 4,
        "seed": 0,
        "time": "2025-01-01T00:00:00+00:00",
        **extra,
    }


def record(
    experiment: str,
    model: str,
    term: str,
    prompt_id: str,
    condition: str,
    metrics: dict,
    *,
    task: str = "generation",
    revision: str | None = None,
    heads=(),
    control_group: str | None = None,
    **extra,
) -> dict:
    prompt_key = f"{term}/{prompt_id}"
    return {
        "schema": SCHEMA,
        "experiment": experiment,
        "key": record_key(experiment, model, revision, prompt_key, condition),
        "model": model,
        "revision": revision,
        "family": "llama",
        "prompt_key": prompt_key,
        "prompt_id": prompt_id,
        "term": term,
        "task": task,
        "control_group": control_group,
        "condition": condition,
        "heads": [list(h) for h in heads],
        "ablation": "zero" if heads else None,
        "metrics": metrics,
        "provenance": provenance(model, revision),
        **extra,
    }


def binding_metrics(rng: np.random.Generator, shift: float = 0.0) -> dict:
    bsi = rng.uniform(0, 0.3, size=(N_LAYERS, N_HEADS))
    bsi[1, 2] += 0.5 + shift
    eb = bsi.max(1) - bsi.mean(1)
    best = int(eb.argmax())
    return {
        "eb_star": float(eb[best]),
        "eb_star_norm": float(eb[best] / (1 - 1 / N_HEADS)),
        "best_layer": best,
        "entropy": 1.0,
        "n_span": 2,
        "span": [3, 4],
        "span_tokens": ["screen", " reader"],
        "flags": [],
        "skipped": None,
        "eb": eb.tolist(),
        "bsi": bsi.tolist(),
        "n_layers": N_LAYERS,
        "n_heads": N_HEADS,
    }


def _prompts():
    for term in TERMS:
        for i in range(PROMPTS_PER_TERM):
            yield term, f"p{i}"


def binding_records(seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [
        record("binding", model, term, pid, "clean", binding_metrics(rng))
        for model in MODELS_OF["binding"]
        for term, pid in _prompts()
    ]


def c5_records(seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    settings = {
        "k": 2,
        "n_random": N_RANDOM,
        "ablation": "zero",
        "seed": 0,
        "matched_layers": False,
        "ranking_set": "canonical",
        "ranking_sha256": "abc",
    }
    out = []
    for model in MODELS_OF["c5"]:
        for term, pid in _prompts():
            out.append(
                record("c5-ranking", model, term, pid, "clean", binding_metrics(rng), c5=settings)
            )
        conditions = {"baseline": [], "top": [[1, 2], [0, 0]], "bottom": [[2, 3], [2, 1]]}
        conditions.update({f"random:{i:02d}": [[0, 1], [2, 0]] for i in range(N_RANDOM)})
        for name, heads in conditions.items():
            hurt = {"baseline": 0.0, "top": 0.6, "bottom": 0.1}.get(name, 0.2)
            for term, pid in _prompts():
                for task in ("recognition", "generation"):
                    margin = float(rng.normal(0.3 - hurt, 0.3))
                    score = float(margin > 0)
                    metrics = {"score": score, "margin": margin}
                    if task == "generation":
                        metrics = {"score": float(np.clip(rng.uniform(0.5, 1.0) - hurt, 0, 1))}
                    out.append(
                        record(
                            "c5",
                            model,
                            term,
                            f"{pid}-{task[:3]}",
                            name,
                            metrics,
                            task=task,
                            heads=heads,
                            c5=settings,
                        )
                    )
    return out


def sweep_records() -> list[dict]:
    rng = np.random.default_rng(1)
    out = []
    for revision in REVISIONS:
        for term, pid in _prompts():
            metrics = {**binding_metrics(rng), "behaviour": float(rng.uniform())}
            out.append(record("sweep", MODELS[0], term, pid, "clean", metrics, revision=revision))
    return out


def fewshot_records() -> list[dict]:
    rng = np.random.default_rng(2)
    return [
        record(
            "fewshot",
            model,
            term,
            pid,
            condition,
            {"score": float(rng.uniform()), "text": "...", "hits": [], "contradictions": []},
        )
        for model in MODELS_OF["fewshot"]
        for term, pid in _prompts()
        for condition in ("zero_shot", "few_shot", "paraphrase")
    ]


GROUPS = {"nonsense": "V2", "cross_language": "V2", "rare_pairs": "V2", "compositional": "V1"}


def controls_records() -> list[dict]:
    rng = np.random.default_rng(3)
    out = [
        record("controls", model, term, pid, "clean", binding_metrics(rng))
        for model in MODELS_OF["controls"]
        for term, pid in _prompts()
    ]
    for model in MODELS_OF["controls"]:
        for group in GROUPS:
            for i in range(2):
                out.append(
                    record(
                        "controls",
                        model,
                        f"{group} item",
                        f"p{i}",
                        "clean",
                        binding_metrics(rng, shift=-0.3),
                        control_group=group,
                    )
                )
    return out


def estimate(value: float, half: float = 0.05, n: int = 6, method: str = "bootstrap-bca") -> dict:
    return {
        "value": value,
        "low": value - half,
        "high": value + half,
        "confidence": 0.95,
        "method": method,
        "n": n,
    }


def hypothesis_test(statistic: float, p: float, n: int = 6, method: str = "permutation") -> dict:
    return {
        "statistic": statistic,
        "p_value": p,
        "method": method,
        "alternative": "greater",
        "n": n,
    }


def sweep_summary() -> dict:
    t = len(REVISIONS)
    curve = np.linspace(0.1, 0.6, t)
    models = {}
    for m, model in enumerate(MODELS_OF["sweep"]):
        per_term = {
            term: {
                "eb_star": (curve + 0.05 * i).tolist(),
                "behaviour": (curve**2 + 0.1 * i).tolist(),
            }
            for i, term in enumerate(TERMS)
        }
        per_term[TERMS[-1]]["behaviour"][0] = None  # NaN written as null
        n_lead = {"pearson": 2 + m % 2, "spearman": 2}
        models[model] = {
            "revisions": list(REVISIONS),
            "eb_star": [estimate(v) for v in curve],
            "behaviour": [estimate(v**2) for v in curve],
            "per_term": per_term,
            "leadlag": {
                "n_terms": len(TERMS),
                "per_term": {
                    term: {
                        k: {"forward": 0.5, "backward": 0.2, "lead_diff": 0.3}
                        for k in ("pearson", "spearman")
                    }
                    for term in TERMS
                },
                "n_lead": n_lead,
                "binomial": {
                    k: hypothesis_test(v / len(TERMS), 0.5, len(TERMS), "binomtest")
                    for k, v in n_lead.items()
                },
                "lead_fraction": {k: wilson_ci(v, len(TERMS)).to_dict() for k, v in n_lead.items()},
            },
            "decoupling": {
                "split": 2,
                "n_terms": len(TERMS),
                "n_strict": 1,
                "n_attenuate": 1,
                "mean_early": 0.4,
                "mean_late": -0.1,
                "per_term": {term: {"early": 0.4, "late": -0.1} for term in TERMS},
            },
        }
    return {"experiment": "sweep", "models": models}


def fewshot_summary() -> dict:
    models = {}
    for m, model in enumerate(MODELS_OF["fewshot"]):
        per_term = {}
        for i, term in enumerate(TERMS):
            zero, few, para = 0.3 + 0.1 * i, 0.5 + 0.1 * i - 0.05 * m, 0.32 + 0.1 * i
            per_term[term] = {
                "zero_shot": zero,
                "few_shot": few,
                "paraphrase": para,
                "delta_few_shot": 100 * (few - zero),  # points, as summarize_fewshot writes
                "delta_paraphrase": 100 * (para - zero),
            }
        models[f"{model}@main"] = {
            "conditions": {"zero_shot": 0.4, "few_shot": 0.58, "paraphrase": 0.42},
            "delta_points": {"few_shot": estimate(18.0, 6.0), "paraphrase": estimate(2.0, 4.0)},
            "test": {
                "few_shot": hypothesis_test(0.18, 0.01),
                "paraphrase": hypothesis_test(0.02, 0.6),
            },
            "per_term": per_term,
        }
    return {"experiment": "fewshot", "models": models}


def controls_summary() -> dict:
    models = {}
    for model in MODELS_OF["controls"]:
        groups = {}
        for i, (group, family) in enumerate(GROUPS.items()):
            d = 2.5 - 0.7 * i
            groups[group] = {
                "family": family,
                "n": 2,
                "n_span_mean": 2.5,
                "eb_star": estimate(0.3 + 0.1 * i),
                "cohens_d": estimate(d, 0.8, 8),
                "test": hypothesis_test(0.4 - 0.1 * i, 0.001 * (i + 1), 8),
                "p_holm": min(1.0, 0.004 * (i + 1)),
                "matched": (
                    {
                        "n": 4,
                        "cohens_d": estimate(d - 0.3, 1.0, 4),
                        "test": hypothesis_test(0.3, 0.02),
                    }
                    | {"p_holm": 0.05}
                    if i < 3
                    else {"n": 0, "cohens_d": None, "test": None, "p_holm": None}
                ),
            }
        models[f"{model}@main"] = {
            "real": {"n": 6, "eb_star": estimate(0.7), "n_span_mean": 2.4},
            "groups": groups,
        }
    return {"experiment": "controls", "models": models}


def heads_records(seed: int = 0) -> list[dict]:
    """``bindscope sweep --heads`` records of one model at two checkpoints."""
    rng = np.random.default_rng(seed)
    out = []
    model = MODELS[0]
    shape = {"n_layers": N_LAYERS, "n_heads": N_HEADS, "position_0_is_bos": True}
    for r, revision in enumerate(HEAD_REVISIONS):
        for term, pid in _prompts():
            metrics = binding_metrics(rng)
            for name in ("sink", "previous_token"):
                metrics[name] = rng.uniform(0, 0.3 + 0.5 * r, size=(N_LAYERS, N_HEADS)).tolist()
            metrics["spread"] = rng.uniform(1, 4, size=(N_LAYERS, N_HEADS)).tolist()
            metrics.update(shape, n_tokens=8)
            out.append(record("heads", model, term, pid, "clean", metrics, revision=revision))
        for i in range(3):
            metrics = {
                name: rng.uniform(0, 0.6, size=(N_LAYERS, N_HEADS)).tolist()
                for name in ("induction", "duplicate_token")
            }
            metrics.update(shape, tokens=[5, 6, 7], length=3, start=1)
            out.append(
                record("heads", model, "repeated", f"{i:03d}", "repeated", metrics,
                       task="induction", revision=revision)
            )  # fmt: skip
    return out


def scan_records(seed: int = 0) -> list[dict]:
    """Scan records (head (1, 2) matters) and the BSI records it is compared with."""
    rng = np.random.default_rng(seed)
    settings = {"ablation": "zero", "unit": "head", "seed": 0, "limit": None}
    out = []
    for model in MODELS_OF["scan"]:
        for term, pid in _prompts():
            clean = -1.0 + 0.1 * rng.standard_normal()
            conditions = {"clean": ([], clean)}
            for layer in range(N_LAYERS):
                for head in range(N_HEADS):
                    drop = (0.8 if (layer, head) == (1, 2) else 0.0) + 0.05 * rng.standard_normal()
                    conditions[f"L{layer}.H{head}"] = ([[layer, head]], clean - drop)
            for name, (heads, value) in conditions.items():
                metrics = {"logprob": value, "choice_scores": [value, -3.0], "prediction": 0}
                metrics["score"] = int(value > -1.5)
                rec = record("scan", model, term, pid, name, metrics, task="recognition",
                             heads=heads, scan=settings)  # fmt: skip
                rec["provenance"].update(n_layers=N_LAYERS, n_heads=N_HEADS, scan=settings)
                out.append(rec)
            bsi = binding_metrics(rng)
            out.append(record("scan-bsi", model, term, pid, "clean", bsi, task="recognition"))
    return out


def patching_records(seed: int = 0) -> list[dict]:
    """Patching records: head (2, 1) recovers about 1, the others about 0."""
    rng = np.random.default_rng(seed)
    settings = {"unit": "head", "seed": 0, "limit": None, "pairs": "pairs"}
    out = []
    for model in MODELS_OF["patching"]:
        for term, pid in _prompts():
            clean, corrupted = -1.0, -3.0
            conditions = {"clean": ([], clean)}
            for layer in range(N_LAYERS):
                for head in range(N_HEADS):
                    share = (1.0 if (layer, head) == (2, 1) else 0.0) + 0.05 * rng.standard_normal()
                    conditions[f"L{layer}.H{head}"] = ([[layer, head]], corrupted + 2.0 * share)
            for name, (heads, value) in conditions.items():
                metrics = {"clean": clean, "corrupted": corrupted, "patched": value}
                rec = record("patching", model, term, pid, name, metrics, task="recognition",
                             heads=heads, patching=settings)  # fmt: skip
                rec["ablation"] = "patch" if heads else None
                rec["provenance"].update(n_layers=N_LAYERS, n_heads=N_HEADS, pairs_skipped=0)
                out.append(rec)
    return out


def circuit_records(seed: int = 0) -> list[dict]:
    """Circuit records: pairs, the top edges, faithfulness at two sizes, a verification."""
    rng = np.random.default_rng(seed)
    settings = {"task": "ioi", "method": "eap-ig", "steps": 5, "pairs": 4, "edges": [5, 10],
                "selection": "top", "verify": 2, "n_random": 2}  # fmt: skip
    out = []
    for model in MODELS_OF["circuit"]:
        for i in range(4):
            metrics = {"clean": 2.0 + rng.standard_normal(), "corrupted": 0.1}
            out.append(record("circuit", model, "", f"ioi-{i:04d}", "clean", metrics, task="ioi",
                              circuit=settings))  # fmt: skip
        edges = ["embed->a0.h1<q>", "a0.h1->a2.g0<k>", "m0->m1", "a1.h2->m1", "a2.h3->logits"]
        for rank, edge in enumerate(edges):
            metrics = {"rank": rank, "score": (-1) ** rank / (rank + 1)}
            out.append(record("circuit", model, "", "circuit", f"edge:{edge}", metrics,
                              task="ioi", circuit=settings))  # fmt: skip
        for n, share in ((5, 0.6), (10, 0.8)):
            metrics = {"n_edges": n, "share": share, "low": share - 0.1, "high": share + 0.1,
                       "null": [0.0, 0.1], "stability": 0.9}  # fmt: skip
            out.append(record("circuit", model, "", "circuit", f"top:{n}", metrics, task="ioi",
                              circuit=settings))  # fmt: skip
        metrics = {"k": 2, "spearman": 0.8, "recall_at_k": 1.0, "edges": edges[:4],
                   "estimate": [1.0, -0.5, 0.3, -0.2], "exact": [0.9, -0.4, 0.2, -0.3]}  # fmt: skip
        out.append(record("circuit", model, "", "circuit", "verify", metrics, task="ioi",
                          circuit=settings))  # fmt: skip
    return out


def write_records(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records), "utf-8")


def write_results(root: Path, experiments=ALL) -> Path:
    """Write records.jsonl and summary.json for each named experiment under ``root``."""
    for name in experiments:
        folder = root / name
        if name == "binding":
            records = binding_records()
            summary = {"experiment": "binding", "models": summarize_binding(records)}
        elif name == "c5":
            records = c5_records()
            summary = summarize_c5(records, n_resamples=199)
        elif name == "heads":
            from bindscope.experiments.kit.taxonomy_summary import summarize_heads

            records = heads_records()
            summary = summarize_heads(records)
        elif name == "scan":
            records = scan_records()
            summary = summarize_scan(records, n_resamples=199)
        elif name == "patching":
            records = patching_records()
            summary = summarize_patching(records, n_resamples=199)
        elif name == "circuit":
            from bindscope.experiments.circuit import summary as summarize_circuit

            records = circuit_records()
            summary = summarize_circuit(records)
        else:
            records = {
                "sweep": sweep_records,
                "fewshot": fewshot_records,
                "controls": controls_records,
            }[name]()
            summary = {
                "sweep": sweep_summary,
                "fewshot": fewshot_summary,
                "controls": controls_summary,
            }[name]()
        write_records(folder / "records.jsonl", records)
        write_summary(folder / "summary.json", summary)
    return root


def expected_figures() -> set[str]:
    """The figure names ``make_figures`` should draw from ``write_results(root)``."""
    from bindscope.figures.style import slug

    names = {"c5_cross_architecture", "sweep_leadlag"}
    names |= {f"binding_bsi_{slug(m + '@main')}" for m in MODELS_OF["binding"]}
    names |= {f"controls_{slug(m + '@main')}" for m in MODELS_OF["controls"]}
    names |= {f"fewshot_{slug(m + '@main')}" for m in MODELS_OF["fewshot"]}
    names |= {f"c5_{slug(m + '@main')}" for m in MODELS_OF["c5"]}
    names |= {f"sweep_emergence_{slug(m)}" for m in MODELS_OF["sweep"]}
    names |= {f"heads_map_{slug(MODELS[0] + '@' + r)}" for r in HEAD_REVISIONS}
    names |= {f"heads_emergence_{slug(MODELS[0])}"}
    names |= {f"scan_{slug(m + '@main')}" for m in MODELS_OF["scan"]}
    names |= {f"patching_{slug(m + '@main')}" for m in MODELS_OF["patching"]}
    for kind in ("circuit_graph", "circuit_faithfulness"):
        names |= {f"{kind}_{slug(m + '@main')}" for m in MODELS_OF["circuit"]}
    return names

"""Circuits: which edges between heads and MLPs carry a task, and how faithfully."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bindscope.errors import InputError
from bindscope.experiments.kit.experiment import Common, Experiment, ModelRun, Plan
from bindscope.experiments.kit.options import Options, option
from bindscope.experiments.kit.record_fields import Item
from bindscope.experiments.kit.summary import folder_summary
from bindscope.metrics.stats import mean_ci
from bindscope.prompts.tasks import TASKS, TaskPair, answer_ids, task_pairs
from bindscope.protocols import LanguageModel
from bindscope.results.labels import by_model
from bindscope.results.schema import RecordKind
from bindscope.runners.attribution_metrics import LogitDifference
from bindscope.runners.circuit import ABLATIONS, SELECTIONS, faithfulness, stability, verify
from bindscope.runners.edges import METHODS, EdgeScores, edge_attribution

EXPERIMENT = "circuit"
TOP_EDGES = 50  # edges listed in the summary (and drawn in the graph figure)


def _sizes(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in str(text).split(","))


def _item(task: str) -> Item:
    return Item(f"{task}-circuit", task, "circuit")


def _last_condition(settings: dict) -> str:
    return "verify" if settings["verify"] else f"top:{settings['edges'][-1]}"


@dataclass(frozen=True)
class CircuitOptions(Options):
    """The task, the method and what to measure of the circuit."""

    task: str = option("ioi", "the task's clean/corrupted pairs", choices=tuple(TASKS))
    method: str = option("eap-ig", "edge scores", choices=METHODS)
    steps: int = option(5, "EAP-IG integration steps", type=int, least=1)
    pairs: int = option(16, "pairs drawn", type=int, least=2)
    edges: str = option("50,100,200", "circuit sizes (edges), comma-separated")
    selection: str = option(
        "top", "top: the n largest |scores|; greedy: grown back from the logits",
        choices=tuple(SELECTIONS),
    )  # fmt: skip
    verify: int = option(0, "patch the top 2K edges exactly (default 0: none)", type=int, least=0)
    n_random: int = option(3, "random circuits per size (the null)", type=int, least=0)
    ablation: str = option(
        "corrupted", "what an edge outside the circuit carries: its corrupted value, or its "
        "sender's mean output over the corrupted texts", choices=ABLATIONS,
    )  # fmt: skip

    def check(self) -> None:
        """Refuse unreadable or repeated sizes."""
        try:
            sizes = _sizes(self.edges)
        except ValueError:
            sizes = ()
        if not sizes or min(sizes) < 1:
            raise InputError(f"--edges {self.edges!r}: give sizes >= 1 like 50,100,200")
        repeated = sorted({n for n in sizes if sizes.count(n) > 1})
        if repeated:  # one record key per size: a repeat would run and write it twice
            raise InputError(
                f"--edges {self.edges!r}: size(s) {', '.join(map(str, repeated))} given more "
                "than once; give each circuit size once, like 50,100,200"
            )


def _plan(models: list[LanguageModel], opts: CircuitOptions, common: Common) -> Plan:
    settings = {
        "task": opts.task,
        "method": opts.method,
        "steps": opts.steps if opts.method == "eap-ig" else 1,
        "pairs": opts.pairs,
        "edges": list(_sizes(opts.edges)),
        "selection": opts.selection,
        "verify": opts.verify,
        "n_random": opts.n_random,
        "ablation": opts.ablation,
        "seed": common.seed,  # draws the pairs, the random circuits and the bootstraps
    }

    def each(run: ModelRun) -> None:
        if run.done(_item(opts.task).key, _last_condition(settings)):
            return  # written last, so every other record of the model is there
        pairs = task_pairs(opts.task, opts.pairs, run.model.tokenizer, seed=common.seed)
        records = _measure(run, pairs, opts, settings, common)
        # a run stopped mid-write left some records: the rest follow them, none twice
        run.writer.write_many(r for r in records if r["key"] not in run.writer)

    return Plan(settings, each)


def _measure(
    run: ModelRun, pairs: list[TaskPair], opts: CircuitOptions, settings: dict, common: Common
) -> list[dict]:
    model = run.model
    clean, corrupted = [p.clean for p in pairs], [p.corrupted for p in pairs]
    metric = [LogitDifference(*answer_ids(p, model.tokenizer)) for p in pairs]
    scores = edge_attribution(
        model, clean, corrupted, metric, method=opts.method, steps=settings["steps"],
        batch_size=common.batch_size,
    )  # fmt: skip
    records = [
        run.record(p, "clean", {"clean": a, "corrupted": b}, circuit=settings, pair=_texts(p))
        for p, a, b in zip(pairs, scores.clean.tolist(), scores.corrupted.tolist())
    ]
    item = _item(opts.task)  # the whole circuit, not a pair
    for rank, (edge, score) in enumerate(_top(scores, TOP_EDGES)):
        metrics: dict = {"rank": rank, "score": score}
        records.append(run.record(item, f"edge:{edge[0]}->{edge[1]}", metrics, circuit=settings))
    select = SELECTIONS[opts.selection]
    for n in settings["edges"]:
        kept = faithfulness(
            model, clean, corrupted, metric, scores, select(scores, n),
            n_random=opts.n_random, seed=common.seed, ablation=opts.ablation,
        )  # fmt: skip
        metrics = {
            "n_edges": kept.n_edges,
            "n_total": scores.graph.n_edges,  # the model's edges: the circuit's yardstick
            "ablated": float(np.mean(kept.ablated)),
            "share": kept.share.value,
            "low": kept.share.low,
            "high": kept.share.high,
            "null": [float(x) for x in kept.null],
            "stability": stability(scores, n, select=select, seed=common.seed),
        }
        records.append(run.record(item, f"top:{n}", metrics, circuit=settings))
    if opts.verify:
        checked = verify(model, clean, corrupted, metric, scores, opts.verify)
        metrics = {
            "k": checked.k,
            "spearman": checked.spearman,
            "recall_at_k": checked.recall_at_k,
            "edges": [f"{s}->{r}" for s, r in checked.edges],
            "estimate": [float(x) for x in checked.estimate],
            "exact": [float(x) for x in checked.exact],
        }
        records.append(run.record(item, "verify", metrics, circuit=settings))
    return records


def _texts(pair: TaskPair) -> dict[str, str]:
    return {field: getattr(pair, field) for field in ("clean", "corrupted", "correct", "wrong")}


def _top(scores: EdgeScores, n: int) -> list[tuple[tuple[str, str], float]]:
    mean, graph = scores.mean(), scores.graph
    return [
        (edge, float(mean[graph.senders.index(edge[0]), graph.receivers.index(edge[1])]))
        for edge in scores.top(n)
    ]


def summary(records: list[dict]) -> dict:
    """Per model: the metric gap, the top edges, faithfulness per size, the verification."""
    models = {}
    for label, group in by_model(records, EXPERIMENT).items():
        pairs = [r for r in group if r["condition"] == "clean"]
        edges = sorted(
            (r for r in group if r["condition"].startswith("edge:")),
            key=lambda r: r["metrics"]["rank"],
        )
        sizes = [r for r in group if r["condition"].startswith("top:")]
        models[label] = {
            "settings": group[0]["circuit"],
            "n_pairs": len(pairs),
            "clean": float(np.mean([r["metrics"]["clean"] for r in pairs])),
            "corrupted": float(np.mean([r["metrics"]["corrupted"] for r in pairs])),
            "edges": [[r["condition"][5:], r["metrics"]["score"]] for r in edges],
            "faithfulness": [
                _size_row(r["metrics"])
                for r in sorted(sizes, key=lambda r: r["metrics"]["n_edges"])
            ],
            "verify": next((r["metrics"] for r in group if r["condition"] == "verify"), None),
        }
    return {"experiment": EXPERIMENT, "models": models, "limits": []}


def _size_row(metrics: dict) -> dict:
    null = metrics["null"]
    interval = mean_ci(null).to_dict() if len(null) > 1 else None
    return {**metrics, "null_mean": float(np.mean(null)) if null else None, "null_ci": interval}


def check_complete(folder: Path, records: list[dict]) -> None:
    """Refuse a circuit folder in which a model's last record is missing."""
    for label, group in by_model(records, EXPERIMENT).items():
        settings = group[0]["circuit"]
        last = _last_condition(settings)
        if not any(r["condition"] == last for r in group):
            raise InputError(
                f"{folder / 'records.jsonl'}: {label} has {len(group)} circuit record(s) but "
                f"not its last ({last!r}): the run stopped while writing them; rerun the same "
                f"`bindscope circuit ... --out {folder.parent}` command to finish it"
            )


summarize = folder_summary(EXPERIMENT, summary, check=check_complete)


def text(s: dict) -> list[str]:
    """The summary on the terminal."""
    lines = []
    for label, m in s["models"].items():
        settings = m["settings"]
        lines.append(
            f"  {label}: {settings['task']}, {settings['method']}, "
            f"{settings.get('ablation', 'corrupted')} ablation, {m['n_pairs']} pairs, "
            f"metric {m['clean']:.3f} clean, {m['corrupted']:.3f} corrupted"
        )
        for f in m["faithfulness"]:
            null = "n/a" if f["null_mean"] is None else f"{f['null_mean']:.3f}"
            chosen = settings.get("selection", "top")
            lines.append(
                f"    {chosen} {f['n_edges']} edges keep {f['share']:.3f} [{f['low']:.3f}, "
                f"{f['high']:.3f}] (random: {null}; stability {f['stability']:.2f})"
            )
        if m["verify"]:
            v = m["verify"]
            rho = "n/a" if v["spearman"] is None else f"{v['spearman']:.3f}"  # under 3 edges
            lines.append(
                f"    verified {len(v['edges'])} edges exactly: Spearman {rho}, "
                f"recall@{v['k']} {v['recall_at_k']:.2f}"
            )
    return lines


def _metrics(record: dict) -> tuple[str, ...]:
    condition = record["condition"]
    if condition == "clean":
        return ("clean", "corrupted")
    if condition.startswith("edge:"):
        return ("rank", "score")
    if condition.startswith("top:"):
        return ("n_edges", "ablated", "share", "low", "high", "null", "stability")
    return ("k", "spearman", "recall_at_k", "edges", "estimate", "exact")


DEFINITION = Experiment(
    EXPERIMENT, "circuit", "edge attribution (EAP, EAP-IG) and circuit faithfulness",
    CircuitOptions, summarize, text,
    records=(
        RecordKind(
            EXPERIMENT, conditions=("clean", "verify"), prefixes=("edge:", "top:"),
            metrics=_metrics, tasks=lambda record: tuple(TASKS),
        ),
    ),
    plan=_plan, batch_size=4, check_folder=check_complete,
)  # fmt: skip
run = DEFINITION.run

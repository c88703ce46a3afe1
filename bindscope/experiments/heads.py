"""Head taxonomy (``bindscope heads``): what kind of head each head is.

Sink, previous-token, induction, duplicate-token, binding and spread scores for every head, a
threshold classification, and across checkpoints (``bindscope sweep --heads``) when each class
emerges.

Records (``OUT/heads/records.jsonl``, see docs/records.md):

* one per prompt, condition ``clean``: the binding fields (BSI per head, EB*) plus ``sink``,
  ``previous_token`` and ``spread`` ``[L][H]`` on the whole template;
* one per repeated random-token sequence, condition ``repeated`` (task ``induction``):
  ``induction`` and ``duplicate_token`` ``[L][H]`` and the sequence's random tokens.

The summary averages each score over texts with a bootstrap CI per head, classifies heads
with ``bindscope.metrics.heads.classify`` (thresholds from ``OUT/heads/classification.json``,
written by the run, or given to ``summarize``), counts heads per class, and says how many of
the binding top-k heads are in each class. Several revisions of one model add
``emergence`` (``bindscope.metrics.heads.emergence``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from bindscope.errors import InputError
from bindscope.experiments.common import (
    BINDING_FROM,
    base_record,
    binding_metrics,
    load_revision,
    model_label,
    prompt_set,
    provenance,
    record_key,
    run_chunks,
    stored_binding,
    summarize_folder,
)
from bindscope.experiments.heads_summary import EXPERIMENT, summarize_heads, summarize_model
from bindscope.metrics import heads as taxonomy
from bindscope.results.records import RecordWriter
from bindscope.results.settings import check_settings
from bindscope.runners.binding import binding
from bindscope.runners.head_scores import repeated_scores, text_scores

CLASSIFICATION_FILE = "classification.json"


def run(
    model,
    *,
    prompts="canonical",
    out: str | Path,
    n_repeated: int = 32,
    repeat_length: int = 24,
    thresholds: Mapping[str, float] | None = None,
    top_k: int = 4,
    batch_size: int = 16,
    seed: int = 0,
    force: bool = False,
    progress: bool = True,
) -> dict:
    """Score, classify and summarise every head of ``model``; reruns skip finished texts.

    Args:
        model: A ``bindscope.Model``.
        prompts: Prompt set (name, path or ``PromptSet``): binding, sink, previous-token and
            spread are measured on its templates.
        n_repeated: Random-token sequences for induction and duplicate-token scores.
        repeat_length: Tokens per copy (each sequence is ``2 x repeat_length`` tokens, after
            a BOS when the model prepends one).
        thresholds: Classification thresholds per class (defaults
            ``bindscope.metrics.heads.THRESHOLDS``); they change only the summary.
        top_k: Binding top-k whose overlap with each class is reported.
        seed: Seeds the random sequences and the bootstrap CIs.
        out: Results folder; records go to ``OUT/<experiment>/records.jsonl``.
        batch_size: Texts per forward pass.
        force: Start afresh even where the folder's settings differ (else refused).
        progress: Show a progress bar.

    Returns:
        The summary (also written to ``OUT/heads/summary.json``).
    """
    check_options(n_repeated, repeat_length, thresholds, top_k, model=model)
    folder = Path(out) / EXPERIMENT
    pset = prompt_set(prompts)
    settings = _settings(pset, n_repeated, repeat_length, seed)
    records = folder / "records.jsonl"
    with RecordWriter(records, force=force, settings=settings, models=[model]) as writer:
        _write_classification(folder, thresholds, top_k)
        prov = provenance(model, prompt_set=pset, seed=seed, settings=settings)
        score_model(model, pset, writer, settings, prov, batch_size=batch_size, progress=progress)
    return summarize(folder)


def run_revisions(
    model: str,
    revisions: Sequence[str],
    *,
    loader: Callable,
    prompts="canonical",
    out: str | Path,
    n_repeated: int = 32,
    repeat_length: int = 24,
    thresholds: Mapping[str, float] | None = None,
    top_k: int = 4,
    batch_size: int = 16,
    seed: int = 0,
    force: bool = False,
    progress: bool = True,
    **load_options,
) -> dict:
    """The head taxonomy at every revision of ``model`` (what ``bindscope sweep --heads`` runs).

    Each revision is finished (and on disk) before the next is loaded; a rerun loads only
    revisions with unfinished records. ``loader(model, revision=..., **load_options)``.
    """
    side = RevisionScorer(
        out, prompt_set(prompts), n_repeated=n_repeated, repeat_length=repeat_length,
        thresholds=thresholds, top_k=top_k, batch_size=batch_size, seed=seed, force=force,
        progress=progress,
    )  # fmt: skip
    try:
        for revision in revisions:
            if side.done(model, revision):
                continue
            loaded = load_revision(loader, model, revision, **load_options)
            side.score(loaded, revisions)
            del loaded
    finally:
        side.writer.close()
    return summarize(side.folder)


class RevisionScorer:
    """Scores the heads of each revision a sweep loads, into ``OUT/heads`` (resumable).

    ``bindscope sweep --heads`` uses it so each checkpoint is loaded once for both.
    """

    def __init__(
        self,
        out: str | Path,
        pset,
        *,
        n_repeated: int = 32,
        repeat_length: int = 24,
        thresholds: Mapping[str, float] | None = None,
        top_k: int = 4,
        batch_size: int = 16,
        seed: int = 0,
        force: bool = False,
        progress: bool = True,
    ) -> None:
        check_options(n_repeated, repeat_length, thresholds, top_k)
        self.folder = Path(out) / EXPERIMENT
        self.pset = pset
        self.settings = _settings(pset, n_repeated, repeat_length, seed)
        self.batch_size, self.progress, self.seed = batch_size, progress, seed
        records = self.folder / "records.jsonl"
        self.writer = RecordWriter(records, force=force, settings=self.settings)
        _write_classification(self.folder, thresholds, top_k)

    def done(self, model: str, revision: str | None) -> bool:
        """Whether every record of ``model@revision`` is on disk."""
        keys = _keys(self.pset, self.settings)
        return all(record_key(EXPERIMENT, model, revision, k, c) in self.writer for k, c in keys)

    def score(self, loaded, revisions: Sequence[str]) -> None:
        """Write the records of one loaded revision (those not on disk yet)."""
        check_settings(self.folder, self.settings, models=[loaded])
        prov = provenance(
            loaded, prompt_set=self.pset, seed=self.seed, settings=self.settings,
            sweep={"revisions": list(revisions)},
        )  # fmt: skip
        score_model(
            loaded, self.pset, self.writer, self.settings, prov,
            batch_size=self.batch_size, progress=self.progress,
        )  # fmt: skip

    def close(self) -> dict:
        """Close the records file and write the summary (with ``emergence``)."""
        self.writer.close()
        return summarize(self.folder)

    def __enter__(self) -> RevisionScorer:
        return self

    def __exit__(self, kind, error, trace) -> None:
        if kind is not None:  # interrupted: release the folder, keep what is on disk
            self.writer.close()


def check_options(
    n_repeated, repeat_length, thresholds: Mapping[str, float] | None, top_k, *, model=None
) -> None:
    """Refuse taxonomy options that cannot run, before the folder is touched.

    With ``model``, also a ``top_k`` above its head count and repeated sequences longer than
    its context window.

    Raises:
        InputError: The option named, with a value that works.
    """
    for name, value in (
        ("n_repeated", n_repeated), ("repeat_length", repeat_length), ("top_k", top_k)
    ):  # fmt: skip
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            flag = "--" + name.replace("_", "-")
            raise InputError(f"{name}={value!r} ({flag}) must be a positive integer")
    unknown = sorted(set(thresholds or {}) - set(taxonomy.PRECEDENCE))
    if unknown:
        raise InputError(
            f"no head class {unknown}; thresholds apply to {', '.join(taxonomy.PRECEDENCE)}"
        )
    if model is None:
        return
    total = model.n_layers * model.n_heads
    if top_k > total:
        raise InputError(
            f"top_k={top_k}: {model_label(model)} has {total} heads ({model.n_layers} layers x "
            f"{model.n_heads}); pass --top-k {total} or less"
        )
    window = getattr(model, "context_length", None)
    need = 2 * repeat_length + (1 if model.prepend_bos else 0)
    if window and need > window:
        raise InputError(
            f"repeat_length={repeat_length}: a repeated sequence takes {need} tokens, more than "
            f"{model_label(model)}'s context window of {window}; pass --repeat-length "
            f"{(window - 1) // 2} or less"
        )


def _settings(pset, n_repeated: int, repeat_length: int, seed: int) -> dict:
    return {
        "prompt_sha256": pset.sha256,
        "n_repeated": n_repeated,
        "repeat_length": repeat_length,
        "seed": seed,
    }


def _keys(pset, settings) -> list[tuple[str, str]]:
    keys = [(r.key, "clean") for r in pset]
    keys += [(_repeated_key(i), "repeated") for i in range(settings["n_repeated"])]
    return keys


def _repeated_key(i: int) -> str:
    return f"repeated/{i:03d}"


def _write_classification(folder: Path, thresholds, top_k: int) -> None:
    rule = {"thresholds": {**taxonomy.THRESHOLDS, **(thresholds or {})}, "top_k": top_k}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CLASSIFICATION_FILE).write_text(json.dumps(rule, indent=2) + "\n", "utf-8")


def _grid(tensor) -> list:
    return [[None if math.isnan(float(x)) else float(x) for x in row] for row in tensor]


def score_model(model, pset, writer, settings, prov, *, batch_size: int, progress: bool) -> None:
    """Write the records of one model (one revision) that ``writer`` does not hold yet."""
    bos = bool(model.prepend_bos)
    shape = {"n_layers": model.n_layers, "n_heads": model.n_heads, "position_0_is_bos": bos}

    stored = stored_binding(model, writer.path.parents[1], pset)  # computed once per folder
    reused = {**prov, "binding_from": BINDING_FROM}

    def prompt_work(chunk):
        fresh = [r for r in chunk if r.key not in stored]
        bound = binding(model, fresh, batch_size=batch_size, on_missing="skip")
        computed = {r.key: binding_metrics(res, model) for r, res in zip(fresh, bound)}
        templates = sorted({r.template for r in chunk})
        scores = dict(zip(templates, text_scores(model, templates, batch_size=batch_size)))
        out = []
        for r in chunk:
            s = scores[r.template]
            extra = {name: _grid(s[name]) for name in taxonomy.TEXT_SCORES}
            n = len(model.tokenize(r.template))
            found = computed.get(r.key)
            metrics = {**(found or stored[r.key]), **extra, **shape, "n_tokens": n}
            origin = prov if found is not None else reused
            out.append(base_record(EXPERIMENT, model, r, "clean", metrics, origin))
        return out

    run_chunks(
        pset.records,
        writer=writer,
        key=lambda r: record_key(EXPERIMENT, model.name, model.revision, r.key, "clean"),
        work=prompt_work,
        chunk_size=batch_size * 4,
        desc=f"heads {model_label(model)} prompts",
        progress=progress,
    )
    n, length, seed = settings["n_repeated"], settings["repeat_length"], settings["seed"]
    items = list(range(n))

    def repeated_work(chunk):
        # every sequence is drawn (the draw is seeded as a whole), only the chunk is run
        scores, tokens = repeated_scores(
            model, n=n, length=length, seed=seed, batch_size=batch_size
        )
        out = []
        for i in chunk:
            item = SimpleNamespace(
                key=_repeated_key(i),
                prompt_id=f"repeated-{i:03d}",
                term="",
                task="induction",
                control_group=None,
            )
            metrics = {
                **{name: _grid(scores[i][name]) for name in taxonomy.REPEATED_SCORES},
                **shape,
                "tokens": tokens[i],
                "length": length,
                "start": 1 if bos else 0,
            }
            out.append(base_record(EXPERIMENT, model, item, "repeated", metrics, prov))
        return out

    run_chunks(
        items,
        writer=writer,
        key=lambda i: record_key(
            EXPERIMENT, model.name, model.revision, _repeated_key(i), "repeated"
        ),
        work=repeated_work,
        chunk_size=max(n, 1),
        desc=f"heads {model_label(model)} repeated",
        progress=progress,
    )


def primary_classes(
    model,
    texts: Sequence[str],
    *,
    thresholds: Mapping[str, float] | None = None,
    n_repeated: int = 32,
    repeat_length: int = 24,
    seed: int = 0,
    batch_size: int = 16,
) -> list[list[str]]:
    """Each head's primary class from every score but binding (``[L][H]`` class names).

    What class-matched random head sets are matched on (C5's ``matched_classes``):
    binding is left out so the matched sets copy the top set's sink, previous-token,
    induction and duplicate-token make-up, not its binding.
    """
    means = {}
    found = text_scores(model, list(dict.fromkeys(texts)), batch_size=batch_size)
    for name in taxonomy.TEXT_SCORES:
        means[name] = np.nanmean(np.stack([s[name].numpy() for s in found]), 0)
    found, _ = repeated_scores(
        model, n=n_repeated, length=repeat_length, seed=seed, batch_size=batch_size
    )
    for name in taxonomy.REPEATED_SCORES:
        means[name] = np.stack([s[name].numpy() for s in found]).mean(0)
    return taxonomy.classify(means, thresholds=thresholds)["primary"]


def summarize(
    folder: str | Path, *, thresholds: Mapping[str, float] | None = None, top_k: int | None = None
) -> dict:
    """Rebuild ``summary.json`` from the records (thresholds default to the run's)."""
    folder = Path(folder)
    path = folder / CLASSIFICATION_FILE
    stored = json.loads(path.read_text("utf-8")) if path.is_file() else {}
    rule = {**stored.get("thresholds", {}), **(thresholds or {})}
    k = top_k if top_k is not None else stored.get("top_k", 4)
    return summarize_folder(
        folder, lambda records: summarize_heads(records, thresholds=rule, top_k=k)
    )


__all__ = [
    "RevisionScorer",
    "check_options",
    "primary_classes",
    "run",
    "run_revisions",
    "score_model",
    "summarize",
    "summarize_heads",
    "summarize_model",
]

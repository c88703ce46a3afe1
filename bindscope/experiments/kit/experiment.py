"""What an experiment is, and the one run skeleton every experiment goes through."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from tqdm.auto import tqdm

from bindscope.batch import check_batch_size
from bindscope.errors import InputError
from bindscope.experiments.kit.options import Options, Preset
from bindscope.experiments.kit.record_fields import RecordFields, base_record
from bindscope.prompts.prompt_sets import PromptSet
from bindscope.protocols import LanguageModel
from bindscope.remote import transport
from bindscope.results.records import RecordWriter, provenance, read_records, record_key
from bindscope.results.schema import RecordKind
from bindscope.results.settings import check_settings

Item = TypeVar("Item")


@dataclass(frozen=True)
class Common:
    """What every run takes besides its own options (the shared ``run`` keywords).

    ``seed`` seeds what is drawn and the summary's bootstrap, and is stored in every record;
    ``force`` starts afresh even where the folder's settings differ (else refused).
    """

    out: Path
    batch_size: int
    seed: int
    force: bool
    progress: bool


@dataclass(frozen=True)
class ModelRun:
    """One model's part of an experiment run: its record keys, records and chunked writing.

    ``name`` is the experiment (the records' ``experiment`` field); ``prov`` the provenance
    stored with every record.
    """

    name: str
    model: LanguageModel
    writer: RecordWriter
    prov: dict
    progress: bool = True

    def key(self, item: str, condition: str = "clean", *, name: str | None = None) -> str:
        """The record key of ``item`` (a prompt or pair key) under ``condition``."""
        model = self.model
        return record_key(name or self.name, model.name, model.revision, item, condition)

    def done(self, item: str, condition: str = "clean") -> bool:
        """Whether that record is on disk already."""
        return self.key(item, condition) in self.writer

    def record(
        self,
        item: RecordFields,
        condition: str,
        metrics: dict,
        *,
        name: str | None = None,
        prov: dict | None = None,
        **extra: Any,
    ) -> dict:
        """A result line of this model (``bindscope.experiments.kit.record_fields.base_record``)."""
        prov = self.prov if prov is None else prov
        return base_record(name or self.name, self.model, item, condition, metrics, prov, **extra)

    def chunks(
        self,
        items: Sequence[Item],
        work: Callable[[list[Item]], list[dict]],
        *,
        chunk_size: int,
        desc: str,
        key: Callable[[Item], str] | None = None,
    ) -> int:
        """Run ``work`` on the pending items in chunks, writing each chunk's records at once.

        ``key`` (default: the item's clean key) says whether an item's records are on disk
        already. Returns the number of items run (those not already finished on disk).
        """
        if chunk_size < 1:  # a negative batch size would otherwise run nothing and say nothing
            raise InputError(
                f"batch_size must be 1 or more (it gave chunks of {chunk_size} items); pass e.g. "
                "batch_size=16 (--batch-size 16)"
            )
        key = key or (lambda item: self.key(item.key))  # type: ignore[attr-defined]
        pending = [item for item in items if key(item) not in self.writer]
        done = len(items) - len(pending)
        bar = tqdm(
            total=len(items), initial=done, desc=desc, unit="item", disable=not self.progress
        )
        for start in range(0, len(pending), chunk_size):
            chunk = pending[start : start + chunk_size]
            self.writer.write_many(work(chunk))
            bar.update(len(chunk))
        bar.close()
        return len(pending)


def model_records(path: Path, experiment: str, model: LanguageModel) -> list[dict]:
    """The records in ``path`` of ``experiment`` for ``model`` at its revision."""
    return [
        r
        for r in read_records(path)
        if r["experiment"] == experiment
        and r["model"] == model.name
        and r["revision"] == model.revision
    ]


@dataclass(frozen=True)
class LazyModel:
    """A model the run loads only when its records are not all on disk, then frees.

    ``name`` is its name in record keys (a Hub id); ``load`` loads it at ``revision``
    (``revisions.load_revision``).
    """

    name: str
    revision: str | None
    load: Callable[[], LanguageModel]


@dataclass(frozen=True)
class Plan:
    """How one run goes, as an experiment's ``plan`` lays it out.

    Attributes:
        settings: What the folder must have been made with to resume (``force`` restarts).
        each: Writes one model's records.
        prompt_set: The prompt set recorded in the provenance (when ``provenance`` is None).
        provenance: A model's provenance; default the versions, the prompt set, the seed and
            ``settings``.
        summarize: Rebuilds the summary from the folder; default the experiment's.
        models: The models when the plan makes them (a sweep's `LazyModel` per revision);
            default those given to ``run``.
        items: The ``(item, condition)`` keys each model writes: a `LazyModel` whose keys
            are all on disk (in every folder) is not loaded.
        also: Other experiments' folders written from the same models, ``(name, Plan)``
            each (summarized after the run).
    """

    settings: dict
    each: Callable[[ModelRun], None]
    prompt_set: PromptSet | None = None
    provenance: Callable[[LanguageModel], dict] | None = None
    summarize: Callable[[Path], dict] | None = None
    models: Sequence[LanguageModel | LazyModel] | None = None
    items: Callable[[], Iterable[tuple[str, str]]] | None = None
    also: tuple[tuple[str, Plan], ...] = ()


@dataclass(frozen=True)
class Experiment:
    """One experiment, as the command line, ``summarize``, the text view and the schema see it.

    Attributes:
        name: The module name, the folder ``OUT/<name>`` and the records' ``experiment``.
        command: The ``bindscope`` subcommand (``patch`` runs ``patching``).
        help: The subcommand's line in ``bindscope --help``.
        options: The options dataclass; its ``option`` fields are the subcommand's own flags.
        summarize: Rebuilds ``OUT/<name>/summary.json`` from the records (``folder`` only).
        text: The summary as terminal lines (limits are added by the registry).
        records: The kinds of record it writes (its own and any helper records).
        plan: ``plan(models, options, common) -> Plan``: what ``run`` does per model. The
            command line also calls it with no models, before any loads, for the settings a
            resumed folder must match: model checks belong in loops over ``models``.
        models: ``one`` model, ``several`` (``--model`` repeatable) or ``revisions`` (run
            takes the ``--model`` id; the plan gives a `LazyModel` per revision).
        batch_size: The ``batch_size`` default.
        check_terms: Whether the prompt sets' terms must be found in their templates when
            loaded (binding's ``--on-missing skip`` skips such prompts with the reason).
        show_records: Print the records path after the summary.
        also: Other experiments' folders the run writes, summarized after it.
        check_folder: ``check_folder(folder, records)`` raises ``InputError`` when a folder's
            records cannot be read as results yet (a run stopped halfway); ``summarize``,
            ``figures`` and ``report`` run it before reading.
        presets: Named designs, ``--preset NAME``.
    """

    name: str
    command: str
    help: str
    options: type[Options]
    summarize: Callable[[Path], dict]
    text: Callable[[dict], list[str]]
    records: tuple[RecordKind, ...]
    plan: Callable[[list[Any], Any, Common], Plan]
    models: Literal["one", "several", "revisions"] = "one"
    batch_size: int = 16
    check_terms: Callable[[Any], bool] = lambda options: True
    show_records: bool = False
    also: Callable[[Any], tuple[str, ...]] = lambda options: ()
    check_folder: Callable[[Path, list[dict]], None] | None = None
    presets: Mapping[str, Preset] = field(default_factory=dict)

    def run(
        self,
        models: Any,
        *,
        out: str | Path,
        batch_size: int | None = None,
        seed: int = 0,
        force: bool = False,
        progress: bool = True,
        **options: Any,
    ) -> dict:
        """Run the experiment on ``models`` into ``OUT/<name>``; returns the summary.

        ``models`` is one ``Model`` or a list (``several``), or a model id (``revisions``);
        ``options`` are the experiment's own (its ``options`` dataclass); ``batch_size`` defaults
        to the experiment's; ``force`` discards finished records and settings.

        Raises:
            InputError: An unknown option, a bad value, or a folder made with other settings.
        """
        opts = self.options.of(options)
        batch = self.batch_size if batch_size is None else batch_size
        check_batch_size(batch, example=self.batch_size)
        common = Common(Path(out), batch, seed, force, progress)
        found = list(models) if isinstance(models, (list, tuple)) else [models]  # one or several
        plan = self.plan(found, opts, common)
        return run_models(self.name, plan.models or found, common, plan, seed, self.summarize)


def _finished(name: str, plan: Plan, writer: RecordWriter, model: Any) -> bool:
    """Whether a lazy model's records of this folder are all on disk (a loaded one: never)."""
    if not isinstance(model, LazyModel) or plan.items is None:
        return False
    return all(
        record_key(name, model.name, model.revision, item, condition) in writer
        for item, condition in plan.items()
    )


def run_models(
    name: str,
    models: Sequence[LanguageModel | LazyModel],
    common: Common,
    plan: Plan,
    seed: int,
    summarize: Callable[[Path], dict],
) -> dict:
    """Write each model's records into ``OUT/<name>`` (and the plan's other folders).

    One writer per folder; a `LazyModel` is loaded only when a folder lacks some of its
    records, its settings checked, and freed before the next. Returns the summary.
    """
    parts = ((name, plan), *plan.also)
    loaded_now = [m for m in models if not isinstance(m, LazyModel)]
    with contextlib.ExitStack() as stack:
        # no progress bars: no job-status lines from NDIF either
        stack.enter_context(transport.job_status(common.progress))
        writers = [
            stack.enter_context(
                RecordWriter(
                    common.out / part / "records.jsonl",
                    force=common.force,
                    settings=p.settings,
                    models=loaded_now,
                )
            )
            for part, p in parts
        ]
        for model in models:
            todo = [(n, p, w) for (n, p), w in zip(parts, writers) if not _finished(n, p, w, model)]
            if not todo:
                continue
            loaded = model.load() if isinstance(model, LazyModel) else model
            for part, p, writer in todo:
                if isinstance(model, LazyModel):
                    check_settings(writer.path.parent, p.settings, models=[loaded])
                prov = (
                    p.provenance(loaded)
                    if p.provenance is not None
                    else provenance(loaded, prompt_set=p.prompt_set, seed=seed, settings=p.settings)
                )
                p.each(ModelRun(part, loaded, writer, prov, common.progress))
            del loaded  # a lazy model is freed before the next loads
    for part, p in plan.also:
        assert p.summarize is not None, f"{part}: a plan written beside another summarizes"
        p.summarize(common.out / part)
    return (plan.summarize or summarize)(common.out / name)


__all__ = ["Common", "Experiment", "LazyModel", "ModelRun", "Plan", "run_models"]

"""What an experiment is, and the one run skeleton every experiment goes through."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from tqdm.auto import tqdm

from bindscope.batch import check_batch_size
from bindscope.errors import whole_number
from bindscope.experiments.kit.options import Options, Preset
from bindscope.experiments.kit.record_fields import ITEM_FIELDS, RecordFields
from bindscope.prompts.prompt_sets import PromptSet
from bindscope.protocols import LanguageModel
from bindscope.remote import transport
from bindscope.results.records import RecordWriter, provenance, read_records, record_key
from bindscope.results.schema import RecordKind
from bindscope.results.settings import check_settings

Item = TypeVar("Item")


@dataclass(frozen=True)
class Common:
    """What every run takes besides its own options (the shared ``run`` keywords)."""

    out: Path
    batch_size: int
    seed: int
    force: bool
    progress: bool


@dataclass(frozen=True)
class ModelRun:
    """One model's part of an experiment run: its record keys, records and chunked writing."""

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
        heads: Iterable[Sequence[int]] = (),
        ablation: str | None = None,
        **extra: Any,
    ) -> dict:
        """A result line with the fields every experiment shares (see docs/records.md)."""
        experiment, model = name or self.name, self.model
        heads = [list(h) for h in heads]
        return {
            "experiment": experiment,
            "key": self.key(item.key, condition, name=experiment),
            "model": model.name,
            "revision": model.revision,
            "family": model.family,
            "prompt_key": item.key,
            **{name: getattr(item, name) for name in ITEM_FIELDS[1:]},
            "condition": condition,
            "heads": heads,
            "ablation": ablation if heads else None,
            "metrics": metrics,
            "provenance": self.prov if prov is None else prov,
            **extra,
        }

    def chunks(
        self,
        items: Sequence[Item],
        work: Callable[[list[Item]], list[dict]],
        *,
        chunk_size: int,
        desc: str,
        key: Callable[[Item], str] | None = None,
    ) -> int:
        """Run ``work`` on the pending items in chunks, writing each chunk's records at once."""
        # a negative batch size would otherwise run nothing and say nothing
        whole_number(chunk_size, "chunk_size", "pass e.g. batch_size=16 (--batch-size 16)", least=1)
        key = key or (lambda item: self.key(item.key))  # type: ignore[attr-defined]
        pending = [item for item in items if key(item) not in self.writer]
        done = len(items) - len(pending)
        with tqdm(
            total=len(items), initial=done, desc=desc, unit="item", disable=not self.progress
        ) as bar:
            for start in range(0, len(pending), chunk_size):
                chunk = pending[start : start + chunk_size]
                self.writer.write_many(work(chunk))
                bar.update(len(chunk))
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
    """A model the run loads only when its records are not all on disk, then frees."""

    name: str
    revision: str | None
    load: Callable[[], LanguageModel]


@dataclass(frozen=True)
class Plan:
    """How one run goes, as an experiment's ``plan`` lays it out."""

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

    The command line also calls ``plan`` with no models, before any loads, for the settings a
    resumed folder must match: model checks belong in loops over ``models``.
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
        typed: Options | None = None,
        /,
        *,
        out: str | Path,
        batch_size: int | None = None,
        seed: int = 0,
        force: bool = False,
        progress: bool = True,
        **options: Any,
    ) -> dict:
        """Run on ``models`` into ``OUT/<name>``; the options typed, as keywords or both.

        ``run(model, C5Options(k=4), out=...)`` is ``run(model, out=..., k=4)``.
        """
        opts = self.options.of(options, typed)
        batch = self.batch_size if batch_size is None else batch_size
        check_batch_size(batch, example=self.batch_size)
        common = Common(Path(out), batch, seed, force, progress)
        found = list(models) if isinstance(models, (list, tuple)) else [models]  # one or several
        plan = self.plan(found, opts, common)
        return self._write(plan.models or found, common, plan)

    def _write(
        self, models: Sequence[LanguageModel | LazyModel], common: Common, plan: Plan
    ) -> dict:
        """Write each model's records into ``OUT/<name>`` (and the plan's other folders)."""
        parts = ((self.name, plan), *plan.also)
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
                todo = [
                    (n, p, w) for (n, p), w in zip(parts, writers) if not _finished(n, p, w, model)
                ]
                if not todo:
                    continue
                loaded = model.load() if isinstance(model, LazyModel) else model
                for part, p, writer in todo:
                    if isinstance(model, LazyModel):
                        check_settings(writer.path.parent, p.settings, models=[loaded])
                    prov = (
                        p.provenance(loaded)
                        if p.provenance is not None
                        else provenance(
                            loaded, prompt_set=p.prompt_set, seed=common.seed, settings=p.settings
                        )
                    )
                    p.each(ModelRun(part, loaded, writer, prov, common.progress))
                del loaded  # a lazy model is freed before the next loads
        for part, p in plan.also:
            assert p.summarize is not None, f"{part}: a plan written beside another summarizes"
            p.summarize(common.out / part)
        return (plan.summarize or self.summarize)(common.out / self.name)


def _finished(name: str, plan: Plan, writer: RecordWriter, model: Any) -> bool:
    if not isinstance(model, LazyModel) or plan.items is None:
        return False
    return all(
        record_key(name, model.name, model.revision, item, condition) in writer
        for item, condition in plan.items()
    )


__all__ = ["Common", "Experiment", "LazyModel", "ModelRun", "Plan"]

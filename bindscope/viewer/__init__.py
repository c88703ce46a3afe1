"""``bindscope.view``: one self-contained HTML page of a model's attention and a study's results."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bindscope.errors import InputError
from bindscope.protocols import LanguageModel
from bindscope.viewer.folders import folder_data, prompt_text
from bindscope.viewer.model_data import model_data
from bindscope.viewer.page import render

__all__ = ["View", "view"]


@dataclass(frozen=True)
class View:
    """The page: ``html`` (the whole file), shown inline by a notebook, written by ``save``."""

    html: str
    data: dict

    def save(self, path: str | Path) -> Path:
        """Write the page to ``path`` (UTF-8) and return it."""
        path = Path(path)
        if path.is_dir():
            raise InputError(f"{path} is a folder; pass the HTML file's path")
        path.write_text(self.html, "utf-8")
        return path

    def _repr_html_(self) -> str:
        # an iframe keeps the page's ids and script apart from the notebook's
        return (
            f'<iframe srcdoc="{html.escape(self.html, quote=True)}" '
            'style="width:100%;height:900px;border:1px solid #ccc"></iframe>'
        )


def _check_binding(binding: dict, model: LanguageModel, n_tokens: int) -> None:
    if binding["model"] != model.name:
        raise InputError(
            f"{binding['where']}: {binding['prompt_key']} was measured on {binding['model']!r}, "
            f"not {model.name!r}; pass --model {binding['model']} (or that model object)"
        )
    if max(binding["span"], default=-1) >= n_tokens:
        raise InputError(
            f"{binding['where']}: {binding['prompt_key']}'s span {binding['span']} lies past "
            f"the text's {n_tokens} tokens; is the text the prompt's template?"
        )


def _model_for(model: LanguageModel | str | None, binding: dict | None) -> LanguageModel:
    """``model`` itself, else loaded by name: the given one, the records', or the default."""
    if model is not None and not isinstance(model, str):
        return model
    # loads only when a page needs patterns and was given no model object
    from bindscope.loading import load_model

    name = model if model is not None else (binding or {}).get("model")
    return load_model(None if name in (None, "default") else name)


def view(
    model: LanguageModel | str | None = None,
    text: str | None = None,
    *,
    results: str | Path | Sequence[str | Path] = (),
    intervene: Any = None,
    prompt: str | None = None,
    prompts: str | Path | None = None,
    top_k: int = 8,
) -> View:
    """The viewer page of ``text`` under ``model`` and of ``results`` folders (docs/viewer.md)."""
    paths = [Path(results)] if isinstance(results, (str, Path)) else [Path(p) for p in results]
    name = model if isinstance(model, str) or model is None else model.name
    found = folder_data(paths, model=name, prompt=prompt) if paths else {"maps": []}
    binding = found.get("binding")
    if text is None and binding is not None:
        text = prompt_text(binding, prompts)
    if text is None and intervene is not None:
        raise InputError("intervene= needs a text (or a binding folder) to run the model on")
    data: dict[str, Any] = {"maps": found["maps"], "circuit": found.get("circuit")}
    if text is not None:
        loaded = _model_for(model, binding)
        data |= model_data(loaded, text, intervene=intervene, top_k=top_k)
        if binding is not None:
            _check_binding(binding, loaded, len(data["tokens"]))
            data["binding"] = {k: binding[k] for k in ("prompt_key", "term", "span", "bsi")}
    elif not data["maps"] and data["circuit"] is None:
        raise InputError("nothing to show: pass a text (and model) or result folders")
    title = f"bindscope view: {data['model']['name']}" if "model" in data else "bindscope view"
    return View(render(data, title), data)

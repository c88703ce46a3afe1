"""Dictionaries (SAEs, transcoders) from SAELens or Gemma Scope files, and their features.

``dictionary.features([3, 7])`` is a spec target; see docs/dictionaries.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from bindscope.batch import DEFAULT_BATCH_SIZE
from bindscope.errors import DictionaryError
from bindscope.interventions.hook_names import (
    TL_SITES,
    TRANSCODERS,
    hook_name,
    site_of_hook,
    skip_weights,
    transcoder_output,
)
from bindscope.interventions.trace.features import TraceDictionary

if TYPE_CHECKING:
    from bindscope.protocols import LanguageModel

__all__ = ["Dictionary", "Features", "capture_features", "feature_means", "load_dictionary"]

CFG, WEIGHTS = "cfg.json", "sae_weights.safetensors"
# The most a dictionary's weights may weigh to travel in every remote request (one a batch).
REMOTE_BYTES = 64 * 2**20
ARCHITECTURES = {"standard": "relu", "relu": "relu", "jumprelu": "jumprelu", "topk": "topk"}
_SCOPE_SITES = {
    "res": "resid_post",
    "resid_post": "resid_post",
    "mlp": "mlp_out",
    "mlp_out": "mlp_out",
    "att": "head_out",
    "attn": "head_out",
    "attn_out": "attn_out",
}


@dataclass(frozen=True, eq=False)
class Dictionary:
    """A sparse dictionary of one site of one layer: ``f = act(x W_enc + b_enc)``.

    A transcoder encodes ``weights.source`` (``hook_name``) and decodes into ``site``
    (``hook_name_out``), plus ``x_in W_skip.T`` with a skip connection.
    """

    site: str
    layer: int
    weights: TraceDictionary
    architecture: str = "relu"
    hook_name: str = ""
    model_name: str | None = None
    path: str = "<memory>"
    extra: dict = field(default_factory=dict, compare=False)
    hook_name_out: str = ""
    W_skip: torch.Tensor | None = field(default=None, compare=False)  # [d_out, d_in]

    def __post_init__(self) -> None:
        w, arch = self.weights, self.architecture
        if arch not in ("relu", "jumprelu", "topk"):
            raise DictionaryError(
                f"{self.path}: architecture {arch!r} is not relu, jumprelu or topk"
            )
        has_threshold, has_k = w.threshold is not None, w.k is not None
        if has_threshold != (arch == "jumprelu") or has_k != (arch == "topk"):
            raise DictionaryError(
                f"{self.path}: architecture {arch!r} with threshold "
                f"{'set' if has_threshold else 'None'} and k={w.k}: jumprelu needs a threshold, "
                "topk a k, relu neither"
            )
        sites = (self.site, w.source or self.site)
        if any(s not in TL_SITES.values() for s in sites) or not _is_layer(self.layer):
            raise DictionaryError(
                f"{self.path}: site {self.site!r}, source {w.source!r}, layer {self.layer!r}: a "
                f"dictionary reads and writes one of {', '.join(TL_SITES.values())} of a layer >= 0"
            )

    @property
    def d_in(self) -> int:
        """The width of the site it reads."""
        return int(self.weights.W_enc.shape[0])

    @property
    def d_out(self) -> int:
        """The width of the site it writes (``d_in`` but for a transcoder)."""
        return int(self.weights.W_dec.shape[1])

    @property
    def d_sae(self) -> int:
        """The number of latents (features)."""
        return int(self.weights.W_enc.shape[1])

    @property
    def nbytes(self) -> int:
        """The size of its weights in bytes."""
        w = self.weights
        tensors = (w.W_enc, w.b_enc, w.W_dec, w.b_dec, w.threshold)  # W_skip stays here
        return sum(t.numel() * t.element_size() for t in tensors if t is not None)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Feature activations ``[..., d_sae]`` of activations ``[..., d_in]``."""
        return self.weights.encode(x)

    def decode(self, f: torch.Tensor) -> torch.Tensor:
        """The reconstruction ``[..., d_in]`` of features ``f``."""
        return self.weights.decode(f)

    def features(self, indices: int | Iterable[int]) -> Features:
        """These latents, as a spec target: ``Zero(dictionary.features([3, 7]))``."""
        return Features(self, indices)

    def check(self, model: LanguageModel) -> None:
        """Refuse a dictionary that does not fit ``model`` (raises `DictionaryError`)."""
        where = f"{self.path} ({self.hook_name or self.site})"
        for site, name in ((self.weights.source, "hook_name"), (self.site, "hook_name_out")):
            if site is not None and site not in model.sites:
                raise DictionaryError(
                    f"{where}: site {site!r} (field {name}) is not a site of {model.name} "
                    f"({model.family}); its sites are "
                    f"{', '.join(s for s in model.sites if s != 'pattern')}"
                )
        order, source = list(model.sites), self.weights.source
        if source is not None and order.index(source) >= order.index(self.site):
            raise DictionaryError(
                f"{where}: it reads {source} and writes {self.site}, which {model.name} "
                "computes first; a transcoder writes a later site of its layer (hook_mlp_out)"
            )
        if not 0 <= self.layer < model.n_layers:
            raise DictionaryError(
                f"{where}: layer {self.layer} (field hook_name) is outside {model.name}'s "
                f"{model.n_layers} layers; this dictionary was made for another model"
            )
        if getattr(model, "remote", False) and self.nbytes > REMOTE_BYTES:
            raise DictionaryError(
                f"{where}: {model.name} runs on NDIF, where its {self.nbytes / 2**20:.0f} MiB of "
                f"weights go in every request (at most {REMOTE_BYTES // 2**20} MiB): run it locally"
            )
        for name, site, got, weight in (
            ("d_in", self.weights.source or self.site, self.d_in, "W_enc rows"),
            ("d_out", self.site, self.d_out, "W_dec columns"),
        ):
            width = model.n_heads * model.head_dim if site == "head_out" else model.d_model
            if got != width:
                raise DictionaryError(
                    f"{where}: {name}={got} (field {name}, {weight}) but {model.name}'s {site} "
                    f"is {width} wide; this dictionary was made for another model"
                )

    def save(self, folder: str | Path) -> Path:
        """Write ``cfg.json`` and ``sae_weights.safetensors`` (SAELens' format) into ``folder``."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        w = self.weights
        tensors = {"W_enc": w.W_enc, "b_enc": w.b_enc, "W_dec": w.W_dec, "b_dec": w.b_dec}
        for name, value in (("threshold", w.threshold), ("W_skip", self.W_skip)):
            if value is not None:
                tensors[name] = value
        save_file({k: v.detach().contiguous() for k, v in tensors.items()}, folder / WEIGHTS)
        name = self.hook_name or hook_name(w.source or self.site, self.layer)
        cfg = {
            "architecture": _saved_architecture(self),
            "d_in": self.d_in,
            "d_sae": self.d_sae,
            "dtype": str(w.W_enc.dtype).removeprefix("torch."),
            "apply_b_dec_to_input": bool(w.input_bias),
            "normalize_activations": "none",
            "hook_name": name,
            "metadata": {"hook_name": name},
            **({"k": w.k} if w.k is not None else {}),
            **(_transcoder_fields(self) if w.source else {}),
            **({"model_name": self.model_name} if self.model_name else {}),
        }
        (folder / CFG).write_text(json.dumps(cfg, indent=2) + "\n")
        return folder


def _is_layer(layer: Any) -> bool:
    return isinstance(layer, int) and not isinstance(layer, bool) and layer >= 0


def _saved_architecture(found: Dictionary) -> str:
    """The architecture name SAELens gives ``found`` in ``cfg.json``."""
    if found.weights.source is None:
        return "standard" if found.architecture == "relu" else found.architecture
    if found.W_skip is not None:
        return "skip_transcoder"
    return "jumprelu_transcoder" if found.architecture == "jumprelu" else "transcoder"


def _transcoder_fields(found: Dictionary) -> dict:
    """The output fields of a SAELens transcoder's ``cfg.json``."""
    out = found.hook_name_out or hook_name(found.site, found.layer)
    return {"d_out": found.d_out, "hook_name_out": out, "hook_layer_out": found.layer}


class Features:
    """Latents of a `Dictionary`: what a spec edits in place of heads or a site."""

    def __init__(self, dictionary: Dictionary, indices: int | Iterable[int]) -> None:
        if isinstance(indices, (int, np.integer)):
            indices = [int(indices)]
        chosen = tuple(int(i) for i in indices)
        bad = [i for i in chosen if not 0 <= i < dictionary.d_sae]
        if not chosen or bad:
            raise DictionaryError(
                f"{dictionary.path}: latents {bad or '[]'} are not among its "
                f"{dictionary.d_sae} (0..{dictionary.d_sae - 1}); name some of them"
            )
        self.dictionary, self.indices = dictionary, tuple(sorted(set(chosen)))

    def __repr__(self) -> str:
        d = self.dictionary
        return f"features({d.site}@{d.layer}, {list(self.indices)})"


def load_dictionary(
    path: str | Path,
    model: LanguageModel | None = None,
    *,
    site: str | None = None,
    layer: int | None = None,
) -> Dictionary:
    """A dictionary from a local folder (or file) in SAELens' or Gemma Scope's format.

    Gemma Scope's files name no site or layer: ``site=``/``layer=`` or the path give them
    (``layer_12`` below a ``res``/``mlp``/``att`` folder). With ``model``, it is checked.
    """
    path = Path(path)
    if path.is_dir() and (path / CFG).exists():
        found = _read_saelens(path)
    else:
        found = _read_gemma_scope(path, site, layer)
    _check_agrees(found, site, layer)
    if model is not None:
        found.check(model)
    return found


def _check_agrees(found: Dictionary, site: str | None, layer: int | None) -> None:
    """Refuse ``site=``/``layer=`` that disagree with what the file says."""
    for name, given, own in (("site", site, found.site), ("layer", layer, found.layer)):
        if given is not None and own is not None and given != own:
            raise DictionaryError(
                f"{found.path}: {name}={given!r} was asked for but the file says {own!r} "
                f"({found.hook_name}); load the dictionary of that {name} instead"
            )


def _read_saelens(folder: Path) -> Dictionary:
    """A SAELens folder: ``cfg.json`` and ``sae_weights.safetensors``."""
    where = str(folder / CFG)
    cfg = json.loads((folder / CFG).read_text())
    meta = cfg.get("metadata") or cfg.get("meta") or {}
    name = str(cfg.get("hook_name") or meta.get("hook_name") or "")
    site, layer = site_of_hook(name, where)
    source, out_name = transcoder_output(cfg, meta, where, layer) or (None, "")
    if source is not None:  # hook_name is where it reads; hook_name_out where it writes
        source, site = site, source
    architecture = _architecture(cfg, where)
    if cfg.get("normalize_activations", "none") not in ("none", None):
        raise DictionaryError(
            f"{where}: normalize_activations={cfg['normalize_activations']!r} is not supported; "
            "fold the scaling into the weights (SAELens: fold_activation_norm_scaling_factor)"
        )
    if meta.get("hook_head_index", cfg.get("hook_head_index")) is not None:
        raise DictionaryError(
            f"{where}: hook_head_index is set (a dictionary of one head's hook_z); bindscope "
            "reads dictionaries of a whole site (attn.hook_z: every head, concatenated)"
        )
    file = folder / WEIGHTS
    if not file.exists():
        raise DictionaryError(f"{folder}: no {WEIGHTS} beside {CFG}")
    k = _activation_k(cfg) if architecture == "topk" else None
    tensors = load_file(str(file))
    weights = _weights(tensors, str(file), architecture, k, cfg, source)
    skip = (
        skip_weights(tensors, str(file), weights)
        if cfg.get("architecture") == "skip_transcoder"
        else None
    )
    model_name = cfg.get("model_name") or meta.get("model_name")
    return Dictionary(
        site, layer, weights, architecture, name, model_name, str(folder), cfg, out_name, skip
    )


def _architecture(cfg: dict, where: str) -> str:
    """The architecture named in a SAELens ``cfg.json`` (older ones: ``activation_fn_str``)."""
    named = cfg.get("architecture") or "standard"
    if named == "standard" and cfg.get("activation_fn_str") == "topk":
        named = "topk"
    known = {**ARCHITECTURES, **TRANSCODERS}
    if named not in known:
        raise DictionaryError(
            f"{where}: architecture {named!r} (field architecture) is not supported; "
            f"bindscope reads {', '.join(known)}"
        )
    return known[named]


def _activation_k(cfg: dict) -> int | None:
    """TopK's ``k`` (field ``k``, or ``activation_fn_kwargs.k`` in older configs)."""
    k = cfg.get("k", (cfg.get("activation_fn_kwargs") or {}).get("k"))
    return None if k is None else int(k)


def _read_gemma_scope(path: Path, site: str | None, layer: int | None) -> Dictionary:
    """Gemma Scope's parameters (``W_enc``, ``W_dec``, ``b_enc``, ``b_dec``, ``threshold``)."""
    file = _params_file(path)
    if file.suffix == ".npz":
        with np.load(file) as npz:
            tensors = {k: torch.from_numpy(npz[k]) for k in npz.files}
    else:
        tensors = load_file(str(file))
    named_site, named_layer = _scope_where(file)
    site = site or named_site
    layer = layer if layer is not None else named_layer
    if site is None or layer is None:
        raise DictionaryError(
            f"{file}: neither site= and layer= nor the path (a layer_N folder below a "
            f"res/mlp/att folder) say where it reads; pass site='resid_post', layer=N"
        )
    weights = _weights(tensors, str(file), "jumprelu", None, {"apply_b_dec_to_input": False})
    return Dictionary(site, layer, weights, "jumprelu", hook_name(site, layer), None, str(file))


def _params_file(path: Path) -> Path:
    """The parameters file of a Gemma Scope folder (or the file itself)."""
    if path.is_file():
        return path
    for name in ("params.npz", "params.safetensors"):
        if (path / name).exists():
            return path / name
    raise DictionaryError(
        f"{path}: no dictionary here: a SAELens folder holds {CFG} and {WEIGHTS}, a Gemma "
        "Scope folder params.npz or params.safetensors"
    )


def _scope_where(file: Path) -> tuple[str | None, int | None]:
    """The site and layer a Gemma Scope path names (``gemma-scope-2b-pt-res/layer_12/...``)."""
    names = [name for part in reversed(file.parts) for name in (part, part.rsplit("-", 1)[-1])]
    layers = [re.match(r"layer_(\d+)", part) for part in reversed(file.parts)]
    site = next((_SCOPE_SITES[name] for name in names if name in _SCOPE_SITES), None)
    return site, next((int(found.group(1)) for found in layers if found), None)


def _weights(
    tensors: dict[str, torch.Tensor],
    where: str,
    architecture: str,
    k: int | None,
    cfg: dict,
    source: str | None = None,
) -> TraceDictionary:
    """The weights, their shapes checked against one another and the config."""
    missing = [n for n in ("W_enc", "b_enc", "W_dec", "b_dec") if n not in tensors]
    if architecture == "jumprelu" and "threshold" not in tensors:
        missing.append("threshold")
    if missing:
        raise DictionaryError(f"{where}: tensors {missing} are missing ({architecture})")
    bad = [name for name, value in tensors.items() if not value.is_floating_point()]
    if bad:
        raise DictionaryError(f"{where}: tensors {bad} are not floating point")
    t = {name: value.float() for name, value in tensors.items()}  # encoded in float32
    d_in, d_sae = t["W_enc"].shape
    d_out = int(t["W_dec"].shape[-1]) if source else d_in
    expected = {
        "b_enc": (d_sae,),
        "W_dec": (d_sae, d_out),
        "b_dec": (d_out,),
        "threshold": (d_sae,),
    }
    for name, shape in expected.items():
        if name in t and tuple(t[name].shape) != shape:
            raise DictionaryError(
                f"{where}: {name} is {tuple(t[name].shape)}, not {shape} (W_enc is {d_in}x{d_sae})"
            )
    for name, value in (("d_in", d_in), ("d_sae", d_sae), ("d_out", d_out)):
        if name in cfg and int(cfg[name]) != value:
            raise DictionaryError(
                f"{where}: field {name}={cfg[name]} but W_enc is {d_in}x{d_sae}, "
                f"W_dec {d_sae}x{d_out}"
            )
    if architecture == "topk" and not (k and 0 < k <= d_sae):
        raise DictionaryError(f"{where}: topk needs field k in 1..{d_sae}, got {k!r}")
    threshold = t.get("threshold") if architecture == "jumprelu" else None
    input_bias = source is None and bool(cfg.get("apply_b_dec_to_input", True))
    return TraceDictionary(
        t["W_enc"], t["b_enc"], t["W_dec"], t["b_dec"], threshold, k, input_bias, source
    )


@torch.no_grad()
def capture_features(
    model: LanguageModel,
    texts: Sequence[str],
    dictionary: Dictionary,
    *,
    intervene: Any = None,
    per_row: Any = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> list[torch.Tensor]:
    """Feature activations ``[n, d_sae]`` per text of the site as the model computes with it.

    After any intervention at that site (``intervene``/``per_row`` as in ``model.capture``).
    """
    dictionary.check(model)
    site, layer = dictionary.weights.source or dictionary.site, dictionary.layer
    got = model.capture(
        texts, [site], [layer], intervene=intervene, per_row=per_row, batch_size=batch_size
    )
    return [dictionary.encode(found[site][layer].flatten(1)) for found in got]


def feature_means(
    model: LanguageModel,
    texts: Sequence[str],
    dictionary: Dictionary,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> torch.Tensor:
    """Each latent's mean activation ``[d_sae]`` over every position of ``texts`` (for ``Mean``)."""
    found = capture_features(model, texts, dictionary, batch_size=batch_size)
    return torch.cat(found).mean(0)

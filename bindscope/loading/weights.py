"""Reading a model's weights here, its dtype, device and revision checked before anything is."""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import torch

from bindscope.errors import ModelLoadError
from bindscope.loading.embedded_models import auto_load, embedded, embedded_folder

#: Pickle weight files: bindscope never unpickles them (safetensors or GGUF only).
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


def _refuse_pickle(folder: Path) -> None:
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
    """A local folder's checkpoint for ``revision``: the subfolder ``FOLDER/REVISION``."""
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
    """Why the Hugging Face Hub cannot be reached in one short try (None: any HTTP answer)."""
    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    try:
        urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=timeout)
    except urllib.error.HTTPError:
        return None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        return f"{endpoint}: {reason}"
    return None


def from_pretrained(
    source: str, *, revision: str | None, dtype: torch.dtype, device: str | torch.device | None
) -> tuple[Any, Any]:
    """``(hf_model, tokenizer)`` from a Hub id or a local folder: the cache first, then the Hub."""
    local = Path(source).is_dir()
    if local:
        source, revision = str(_model_folder(source, revision)), None
    kwargs = {"revision": revision} if revision else {}
    try:
        # Try the local cache first so an offline machine never stacks up retries.
        model, tok = auto_load(source, dtype, local_files_only=True, **kwargs)
    except (OSError, ValueError) as cached_error:
        if local:
            raise ModelLoadError(
                f"{source}: not a loadable model folder ({cached_error})"
            ) from None
        _refuse_offline(source, revision)
        model, tok = _download(source, dtype, revision, **kwargs)
    if device is not None:
        model = model.to(device)
    return model.eval(), tok


def _model_folder(source: str, revision: str | None) -> Path:
    folder = checkpoint_folder(source, revision) if revision else Path(source)
    if not (folder / "config.json").is_file():
        raise ModelLoadError(
            f"{folder}: not a loadable model folder (no config.json); pass a folder written by "
            "save_pretrained, a Hugging Face id, or None for the default model"
        )
    _refuse_pickle(folder)
    return folder


def _refuse_offline(source: str, revision: str | None) -> None:
    why: str | None = None
    if os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE"):
        why = "the Hub is switched off (HF_HUB_OFFLINE is set)"
    else:
        offline = hub_unreachable()
        why = offline and f"the Hub cannot be reached ({offline}): this machine looks offline"
    if why:
        raise ModelLoadError(
            f"{source}{'@' + revision if revision else ''} is not in the local Hugging Face "
            f"cache and {why}. Download it on a machine with network access, or pass a "
            "local folder."
        )


def _download(
    source: str, dtype: torch.dtype, revision: str | None, **kwargs: Any
) -> tuple[Any, Any]:
    try:
        return auto_load(source, dtype, **kwargs)
    except Exception as exc:
        raise ModelLoadError(
            f"Could not load {source}{'@' + revision if revision else ''} from the Hugging "
            f"Face Hub: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}. Check the "
            "id and revision, and that this machine can reach huggingface.co (no network "
            "means only cached models and local folders load)."
        ) from None


#: Weight dtypes a model can be loaded in (``--dtype``).
DTYPES = ("float32", "float16", "bfloat16", "float64")


def check_dtype(dtype: torch.dtype | str | None) -> torch.dtype:
    """A weights dtype by name or object (None: float32); only ``DTYPES`` are accepted."""
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
    """A device this machine has (None: CPU), else ``ModelLoadError``."""
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


def _check_revision(model: Any, revision: str | None) -> None:
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


def _loaded_object(
    model: Any, tokenizer: Any, dtype: torch.dtype, device: str | torch.device | None, cast: bool
) -> tuple[Any, Any, str]:
    # moved and cast in place, never left as it was without a word
    if tokenizer is None:
        raise ModelLoadError(
            f"load_model got a {type(model).__name__} object without a tokenizer; pass "
            "tokenizer=AutoTokenizer.from_pretrained(...) alongside it"
        )
    hf = model.eval()
    if device is not None or cast:
        hf.to(device=device, dtype=dtype if cast else None)
    return hf, tokenizer, getattr(hf.config, "name_or_path", None) or type(hf).__name__


def read_weights(
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
    if packaged is not None:
        folder = embedded_folder(packaged.name, cache, full=verify_cache)
        hf, tok = from_pretrained(str(folder), revision=None, dtype=checked, device=device)
        return hf, tok, packaged.name, folder
    if isinstance(model, (str, os.PathLike)):
        hf, tok = from_pretrained(str(model), revision=revision, dtype=checked, device=device)
        return hf, tok, str(model), None
    hf, tok, name = _loaded_object(model, tokenizer, checked, device, cast=dtype is not None)
    return hf, tok, name, None

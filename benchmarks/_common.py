"""Shared helpers for the benchmarks: fresh-process workers, peak memory, machine, tables.

Every strategy runs in its own Python process (``script --worker NAME``) so that its peak
resident memory is its own. The model is loaded and warmed up first; then the kernel's
peak-RSS mark is reset (``/proc/self/clear_refs``) so that "peak" means the peak while the
timed work ran, and "loaded" is the resident size just before it started.
"""

from __future__ import annotations

import json
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


# -- memory -----------------------------------------------------------------------------


def _status_kb(field: str) -> int | None:
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return None
    match = re.search(rf"^{field}:\s+(\d+) kB", text, re.MULTILINE)
    return int(match.group(1)) if match else None


def rss_mb() -> float:
    """Current resident set size in MiB."""
    kb = _status_kb("VmRSS")
    return (kb if kb is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) / 1024


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (Linux >= 4.0); False where that is not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def peak_rss_mb() -> float:
    """Peak resident set size in MiB since the last reset (or since the process started)."""
    kb = _status_kb("VmHWM")
    return (kb if kb is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) / 1024


# -- machine ----------------------------------------------------------------------------


def machine() -> dict:
    """CPU, cores, load and library versions, for the README and the printed header."""
    import nnsight
    import torch
    import transformers

    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "nnsight": getattr(nnsight, "__version__", "?"),
        "transformers": transformers.__version__,
        "loadavg": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }


def machine_line(info: dict) -> str:
    load = info.get("loadavg")
    load_text = "/".join(f"{x:.2f}" for x in load) if load else "?"
    return (
        f"{info['cpu']}, {info['cores']} cores ({info['torch_threads']} torch threads), "
        f"Python {info['python']}, torch {info['torch']}, nnsight {info['nnsight']}, "
        f"transformers {info['transformers']}; load average {load_text}"
    )


# -- workers ----------------------------------------------------------------------------


def run_worker(script: str | Path, name: str, args: Sequence[str] = ()) -> dict:
    """Run ``script --worker NAME ARGS`` in a fresh interpreter and return its JSON result."""
    with tempfile.TemporaryDirectory(prefix="bindscope-bench-") as folder:
        result = Path(folder) / "result.json"
        command = [sys.executable, str(script), "--worker", name, "--result", str(result), *args]
        started = time.perf_counter()
        done = subprocess.run(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        elapsed = time.perf_counter() - started
        if done.returncode != 0 or not result.is_file():
            tail = done.stdout.decode(errors="replace")[-4000:]
            raise RuntimeError(f"worker {name} failed (exit {done.returncode}):\n{tail}")
        data = json.loads(result.read_text())
        data["process_s"] = elapsed
        return data


def measure(work: Callable[[], object], *, repeat: int = 1) -> tuple[object, dict]:
    """Time ``work`` (best of ``repeat`` runs) and record the run-phase peak RSS.

    The best run is reported because on a shared machine other processes only ever add
    time; CPU seconds (user + system, all threads) and the load average are kept too.
    """
    loaded = rss_mb()
    exact = reset_peak_rss()
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    times, cpu, value = [], [], None
    for _ in range(repeat):
        usage = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        value = work()
        times.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_SELF)
        cpu.append(after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime)
    best = min(range(repeat), key=times.__getitem__)
    return value, {
        "seconds": times[best],
        "seconds_all": times,
        "cpu_seconds": cpu[best],
        "loaded_mb": loaded,
        "peak_mb": peak_rss_mb(),
        "peak_is_run_phase": exact,
        "load_before": load_before,
        "load_after": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }


def write_result(path: str | Path, data: dict) -> None:
    Path(path).write_text(json.dumps(data))


def quiet() -> None:
    """Silence progress bars and library chatter in worker processes."""
    import warnings

    os.environ.setdefault("TQDM_DISABLE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    warnings.filterwarnings("ignore")
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except ImportError:
        pass


MODEL_HELP = (
    "model to benchmark: default (SmolLM2-135M-Instruct), gemma-3-270m, qwen2.5-coder-0.5b, "
    "or any load_model name, Hub id or folder"
)


def load_default_model(name: str | None = None):
    """The ``--model`` model (default: the default model), eval mode; ``(model, seconds)``.

    An embedded model converts on its first load (outside the timed work).
    """
    import bindscope

    started = time.perf_counter()
    model = bindscope.load_model(name)  # takes "default" like --model
    model.hf.eval()
    return model, time.perf_counter() - started


# -- selection and printing -------------------------------------------------------------


def evenly_spaced(items: Sequence, n: int | None) -> list:
    """``n`` items spread evenly over ``items`` (all of them when ``n`` is None or large)."""
    items = list(items)
    if n is None or n >= len(items):
        return items
    if n <= 0:
        return []
    step = len(items) / n
    return [items[int(i * step)] for i in range(n)]


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub-flavoured Markdown table (also readable as plain text)."""
    cells = [[str(h) for h in headers], *[[_cell(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row):
        return "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(cells[0]), rule, *[line(r) for r in cells[1:]]])


def _cell(value) -> str:
    if isinstance(value, float):
        if value == 0:
            return "0"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 1:
            return f"{value:.2f}"
        return f"{value:.3g}"
    return str(value)


def verdict(ok: bool) -> str:
    return "MET" if ok else "MISSED"

"""The local NDIF server's own venv: Python 3.11, CPU torch first, then ndif and its pins."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

from bindscope.errors import NdifServerError

PYTHON = "python3.11"
TORCH = "torch==2.13.0"
# ndif 0.1.2 says Requires-Python >=3.12, but only cp311 CPU torch wheels exist here (3.12
# pulls the CUDA build); its code runs on 3.11. --only-binary keeps pip off a numpy sdist
# that needs 3.12. Every pin matters: ndif 0.1.x calls nnsight APIs newer releases change.
PINS = (
    "ndif[api,ray]==0.1.2",
    "nnsight==0.8.1",
    "ray==2.60.0",
    "transformers==5.24.0",
    "accelerate==1.15.0",
    "peft==0.21.2",
    "fastapi==0.165.0",
    "gunicorn==27.0.1",
    "numpy==2.4.6",
    "gguf==0.19.0",
    # The object store: moto's S3 server (ndif's docs use rustfs, which no registry carries).
    "moto==5.2.5",
    "flask==3.1.3",
    "flask-cors==6.0.5",
)
STAMP = ".bindscope-ndif-installed"


def venv_python(venv: Path) -> Path:
    """The venv's interpreter."""
    return venv / "bin" / "python"


def _stamp_text() -> str:
    return "\n".join((TORCH, *PINS)) + "\n"


def ready(venv: Path) -> bool:
    """The venv exists and was built with today's pins."""
    stamp = venv / STAMP
    return stamp.is_file() and stamp.read_text() == _stamp_text()


def build(venv: Path, log: Path) -> None:
    """Build the server venv once (about 2 minutes and 1.7 GB); later calls return at once."""
    if ready(venv):
        return
    python = shutil.which(PYTHON)
    if python is None:
        raise NdifServerError(
            f"bindscope ndif up needs {PYTHON} for the server's venv (ndif's CPU torch "
            "wheels are cp311 only); install it (apt-get install python3.11-venv) and retry"
        )
    started = time.perf_counter()
    print(f"bindscope ndif: building the server venv in {venv} (once, ~2 min)", file=sys.stderr)
    pip = [str(venv_python(venv)), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    steps = [
        [python, "-m", "venv", "--clear", str(venv)],
        [*pip, TORCH],  # first and alone: nothing may pull a CUDA torch
        [*pip, "--ignore-requires-python", "--only-binary=:all:", TORCH, *PINS],
    ]
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as out:
        for step in steps:
            out.write(f"$ {' '.join(step)}\n")
            out.flush()
            if subprocess.run(step, stdout=out, stderr=subprocess.STDOUT).returncode:
                raise NdifServerError(
                    f"building the NDIF server venv failed at `{' '.join(step[:6])} ...`; see {log}"
                )
    (venv / STAMP).write_text(_stamp_text())
    print(
        f"bindscope ndif: server venv built in {time.perf_counter() - started:.0f} s",
        file=sys.stderr,
    )

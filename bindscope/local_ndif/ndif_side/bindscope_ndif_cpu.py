"""Runs INSIDE the local NDIF server's venv (ndif 0.1.2): a CPU model actor and controller.

Never imported by bindscope (``PYTHONPATH`` and ``NDIF_*_IMPORT_PATH`` name it). Importing it
patches ndif for nnsight 0.8.1 and transformers 5.24 in whichever Ray worker imports it.
``deploy SPECS.json`` deploys models under the keys nnsight mints, as a client sends them.
"""

from __future__ import annotations

import gc
import hashlib
import importlib
import json
import os
import sys
from typing import Any

import ray
from ndif.cli.lib.deploy import deploy as ndif_deploy
from ndif.services.ray.deployments.controller.controller import _ControllerActor
from ndif.services.ray.deployments.modeling.base import (
    KILL_REASON_PREEMPTED,
    BaseModelDeployment,
)
from ndif.services.ray.sandbox.model import SandboxModelDeployment
from nnsight import TransformersModel
from nnsight.modeling.huggingface import _ID_CACHE, HuggingFaceModel
from nnsight.modeling.mixins.remotable import Remotable
from transformers import pipelines


def _accepting_trust_remote_code(method: Any) -> classmethod:
    """Ndif passes ``trust_remote_code=`` to two nnsight 0.8.1 methods that do not take it."""
    function = method.__func__

    def call(cls, *args, trust_remote_code=None, **kwargs):
        return function(cls, *args, **kwargs)

    call.__bindscope_patch__ = True  # type: ignore[attr-defined]
    return classmethod(call)


def _resolving_check_task(check_task: Any) -> Any:
    """Transformers 5.24 names the pipeline class as a dotted string; nnsight reads its flags."""

    def call(task, *args, **kwargs):
        name, targeted, options = check_task(task, *args, **kwargs)
        impl = targeted.get("impl")
        if isinstance(impl, str):
            module, _, attr = impl.rpartition(".")
            targeted = {**targeted, "impl": getattr(importlib.import_module(module), attr)}
        return name, targeted, options

    call.__bindscope_patch__ = True  # type: ignore[attr-defined]
    return call


def patch() -> None:
    """Apply the compatibility patches once per process (idempotent)."""
    for name in ("describe_checkpoint", "max_tp_size"):
        if not getattr(getattr(Remotable, name), "__bindscope_patch__", False):
            setattr(Remotable, name, _accepting_trust_remote_code(getattr(Remotable, name)))
    # Offline there is no Hub parameter count; None makes nnsight count the meta model.
    HuggingFaceModel._hub_parameter_count = staticmethod(lambda repo_id, revision: None)
    if not getattr(pipelines.check_task, "__bindscope_patch__", False):
        pipelines.check_task = _resolving_check_task(pipelines.check_task)


patch()


class CpuModelDeployment(BaseModelDeployment):
    """ndif's model actor with its CUDA steps (place, sync, verify, cache moves) removed."""

    def load_from_disk(self) -> HuggingFaceModel:
        """Load the weights into CPU memory, in the deployment's dtype."""
        model = HuggingFaceModel.from_model_key(
            self.model_key, dispatch=True, dtype=self.dtype_name, **self.kwargs
        )
        model._module.requires_grad_(False)  # as ndif does: inference-only weights
        return model

    async def to_cache(self) -> None:
        """Park the replica (HOT -> WARM) without moving anything."""
        await self.cancel(KILL_REASON_PREEMPTED)  # weights already live in CPU memory
        self.cached = True

    def from_cache(self, gpu_mem_bytes_by_id: dict[int, int]) -> None:
        """Unpark the replica (WARM -> HOT)."""
        self.gpu_mem_bytes_by_id = gpu_mem_bytes_by_id
        self.cached = False

    def cleanup(self) -> None:
        """Reset the request's state, as ndif's does, without the CUDA calls."""
        self.kill_switch.clear()
        self.kill_reason = None
        self.execution_ident = None
        self.model.interleaver.cancel()
        gc.collect()


# Set by ``bindscope ndif up --sandbox-key KEY``: the SHA-256 of the one key whose requests
# run untrusted (every other key's run trusted). Unset: every request runs untrusted.
SANDBOX_KEY_ENV = "BINDSCOPE_SANDBOX_KEY_SHA256"


def untrusted(api_key: str | None) -> bool:
    """Whether a request sent with ``api_key`` runs in the sandbox's runner process."""
    tagged = os.environ.get(SANDBOX_KEY_ENV)
    return not tagged or hashlib.sha256((api_key or "").encode()).hexdigest() == tagged


class CpuSandboxDeployment(SandboxModelDeployment, CpuModelDeployment):
    """ndif's sandboxed actor on the CPU model actor above; `untrusted` requests run sandboxed.

    Without auth ndif trusts every request nnsight 0.8.1 sends, so this actor marks them itself
    (docs/remote.md, "Run your own NDIF").
    """

    async def run(self, request: Any) -> None:
        """Run ``request`` (ndif's run; ``execute`` then picks the runner when untrusted)."""
        if untrusted(request.api_key):
            request.trusted = False
        await super().run(request)


class CpuController(_ControllerActor):
    """ndif's controller, in a worker that has imported this module (the patches)."""


# Not the decorator: Ray then ships the classes by reference, so each worker imports this
# module and its patches.
CpuModelActor = ray.remote(num_cpus=1, max_restarts=-1)(CpuModelDeployment)
CpuSandboxModelActor = ray.remote(num_cpus=1, max_restarts=-1)(CpuSandboxDeployment)
CpuControllerActor = ray.remote(num_cpus=1, num_gpus=0, max_restarts=-1, resources={"head": 1})(
    CpuController
)


def model_key(checkpoint: str) -> str:
    """The key a bindscope client sends for ``checkpoint`` (text-generation, no revision)."""
    _ID_CACHE[checkpoint] = checkpoint  # offline: the id is canonical as written
    return TransformersModel(checkpoint, task="text-generation").to_model_key()


def deploy(specs_path: str) -> int:
    """Deploy each spec and wait for its replica; print one JSON line per model."""
    with open(specs_path) as handle:
        specs = json.load(handle)
    for spec in specs:
        spec.setdefault("model_key", model_key(spec["checkpoint"]))
    result = ndif_deploy(specs, on_message=lambda line: print(line, file=sys.stderr, flush=True))
    failed = [d for d in result["deployments"] if d.get("status") != "READY"]
    print(json.dumps(result["deployments"], default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["deploy"]:
        sys.exit(deploy(sys.argv[2]))
    sys.exit(f"usage: {sys.argv[0]} deploy SPECS.json")

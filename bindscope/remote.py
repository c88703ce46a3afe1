"""Run bindscope on NDIF: a model without weights here, its forward passes on NDIF's GPUs.

``bindscope.load_model("org/model", remote=True)`` checks the backend (API key, host,
versions, whether the model is served), builds the model on the meta device and routes
every trace, generation and session through `NdifBackend`. ``remote="local"`` loads the
weights here and routes the same requests through `SimulatedServer`, which does what the
server does (unpickle with NDIF's module whitelist, run, return only saved values), so a
tiny model can check the remote path without a network. See ``docs/remote.md``.

What travels: the trace body's source, the tensors it references and the code of
``bindscope.interventions.ops`` (registered with ``nnsight.register``; it imports only
torch and math). What comes back: only values the body saves (BSI ``[b, L, H]``, choice
log-probs, generated ids, per-head sums), never attention matrices unless asked for.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import linecache
import os
import re
import types
import warnings
from pathlib import Path

import torch

from bindscope.errors import (
    BindscopeError,
    ModelLoadError,
    RemoteAuthError,
    RemoteError,
    RemoteJobError,
    RemoteModelNotServedError,
    RemoteSandboxError,
    RemoteTimeoutError,
    RemoteUnreachableError,
    RemoteVersionError,
    SelfCheckError,
)

# Modules whose source ships by value with every request. Each may import only the
# sandbox modules below (tests/remote/test_shipping.py walks them).
SHIPPED_MODULES = ("bindscope.interventions.ops",)
# What NDIF's sandbox lets shipped code import (ndif-team/ndif security/whitelist.yaml).
SANDBOX_MODULES = (
    "torch",
    "math",
    "collections",
    "typing",
    "numpy",
    "einops",
    "operator",
    "_operator",
    "enum",
    "time",
    "builtins",
)
_STRICT = {"builtins", "operator", "_operator"}  # the module itself, not submodules
# What the server's unpickler may also resolve: nnsight's own classes and pickle's.
DESERIALIZATION_MODULES = ("nnsight", "cloudpickle", "pickle", "copyreg")

KEY_ENV = "NDIF_API_KEY"
KEY_URL = "https://login.ndif.us"
ALLOW_DRIFT_ENV = "BINDSCOPE_ALLOW_VERSION_DRIFT"
SKIP_RUNNING_CHECK_ENV = "BINDSCOPE_NDIF_HOTSWAP"
PROBE_TEXT = "The quick brown fox jumps over the lazy dog near the river bank."


class RemoteVersionWarning(UserWarning):
    """Client and server versions differ in a way that should not change results."""


# -- shipping -----------------------------------------------------------------------------


class _ShippableModule(types.ModuleType):
    """A shipped module that pickles as an ``ops.ShippedModule`` (no spec, no loader)."""

    def __reduce__(self):
        from bindscope.interventions import ops

        members = {
            key: value
            for key, value in vars(self).items()
            if isinstance(value, (types.FunctionType, type))
            and getattr(value, "__module__", None) == self.__name__
        }
        return (ops.ShippedModule, (self.__name__, members))


def register_shipped() -> None:
    """Register ``SHIPPED_MODULES`` with ``nnsight.register`` (idempotent).

    Their functions and classes then pickle by value (source), so the server, where
    bindscope is not installed, can rebuild them.
    """
    import nnsight

    for name in SHIPPED_MODULES:
        module = importlib.import_module(name)
        nnsight.register(module)
        if type(module) is types.ModuleType:
            module.__class__ = _ShippableModule


def _allowed(module: str, roots) -> bool:
    return any(
        module == root or (root not in _STRICT and module.startswith(root + ".")) for root in roots
    )


def _auditing_unpickler(refs: list):
    """nnsight's unpickler, recording every class, function and module the payload names."""
    from nnsight.intervention.serialization import CustomCloudUnpickler

    def recording(kind, function):
        def wrapper(name, *args):
            refs.append((kind, name, ""))
            return function(name, *args)

        return wrapper

    class Auditing(CustomCloudUnpickler):
        def find_class(self, module, name):
            refs.append(("find_class", module, name))
            found = super().find_class(module, name)
            if module == "cloudpickle.cloudpickle" and name in ("subimport", "dynamic_subimport"):
                return recording(name, found)
            return found

    return Auditing


def refused(refs) -> list[str]:
    """The references in a payload that NDIF's sandbox would refuse, explained."""
    problems = set()
    for kind, module, name in refs:
        why = (
            "bindscope is not installed on the server; call it from "
            "bindscope.interventions.ops, which ships by value"
            if module.split(".")[0] == "bindscope"
            else "not in the sandbox whitelist"
        )
        if kind == "find_class" and not _allowed(module, SANDBOX_MODULES + DESERIALIZATION_MODULES):
            problems.add(f"{module}.{name} (pickled by reference; {why})")
        elif kind == "subimport" and not _allowed(module, SANDBOX_MODULES):
            problems.add(f"module {module} (imported by the server; {why})")
        elif kind == "dynamic_subimport":
            problems.add(f"module object {module} shipped by value (the sandbox refuses it)")
    return sorted(problems)


def _deserialize(blob: bytes, nnsight_model, tracer, refs: list):
    """Unpickle a request as the server would, leaving this process's linecache intact."""
    from nnsight.schema.request import RequestModel

    filename = tracer.info.frame.f_code.co_filename
    saved = linecache.cache.get(filename)
    try:
        return RequestModel.deserialize(
            blob,
            nnsight_model._remoteable_persistent_objects(),
            compress=False,
            unpickler=_auditing_unpickler(refs),
        )
    finally:
        if saved is not None:
            linecache.cache[filename] = saved
        else:
            linecache.cache.pop(filename, None)


def audit(nnsight_model, tracer) -> list[str]:
    """Serialize ``tracer`` as a request would and list what the sandbox would refuse."""
    from nnsight.ndif import pull_env
    from nnsight.schema.request import RequestModel

    pull_env()  # what nnsight registers before a real request, so both serialize alike
    refs: list = []
    _deserialize(RequestModel.serialize(tracer, compress=False), nnsight_model, tracer, refs)
    return refused(refs)


def _sandbox_error(problems, where: str) -> RemoteSandboxError:
    return RemoteSandboxError(
        f"{where}: NDIF's sandbox would refuse this request; it references "
        + "; ".join(problems)
        + ". Trace bodies may call only bindscope.interventions.ops and torch."
    )


class _Recorder(dict):
    """A server frame's locals that remember what the run pushed back."""

    pushed: dict

    def update(self, *args, **kwargs):
        new = dict(*args, **kwargs)
        self.pushed = {**getattr(self, "pushed", {}), **new}
        super().update(new)


class SimulatedServer:
    """An nnsight backend that plays NDIF in-process (``remote="local"``).

    Stricter than nnsight's own ``remote="local"``: the request is unpickled with NDIF's
    module whitelist checked (``audit="error"`` raises ``RemoteSandboxError``;
    ``"record"`` collects the problems in ``findings``), the *unpickled* body runs on
    copies of the shipped values, and only saved values come back, through
    ``torch.save`` as over the network.
    """

    def __init__(self, nnsight_model, *, audit: str = "error") -> None:
        if audit not in ("error", "record"):
            raise ValueError("audit must be 'error' or 'record'")
        self.model = nnsight_model
        self.audit = audit
        self.findings: set[str] = set()
        self.payload_bytes: list[int] = []
        self.result_bytes: list[int] = []

    def __call__(self, tracer) -> None:
        self.serve(tracer)

    def serve(self, tracer, env: dict | None = None) -> None:
        """Run one request; ``env`` is the client's per-request settings (attention
        implementation), applied to the model first as the server does."""
        from nnsight.ndif import pull_env
        from nnsight.schema.request import RequestModel
        from nnsight.tracing.tracer import mark
        from nnsight.tracing.util import push

        if env is not None:
            self.model._remoteable_set_env(env)
        pull_env()
        blob = RequestModel.serialize(tracer, compress=False)
        self.payload_bytes.append(len(blob))
        refs: list = []
        restored = _deserialize(blob, self.model, tracer, refs)
        problems = refused(refs)
        if problems and self.audit == "error":
            raise _sandbox_error(problems, "remote='local'")
        self.findings.update(problems)
        frame = restored.info.frame
        frame.f_locals = _Recorder(frame.f_locals)
        restored.execute(restored.info.code)
        buffer = io.BytesIO()
        torch.save(getattr(frame.f_locals, "pushed", {}), buffer)  # saved values only
        self.result_bytes.append(buffer.tell())
        buffer.seek(0)
        result = torch.load(buffer, map_location="cpu", weights_only=False)
        for value in result.values():
            mark(value)
        push(tracer.info.frame, result)


class NdifBackend:
    """An nnsight backend that sends a trace or session to NDIF as one request.

    The payload is audited first (a refused request fails here, not after queueing), and
    transport or server failures become ``RemoteError`` subclasses without the API key.
    """

    def __init__(self, nnsight_model, *, model_name: str) -> None:
        self.model = nnsight_model
        self.name = model_name

    def __call__(self, tracer):
        problems = audit(self.model, tracer)
        if problems:
            raise _sandbox_error(problems, self.name)
        try:
            return _send(self.model, tracer)
        except BindscopeError:
            raise
        except Exception as exc:
            error = translate(exc, model=self.name)
            if error is None:
                raise
            raise error from None  # the cause could quote the key


def _send(nnsight_model, tracer):
    """Submit one request to NDIF and wait for its saved values (tests replace this)."""
    backend = nnsight_model._remote_backend(True, True, None, False)
    return backend(tracer)


# -- talking to NDIF ------------------------------------------------------------------------


def host() -> str:
    """The NDIF host: ``NDIF_HOST``, else nnsight's ``CONFIG.API.HOST``."""
    from nnsight import CONFIG

    if os.environ.get("NDIF_HOST"):  # set after nnsight was imported: requests must agree
        CONFIG.API.HOST = os.environ["NDIF_HOST"]
    return CONFIG.API.HOST


def api_key() -> str:
    """The configured NDIF API key; raises ``RemoteAuthError`` saying where to set one."""
    from nnsight import CONFIG

    key = os.environ.get(KEY_ENV) or CONFIG.API.APIKEY
    if not key:
        raise RemoteAuthError(
            f"No NDIF API key is configured, so {host()} cannot run remote jobs. Get a key "
            f"at {KEY_URL} and set it in the environment variable {KEY_ENV} (export "
            f"{KEY_ENV}=...), or store it once with: python -c 'import nnsight; "
            "nnsight.login()'"
        )
    CONFIG.API.APIKEY = key  # an env var set after nnsight was imported
    return key


def redact(text: str) -> str:
    """``text`` with the API key (if any is configured) replaced by ``***``."""
    from nnsight import CONFIG

    for key in {os.environ.get(KEY_ENV), CONFIG.API.APIKEY}:
        if key:
            text = text.replace(key, "***")
    return text


def _get(path: str) -> dict:
    """GET ``{host}{path}`` as JSON: the preflight's only network call (tests replace it)."""
    import httpx

    response = httpx.get(f"{host()}{path}", timeout=httpx.Timeout(10.0, read=30.0))
    response.raise_for_status()
    return response.json()


def _request(path: str, *, model: str) -> dict:
    try:
        return _get(path)
    except Exception as exc:
        error = translate(exc, model=model)
        if error is None:
            raise
        raise error from None


def translate(exc: BaseException, *, model: str) -> RemoteError | None:
    """Map a transport or server exception to a ``RemoteError`` subclass (key redacted).

    Returns None for anything else (a bug here, not a remote failure), to be re-raised.
    """
    import httpx
    import websocket
    from nnsight.intervention.backends.remote import RemoteError as JobFailed

    where = host()
    chain, cause = [], exc
    while cause is not None and len(chain) < 8:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    detail = redact(f"{type(exc).__name__}: {exc}")[:500]
    timeouts = (httpx.TimeoutException, websocket.WebSocketTimeoutException, TimeoutError)
    if any(isinstance(c, timeouts) for c in chain):
        return RemoteTimeoutError(
            f"{where} did not answer in time for {model} ({detail}). NDIF may be busy or "
            "the model still loading; retry later, or use smaller --batch-size."
        )
    for c in chain:
        status = getattr(getattr(c, "response", None), "status_code", None)
        if isinstance(c, websocket.WebSocketBadStatusException):
            status = c.status_code
        if status in (401, 403):
            return _rejected_key(where, detail, model)
        if isinstance(c, httpx.HTTPStatusError):
            return RemoteUnreachableError(
                f"NDIF at {where} answered HTTP {status} for {model} ({detail}). The service "
                "may be down or redeploying: python -c 'import nnsight; print(nnsight.status())'"
            )
    network = (httpx.TransportError, websocket.WebSocketException, ConnectionError, OSError)
    if any(isinstance(c, network) for c in chain):
        return RemoteUnreachableError(
            f"Could not reach NDIF at {where} for {model} ({detail}). Check the network, "
            "the host (NDIF_HOST), and NDIF's status with: python -c 'import nnsight; "
            "print(nnsight.status())'"
        )
    text = detail.lower()
    if isinstance(exc, JobFailed):
        if re.search(r"api.?key|unauthori[sz]ed|forbidden|\b40[13]\b", text):
            return _rejected_key(where, detail, model)
        if re.search(r"whitelist|not allowed|modulenotfounderror|no module named", text):
            return RemoteSandboxError(
                f"NDIF's sandbox refused the request for {model} ({detail}). This is a "
                "bindscope bug: trace bodies must call only bindscope.interventions.ops."
            )
        if re.search(r"hotswap|not dedicated|not deployed|not running|no deployment", text):
            return RemoteModelNotServedError(
                f"NDIF does not serve {model} now ({detail}). See "
                "python -c 'import nnsight; print(nnsight.status())' for what runs."
            )
        if re.search(r"timeout|timed out|took longer", text):
            return RemoteTimeoutError(
                f"The job for {model} ran past NDIF's time limit ({detail}); use a smaller "
                "--batch-size so each request does less."
            )
        return RemoteJobError(f"The NDIF job for {model} failed on the server: {detail}")
    return None


def _rejected_key(where: str, detail: str, model: str) -> RemoteAuthError:
    return RemoteAuthError(
        f"{where} rejected the configured NDIF API key for {model} ({detail}). Check the key in "
        f"{KEY_ENV} or nnsight's config (python -c 'import nnsight; nnsight.login()'); "
        f"keys come from {KEY_URL}."
    )


def _release(version: str) -> tuple[int, int]:
    found = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(found.group(1)), int(found.group(2))) if found else (-1, -1)


def check_versions(server: dict | None, *, model: str) -> dict:
    """Compare nnsight, transformers and torch with the server's.

    A different nnsight minor release or transformers major release raises
    ``RemoteVersionError`` (trace serialization, ``.source`` labels and attention outputs
    change between them) unless ``BINDSCOPE_ALLOW_VERSION_DRIFT=1``; smaller differences
    warn. Returns the server's versions for the provenance.
    """
    import nnsight
    import transformers

    local = {
        "nnsight": nnsight.__version__,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }
    if not server:
        warnings.warn(
            f"{host()} did not report its package versions; remote results for {model} may "
            "differ from local ones if they differ",
            RemoteVersionWarning,
            stacklevel=3,
        )
        return {}
    packages = server.get("packages", {})
    remote = {name: packages.get(name) for name in local}
    serious, minor = [], []
    for name, mine in local.items():
        theirs = remote[name]
        if theirs is None or theirs == mine:
            continue
        same_minor = _release(theirs) == _release(mine)
        same_major = _release(theirs)[0] == _release(mine)[0]
        line = f"{name} {mine} here, {theirs} on the server"
        if (name == "nnsight" and not same_minor) or (name == "transformers" and not same_major):
            serious.append(line)
        else:
            minor.append(line)
    if serious and not os.environ.get(ALLOW_DRIFT_ENV):
        raise RemoteVersionError(
            f"{host()} runs different versions than this machine ({'; '.join(serious)}), "
            f"so {model} could give different results or fail to deserialize. Install the "
            f"server's versions (pip install 'nnsight=={remote['nnsight']}' ...), or set "
            f"{ALLOW_DRIFT_ENV}=1 to run anyway (recorded in the provenance)."
        )
    if serious or minor:
        warnings.warn(
            f"NDIF version drift for {model}: {'; '.join(serious + minor)}",
            RemoteVersionWarning,
            stacklevel=3,
        )
    return remote


def _canonical_id(model_id: str) -> str:
    """The Hub's canonical spelling of a repo id (what NDIF deployments are keyed by)."""
    from nnsight.modeling.huggingface import _ID_CACHE

    if model_id not in _ID_CACHE:
        from huggingface_hub import HfApi

        try:
            _ID_CACHE[model_id] = HfApi().model_info(model_id).id
        except Exception as exc:
            raise ModelLoadError(
                f"Could not look up {model_id} on the Hugging Face Hub ({type(exc).__name__}: "
                f"{str(exc)[:200]}). Remote models are built from the Hub's config and "
                "tokenizer, so this machine needs to reach huggingface.co."
            ) from None
    return _ID_CACHE[model_id]


def model_state(status: dict, repo_id: str, revision: str | None) -> str | None:
    """The best state NDIF reports for this repo and revision (``RUNNING``, ...), or None.

    The same rule as ``nnsight.is_model_running``, applied to an already fetched
    ``/status`` so that an unreachable host and an absent model stay distinguishable.
    """
    order = ["RUNNING", "DEPLOYING", "NOT_STARTED", "UNHEALTHY"]
    found = [
        value.get("application_state", "UNHEALTHY")
        for value in status.get("deployments", {}).values()
        if value.get("repo_id") == repo_id and (value.get("revision") or "main") == revision
    ]
    return min(found, key=lambda s: order.index(s) if s in order else len(order), default=None)


def check_backend(model_id: str, revision: str | None = None) -> dict:
    """Preflight for a remote run: key, host, versions, and whether the model is served.

    Returns ``{"host", "server_versions"}`` for the provenance. Each failure raises its own
    ``RemoteError`` subclass with what to do; the key itself is never shown.
    """
    api_key()
    status = _request("/status", model=model_id)
    try:
        server = _get("/env")
    except Exception:  # an older server without /env: compare nothing, warn below
        server = None
    versions = check_versions(server, model=model_id)
    if not os.environ.get(SKIP_RUNNING_CHECK_ENV):
        repo = _canonical_id(model_id)
        state = model_state(status, repo, revision or "main")
        if state != "RUNNING":
            running = sorted(
                {
                    v.get("repo_id", "?")
                    for v in status.get("deployments", {}).values()
                    if v.get("application_state") == "RUNNING"
                }
            )
            label = f"{repo}@{revision or 'main'}"
            why = (
                "is still deploying; retry in a few minutes"
                if state == "DEPLOYING"
                else f"is {state.lower()}"
                if state
                else "is not deployed"
            )
            raise RemoteModelNotServedError(
                f"NDIF at {host()} does not run {label} now: it {why}. Running now: "
                f"{', '.join(running[:12]) or 'none'}. Pick one of those, run locally "
                f"without --remote, or, if your key may hot-swap models, set "
                f"{SKIP_RUNNING_CHECK_ENV}=1 to send requests anyway."
            )
    return {"host": host(), "server_versions": versions}


# -- building models --------------------------------------------------------------------


def _build_meta(model_id: str, revision: str | None):
    """The nnsight model on the meta device (config and tokenizer from the Hub, no weights)."""
    from nnsight import TransformersModel
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    from bindscope.families import family_for_config

    try:
        config = AutoConfig.from_pretrained(model_id, revision=revision)
        tokenizer = AutoTokenizer.from_pretrained(model_id, revision=revision)
    except Exception as exc:
        label = model_id + (f"@{revision}" if revision else "")
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        raise ModelLoadError(
            f"Could not read the config and tokenizer of {label} ({reason}). Remote models "
            "are built from the Hub's config and tokenizer, so check the id and that "
            "huggingface.co is reachable."
        ) from None
    family = family_for_config(config, model_name=model_id)
    # The tokenizer is passed in: with transformers 5 nnsight 0.8.1's meta build cannot
    # tell that a text-generation pipeline needs one ("Impossible to guess which tokenizer").
    envoy = TransformersModel(
        model_id,
        revision=revision,
        task="text-generation",
        tokenizer=tokenizer,
        rename=dict(family.rename),
    )
    # The server generates with the checkpoint's own settings (its EOS ids included).
    with contextlib.suppress(Exception):
        envoy._module.generation_config = GenerationConfig.from_pretrained(
            model_id, revision=revision
        )
    return envoy, family


def load_remote(
    model_id,
    *,
    revision: str | None = None,
    prepend_bos: bool | None = None,
    self_check: bool = True,
):
    """Build a ``Model`` whose traces run on NDIF (``load_model(..., remote=True)``).

    Raises:
        RemoteError: A subclass for each preflight failure (see `check_backend`).
        ModelLoadError: The id is not a Hub id, or the Hub cannot be reached.
    """
    from bindscope.model import Model

    if model_id is None:
        raise ModelLoadError(
            "remote=True needs a Hugging Face id that NDIF serves (e.g. "
            "'meta-llama/Llama-3.1-8B'); the default SmolLM2 runs locally without --remote"
        )
    if not isinstance(model_id, str):
        raise ModelLoadError(
            f"remote=True needs a Hugging Face id string, not a loaded {type(model_id).__name__}; "
            "NDIF runs its own copy of the weights"
        )
    if Path(model_id).exists():
        raise ModelLoadError(
            f"{model_id} is a local folder; NDIF can only run models it serves by Hub id. "
            "Run local folders without --remote."
        )
    revision = None if revision == "main" else revision
    info = check_backend(model_id, revision)
    envoy, family = _build_meta(model_id, revision)
    model = Model(
        envoy._module,
        envoy.tokenizer,
        family=family,
        name=model_id,
        revision=revision,
        prepend_bos=prepend_bos,
        nnsight_model=envoy,
        remote="ndif",
    )
    register_shipped()
    model.trace_options = {"backend": NdifBackend(envoy, model_name=model_id)}
    model.remote_info = info
    if self_check:
        probe_capture(model)
    return model


def simulate(model, *, audit: str = "error"):
    """Route a loaded model's traces through `SimulatedServer` (``remote="local"``)."""
    register_shipped()
    backend = SimulatedServer(model.nnsight, audit=audit)
    model.remote = "local"
    model.trace_options = {"backend": backend}
    model.remote_info = {"host": None, "simulation": backend}
    return model


# -- the load-time probe ------------------------------------------------------------------


def _run_probe(model) -> dict:
    from bindscope.interventions import ops

    ids = model.tokenize(PROBE_TEXT)
    batch = model.encode([ids, ids])
    with torch.no_grad(), model.eager(), model.nnsight.trace(**batch.inputs, **model.trace_options):
        result = ops.probe(model)
    return result


def probe_capture(model) -> dict:
    """Check capture and ablation remotely with one small request; fall back if needed.

    Asks for eager attention; if the server returns no attention weights (or cannot switch
    to eager), ``model.capture_fallback`` records why and probabilities are recomputed from
    queries and keys from then on (the provenance says ``capture: recompute``). Then checks
    that rows sum to 1, nothing lies above the diagonal and ablating head (0, 0) changes
    the logits. Only ``[L, 3]`` statistics and one number come back.
    """
    where = f"{model.name} (family {model.family}, remote {model.remote})"
    try:
        result = _run_probe(model)
    except RemoteJobError as exc:
        if "attention implementation" not in str(exc) and "cannot switch" not in str(exc):
            raise
        model.capture_fallback = f"the server could not switch to eager attention: {exc}"
        result = _run_probe(model)
    stats = result["stats"]  # [L, 3]: present, row-sum error, upper triangle
    missing = [layer for layer in range(len(stats)) if float(stats[layer, 0]) == 0.0]
    if missing and not model.capture_fallback:
        model.capture_fallback = (
            f"no attention weights came back under eager attention (layers {missing}); "
            "probabilities are recomputed from queries and keys"
        )
        result = _run_probe(model)
        stats = result["stats"]
    if (stats[:, 0] == 0).any():
        raise SelfCheckError(f"{where}: attention probabilities could not be captured")
    row_error, upper = float(stats[:, 1].max()), float(stats[:, 2].max())
    if row_error > 1e-3:
        raise SelfCheckError(f"{where}: attention rows sum to 1 +- {row_error:.2e}, not 1")
    if upper > 0:
        raise SelfCheckError(f"{where}: {upper:.2e} attention above the diagonal")
    effect = float(result["effect"])
    if effect == 0.0:
        raise SelfCheckError(
            f"{where}: ablating head (0, 0) left the logits unchanged; wrong ablation site"
        )
    return {"row_sum_error": row_error, "upper_triangle": upper, "ablation_effect": effect}


__all__ = [
    "SHIPPED_MODULES",
    "NdifBackend",
    "SimulatedServer",
    "api_key",
    "audit",
    "check_backend",
    "check_versions",
    "load_remote",
    "probe_capture",
    "register_shipped",
    "simulate",
]

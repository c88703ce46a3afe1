"""One exception family, and ``whole_number``: every message says what, where and how to fix it."""

from __future__ import annotations

import numbers
from typing import TypeGuard


class BindscopeError(Exception):
    """Base class of every error bindscope raises on purpose."""


class UnsupportedModelError(BindscopeError):
    """The model's architecture has no row in the family table."""


class ModelLoadError(BindscopeError):
    """A model or tokenizer could not be loaded (missing package, no network, bad path)."""


class HeadSpecError(BindscopeError, ValueError):
    """A (layer, head) specification is out of range, duplicated or malformed."""


class InputError(BindscopeError, ValueError):
    """Texts or other inputs are empty or malformed."""


class InterventionError(BindscopeError, ValueError):
    """An intervention spec does not fit the model or the texts (lengths, edges, reference)."""


class DictionaryError(BindscopeError, ValueError):
    """A dictionary (SAE) file is malformed or does not fit the model (names file and field)."""


class PromptTooLongError(InputError):
    """A prompt (with what is generated or scored after it) exceeds the context window."""


class InterventionOrderError(BindscopeError, ValueError):
    """Trace primitives were called out of execution order (e.g. ablating after a later capture)."""


class ResultsLockedError(BindscopeError):
    """Another process is writing into the same results folder."""


class BindscopeWarning(UserWarning):
    """Something was repaired or left out on the way (e.g. duplicate record keys dropped)."""


class SelfCheckError(BindscopeError):
    """The load-time self-check found the wrapped model misbehaving."""


class PromptFileError(BindscopeError, ValueError):
    """A prompt file has a malformed record (the message names file, line and field)."""


class SpanNotFoundError(BindscopeError, LookupError):
    """A record's term could not be located in its text."""


class RecordFileError(BindscopeError, ValueError):
    """A result-record file is corrupt (the message names file and line)."""


class RemoteError(BindscopeError):
    """Remote execution on NDIF failed (messages name host and model, never the API key)."""


class RemoteAuthError(RemoteError):
    """No NDIF API key is configured, or NDIF rejected the one that is."""


class RemoteModelNotServedError(RemoteError):
    """NDIF is up but does not run this model (or this revision) now."""


class RemoteUnreachableError(RemoteError):
    """The NDIF host could not be reached."""


class RemoteTimeoutError(RemoteUnreachableError):
    """NDIF did not answer in time, or a job ran past the server's limit."""


class RemoteVersionError(RemoteError):
    """The server runs nnsight or transformers versions that differ from this machine's."""


class RemoteSandboxError(RemoteError):
    """A request would ship code or objects that NDIF's sandbox refuses."""


class RemoteJobError(RemoteError):
    """NDIF accepted a request and the job failed on the server."""


class NdifServerError(BindscopeError):
    """The local NDIF server (``bindscope ndif up``) could not be built, started or stopped."""


def is_whole(value: object) -> TypeGuard[numbers.Integral]:
    """Whether ``value`` is an integer (a bool is not)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def true_or_false(value: object, name: str) -> bool:
    """``value`` if it is a bool; else ``InputError`` (a flag never takes a truthy stand-in)."""
    if not isinstance(value, bool):
        raise InputError(f"{name}={value!r} is not True or False")
    return value


def whole_number(
    value: object,
    name: str,
    fix: str,
    *,
    least: int | None = None,
    below: int | None = None,
    error: type[Exception] = InputError,
) -> int:
    """``value`` as an int (never a bool) with ``least <= value < below``; else raises ``error``."""
    if is_whole(value):
        number = int(value)
        if (least is None or number >= least) and (below is None or number < below):
            return number
    span = "" if least is None else f" >= {least}"
    if below is not None:
        span = f" < {below}" if least is None else f" in {least}..{below - 1}"
    raise error(f"{name}={value!r} is not a whole number{span}; {fix}")

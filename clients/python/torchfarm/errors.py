"""Errors raised by the torchfarm Python client.

Every failure the farm reports (an error reply, see docs/protocol.md) and every failure the client
detects itself (no reply in time, an input it cannot send, a malformed reply) is raised as a
:class:`TorchfarmError` subclass carrying ``.code`` (the wire protocol's code name, e.g.
``"NOT_FOUND"``) and ``.message``.
"""

from __future__ import annotations

from typing import Dict, Type

__all__ = [
    "TorchfarmError",
    "InvalidArgument",
    "NotFound",
    "ResourceExhausted",
    "DeadlineExceeded",
    "Unavailable",
    "Internal",
    "error_from_reply",
]


class TorchfarmError(Exception):
    """Base class of every torchfarm error: ``str(e)`` is ``"CODE: message"``."""

    code: str = "UNKNOWN"

    def __init__(self, message: str, code: str | None = None) -> None:
        if code is not None:
            self.code = code
        self.message = message
        super().__init__(f"{self.code}: {message}")


class InvalidArgument(TorchfarmError, ValueError):
    """The request was malformed or its inputs do not match the model's declared inputs."""

    code = "INVALID_ARGUMENT"


class NotFound(TorchfarmError, LookupError):
    """The model is not served by this farm (the message lists the served models)."""

    code = "NOT_FOUND"


class ResourceExhausted(TorchfarmError):
    """The model's queue is full, or the tensors do not fit a ring slot."""

    code = "RESOURCE_EXHAUSTED"


class DeadlineExceeded(TorchfarmError, TimeoutError):
    """The request's deadline ran out in the farm's queue, or no reply came in time."""

    code = "DEADLINE_EXCEEDED"


class Unavailable(TorchfarmError):
    """The model has no live worker, or the farm is shutting down."""

    code = "UNAVAILABLE"


class Internal(TorchfarmError):
    """The model's forward() failed, a worker crashed repeatedly, or a reply was malformed."""

    code = "INTERNAL"


_BY_CODE: Dict[str, Type[TorchfarmError]] = {
    cls.code: cls
    for cls in (InvalidArgument, NotFound, ResourceExhausted, DeadlineExceeded, Unavailable,
                Internal)
}


def error_from_reply(code: str, message: str) -> TorchfarmError:
    """Builds the exception for an error reply's ``code`` and ``message``.

    A code this client does not know yields a plain :class:`TorchfarmError` carrying that code.
    """
    cls = _BY_CODE.get(code)
    if cls is None:
        return TorchfarmError(message, code=code)
    return cls(message)

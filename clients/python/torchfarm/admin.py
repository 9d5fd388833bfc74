"""The farm's admin socket: ``{"cmd": "health"}`` and ``{"cmd": "stats"}``, one JSON reply each.

A fresh REQ socket per command keeps a timed-out command from wedging the next one (a REQ socket
that missed its reply cannot send again).
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional

import zmq

from .errors import DeadlineExceeded, InvalidArgument

# The supervisor's admin endpoint when its config sets neither admin_endpoint nor run_dir.
DEFAULT_ADMIN_ENDPOINT = "ipc:///tmp/torchfarm/admin.sock"


def admin_command(endpoint: str, cmd: str, timeout: float = 5.0,
                  context: Optional[zmq.Context] = None) -> Dict[str, Any]:
    """Sends ``{"cmd": cmd}`` to the admin socket at `endpoint` and returns the JSON reply.

    Raises DeadlineExceeded when no reply arrives within `timeout` seconds, InvalidArgument when
    the farm answers with an error (an unknown command).
    """
    context = context or zmq.Context.instance()
    timeout_ms = max(1, int(timeout * 1000))
    with context.socket(zmq.REQ) as socket:
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.SNDTIMEO, timeout_ms)
        socket.connect(endpoint)
        try:
            socket.send(json.dumps({"cmd": cmd}).encode())
        except zmq.Again:
            raise DeadlineExceeded(
                f"admin {endpoint}: could not send within {timeout:g} s") from None
        if not socket.poll(timeout_ms, zmq.POLLIN):
            raise DeadlineExceeded(f"no reply from {endpoint} within {timeout:g} s")
        reply = json.loads(socket.recv())
    if isinstance(reply, dict) and "error" in reply:
        raise InvalidArgument(str(reply["error"]))
    return reply

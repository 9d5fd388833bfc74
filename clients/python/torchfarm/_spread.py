"""Spreading one Client's requests over several supervisors (docs/scale-out.md).

Owns one DEALER socket per endpoint, the :class:`EndpointPool` deciding where each request goes,
and the ids of probes in flight. Used by :class:`torchfarm.Client` when it is given more than one
endpoint; runs on the caller's thread, only inside a call (nothing happens between calls).

- Each request goes to the live endpoint with the fewest outstanding requests.
- An endpoint owing a reply that stays silent for ``eject_after`` seconds is ejected: its socket is
  closed (nothing queued for it goes out later) and reopened, and its requests are sent again to
  the others (at-least-once; inference is idempotent). Replies are matched by id, so a request
  gets exactly one result and late duplicates are dropped.
- Ejected endpoints are probed (protocol.md, "Liveness probe") with a doubling backoff; any
  answer puts them back into rotation.
- RESOURCE_EXHAUSTED / UNAVAILABLE send the request to another live endpoint that has not refused
  it; the refusal is raised once every live endpoint refused.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Set

import zmq

from ._pool import ALL_REFUSED, PROBE_MODEL, EndpointPool
from ._wire import PROTOCOL_VERSION, decode_reply, reply_id
from .errors import DeadlineExceeded, InvalidArgument, TorchfarmError

REFUSAL_CODES = ("RESOURCE_EXHAUSTED", "UNAVAILABLE")


def probe_frames(probe_id: int) -> List[bytes]:
    return [json.dumps({"v": PROTOCOL_VERSION, "id": probe_id, "model": PROBE_MODEL,
                        "inputs": []}).encode()]


def is_refusal(header: Optional[dict]) -> bool:
    return bool(header) and header.get("status") == "error" and header.get("code") in REFUSAL_CODES


def no_reply_message(tried: List[str], budget: float, per_endpoint: float) -> str:
    if not tried:
        return f"no endpoint answered probes within {budget:g} s"
    if len(tried) == 1:
        return f"no reply from {tried[0]} within {per_endpoint:g} s"
    return f"no reply from {', '.join(tried)} within {per_endpoint:g} s each"


@dataclass
class _Pending:
    index: int                       # position in the call's results
    frames: List[Any]
    endpoint: int = -1               # where it is outstanding; -1: waiting to be sent
    refused: Set[int] = field(default_factory=set)
    tried: List[str] = field(default_factory=list)
    refusal: Optional[TorchfarmError] = None


class Spreader:
    def __init__(self, endpoints: List[str], context: zmq.Context, eject_after: float,
                 configure: Optional[Callable[[Any], None]] = None) -> None:
        self.endpoints = endpoints
        self._context = context
        self._configure = configure  # socket options before connect (CURVE keys)
        self.pool = EndpointPool(len(endpoints), eject_after=eject_after)
        self._sockets: List[Optional[zmq.Socket]] = [None] * len(endpoints)
        self._probes: Dict[int, int] = {}
        self.last_answered = 0  # index of the endpoint that answered last
        self._answered = 0      # requests of the running call with their final answer
        for i in range(len(endpoints)):
            self._open(i)

    def _open(self, i: int) -> None:
        old = self._sockets[i]
        if old is not None:
            old.close(linger=0)
        self._sockets[i] = open_dealer(self._context, self.endpoints[i], self._configure)

    def _ensure_open(self) -> None:
        for i, socket in enumerate(self._sockets):
            if socket is None:
                self._open(i)

    def close(self) -> None:
        for socket in self._sockets:
            if socket is not None:
                socket.close(linger=0)
        self._sockets = [None] * len(self.endpoints)

    def _send(self, i: int, frames: List[Any]) -> bool:
        try:
            self._sockets[i].send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
            return True
        except zmq.Again:
            return False  # its queue is full: a peer that takes nothing is as good as dead

    # -- one call ------------------------------------------------------------------------------

    def run(self, frames: List[List[Any]], first_id: int, next_id, timeout: float,
            max_in_flight: int, return_exceptions: bool) -> List[Any]:
        """Runs the requests `frames` (ids first_id, first_id+1, …) to completion.

        `timeout` is how long an endpoint may stay silent before it is ejected; a request gives
        up with DeadlineExceeded after `timeout` × the number of endpoints. `next_id()` hands out
        ids for probes.
        """
        self._ensure_open()
        self.pool.eject_after = timeout
        self.pool.heartbeat = timeout / 4
        budget = timeout * len(self.endpoints)
        results: List[Any] = [None] * len(frames)
        pending: Dict[int, _Pending] = {}  # sent or waiting to be, no final answer yet
        unsent = 0
        self._answered = 0
        deadline = time.monotonic() + budget
        try:
            while self._answered < len(frames):
                while unsent < len(frames) and len(pending) < max_in_flight:
                    pending[first_id + unsent] = _Pending(unsent, frames[unsent])
                    unsent += 1
                now = time.monotonic()
                for request_id, p in list(pending.items()):
                    if p.endpoint < 0:
                        self._dispatch(request_id, p, pending, results, now, return_exceptions)
                if self._answered >= len(frames):
                    break
                if now >= deadline:
                    tried = sorted({t for p in pending.values() for t in p.tried},
                                   key=self.endpoints.index)
                    raise DeadlineExceeded(no_reply_message(tried, budget, timeout))
                before = self._answered
                self._pump(pending, results, deadline, next_id, return_exceptions)
                if self._answered > before:
                    deadline = time.monotonic() + budget  # progress: the wait starts again
        finally:
            for p in pending.values():
                if p.endpoint >= 0:
                    self.pool.on_done(p.endpoint)
        return results

    def _dispatch(self, request_id: int, p: _Pending, pending: Dict[int, _Pending],
                  results: List[Any], now: float, return_exceptions: bool) -> None:
        for _ in range(len(self.endpoints)):
            i = self.pool.pick(p.refused, now)
            if i == ALL_REFUSED and p.refusal is not None:
                self._finish(request_id, p, p.refusal, pending, results, return_exceptions)
                return
            if i < 0:
                return  # none live: wait for a probe to bring one back
            if self._send(i, p.frames):
                p.endpoint = i
                self.pool.on_sent(i, now)
                if self.endpoints[i] not in p.tried:
                    p.tried.append(self.endpoints[i])
                return
            if self.pool.eject(i, now):
                self._ejected(i, pending)

    def _finish(self, request_id: int, p: _Pending, outcome: Any, pending: Dict[int, _Pending],
                results: List[Any], return_exceptions: bool) -> None:
        del pending[request_id]
        if isinstance(outcome, TorchfarmError) and not return_exceptions:
            raise outcome
        results[p.index] = outcome
        self._answered += 1

    def _ejected(self, i: int, pending: Dict[int, _Pending]) -> None:
        for p in pending.values():
            if p.endpoint == i:
                p.endpoint = -1
        self._probes = {k: v for k, v in self._probes.items() if v != i}
        self._open(i)

    def _pump(self, pending: Dict[int, _Pending], results: List[Any], deadline: float,
              next_id, return_exceptions: bool) -> None:
        wake = deadline
        pool_due = self.pool.next_deadline()
        if pool_due is not None:
            wake = min(wake, pool_due)
        poller = zmq.Poller()
        for socket in self._sockets:
            poller.register(socket, zmq.POLLIN)
        ready = dict(poller.poll(max(0, int((wake - time.monotonic()) * 1000) + 1)))
        for i, socket in enumerate(self._sockets):
            if socket not in ready:
                continue
            for _ in range(256):
                try:
                    message = socket.recv_multipart(flags=zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    break
                self._handle(i, message, pending, results, return_exceptions)
        now = time.monotonic()
        ejected, probes = self.pool.tick(now)
        for i in ejected:
            self._ejected(i, pending)
        for i in probes:
            probe_id = next_id()
            if self._send(i, probe_frames(probe_id)):
                self._probes[probe_id] = i
            self.pool.on_probe_sent(i, now)

    def _handle(self, i: int, message: List[Any], pending: Dict[int, _Pending],
                results: List[Any], return_exceptions: bool) -> None:
        now = time.monotonic()
        if self.pool.on_message(i, now):
            self._probes = {k: v for k, v in self._probes.items() if v != i}
        request_id, header = reply_id(message[0])
        if not isinstance(request_id, int) or self._probes.pop(request_id, None) is not None:
            return
        p = pending.get(request_id)
        if p is None:
            return  # stale or duplicate: that request already has its answer
        if p.endpoint >= 0:
            self.pool.on_done(p.endpoint)
        p.endpoint = -1
        self.last_answered = i
        if is_refusal(header):
            self.pool.on_refused(i, now)
            p.refused.add(i)
            try:
                decode_reply(header, [])
            except TorchfarmError as e:
                p.refusal = e
            self._dispatch(request_id, p, pending, results, now, return_exceptions)
            return
        try:
            outcome: Any = decode_reply(header, message[1:])
        except TorchfarmError as e:
            outcome = e
        self._finish(request_id, p, outcome, pending, results, return_exceptions)


def open_dealer(context: Any, endpoint: str,
                configure: Optional[Callable[[Any], None]] = None) -> Any:
    """A connected DEALER for one endpoint (sync or asyncio context): linger 0, reconnects capped
    at 1 s, `configure` (CURVE keys) applied before connect."""
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
    if configure is not None:
        configure(socket)
    try:
        socket.connect(endpoint)
    except zmq.ZMQError as e:
        socket.close()
        raise InvalidArgument(f"cannot connect to {endpoint!r}: {e}") from None
    return socket

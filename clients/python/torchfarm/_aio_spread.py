"""Spreading an AsyncClient's requests over several supervisors: the asyncio twin of
:mod:`torchfarm._spread` (same pool, same rules; docs/scale-out.md).

Owns one zmq.asyncio DEALER socket per endpoint with a reader task each, a ticker task that runs
while requests wait (ejections, probes), and the requests waiting for a result. Every coroutine
of one event loop may share it; it is not thread-safe.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import zmq
import zmq.asyncio

from ._pool import ALL_REFUSED, EndpointPool
from ._spread import is_refusal, no_reply_message, open_dealer, probe_frames
from ._wire import decode_reply, reply_id
from .errors import DeadlineExceeded, TorchfarmError

_Reply = Tuple[dict, List[Any]]


@dataclass
class _Waiting:
    frames: List[Any]
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    endpoint: int = -1  # where it is outstanding; -1: to be sent (again)
    refused: Set[int] = field(default_factory=set)
    tried: List[str] = field(default_factory=list)
    refusal: Optional[TorchfarmError] = None
    reply: Optional[_Reply] = None


class AsyncSpreader:
    def __init__(self, endpoints: List[str], context: zmq.asyncio.Context,
                 eject_after: float,
                 configure: Optional[Callable[[Any], None]] = None) -> None:
        self.endpoints = endpoints
        self._context = context
        self._configure = configure  # socket options before connect (CURVE keys)
        self.pool = EndpointPool(len(endpoints), eject_after=eject_after)
        self._sockets: Dict[int, zmq.asyncio.Socket] = {}
        self._readers: Dict[int, asyncio.Task] = {}
        self._ticker: Optional[asyncio.Task] = None
        self._waiting: Dict[int, _Waiting] = {}
        self._probes: Dict[int, int] = {}
        self.last_answered = 0

    def _loop_time(self) -> float:
        return asyncio.get_running_loop().time()

    def _socket(self, i: int) -> zmq.asyncio.Socket:
        socket = self._sockets.get(i)
        if socket is None:
            socket = open_dealer(self._context, self.endpoints[i], self._configure)
            self._sockets[i] = socket
            self._readers[i] = asyncio.get_running_loop().create_task(self._read(i, socket))
        return socket

    def _reopen(self, i: int) -> None:
        """Drops whatever is queued for endpoint `i`'s connection; a new socket replaces it."""
        reader = self._readers.pop(i, None)
        if reader is not None:
            reader.cancel()
        socket = self._sockets.pop(i, None)
        if socket is not None:
            socket.close(linger=0)
        self._socket(i)

    def _send(self, i: int, frames: List[Any]) -> bool:
        try:
            self._socket(i).send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
            return True
        except zmq.Again:
            return False

    async def request(self, request_id: int, frames: List[Any], timeout: float,
                      next_id: Callable[[], int]) -> _Reply:
        """Sends one request and returns its reply (header, data frames); raises the refusal
        when every live endpoint refused it, DeadlineExceeded after `timeout` × endpoints."""
        self.pool.eject_after = timeout
        self.pool.heartbeat = timeout / 4
        budget = timeout * len(self.endpoints)
        waiting = _Waiting(frames)
        self._waiting[request_id] = waiting
        self._next_id = next_id
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.get_running_loop().create_task(self._tick())
        deadline = self._loop_time() + budget
        try:
            while waiting.reply is None:
                if waiting.endpoint < 0:
                    self._dispatch(waiting)
                remaining = deadline - self._loop_time()
                if remaining <= 0:
                    raise DeadlineExceeded(no_reply_message(waiting.tried, budget, timeout))
                waiting.wake.clear()
                try:
                    await asyncio.wait_for(waiting.wake.wait(), remaining)
                except asyncio.TimeoutError:
                    pass
            return waiting.reply
        finally:
            del self._waiting[request_id]
            if waiting.endpoint >= 0:
                self.pool.on_done(waiting.endpoint)

    def _dispatch(self, waiting: _Waiting) -> None:
        now = self._loop_time()
        for _ in range(len(self.endpoints)):
            i = self.pool.pick(waiting.refused, now)
            if i == ALL_REFUSED and waiting.refusal is not None:
                raise waiting.refusal
            if i < 0:
                return  # none live: a probe answer wakes us
            if self._send(i, waiting.frames):
                waiting.endpoint = i
                self.pool.on_sent(i, now)
                if self.endpoints[i] not in waiting.tried:
                    waiting.tried.append(self.endpoints[i])
                return
            if self.pool.eject(i, now):
                self._ejected(i)

    def _ejected(self, i: int) -> None:
        for waiting in self._waiting.values():
            if waiting.endpoint == i:
                waiting.endpoint = -1
                waiting.wake.set()
        self._probes = {k: v for k, v in self._probes.items() if v != i}
        self._reopen(i)

    async def _read(self, i: int, socket: zmq.asyncio.Socket) -> None:
        try:
            while True:
                frames = await socket.recv_multipart(copy=False)
                self._handle(i, frames)
        except zmq.ZMQError:
            return  # closed: ejected or the client closed

    def _handle(self, i: int, frames: List[Any]) -> None:
        now = self._loop_time()
        if self.pool.on_message(i, now):
            self._probes = {k: v for k, v in self._probes.items() if v != i}
            for waiting in self._waiting.values():
                if waiting.endpoint < 0:
                    waiting.wake.set()  # a live endpoint again: send what waited
        request_id, header = reply_id(frames[0])
        if not isinstance(request_id, int) or self._probes.pop(request_id, None) is not None:
            return
        waiting = self._waiting.get(request_id)
        if waiting is None or waiting.reply is not None:
            return  # stale or duplicate
        if waiting.endpoint >= 0:
            self.pool.on_done(waiting.endpoint)
        waiting.endpoint = -1
        self.last_answered = i
        if is_refusal(header):
            self.pool.on_refused(i, now)
            waiting.refused.add(i)
            try:
                decode_reply(header, [])
            except TorchfarmError as e:
                waiting.refusal = e
        else:
            waiting.reply = (header, frames[1:])
        waiting.wake.set()

    async def _tick(self) -> None:
        """Ejections and probes, while any request waits."""
        while self._waiting:
            now = self._loop_time()
            ejected, probes = self.pool.tick(now)
            for i in ejected:
                self._ejected(i)
            for i in probes:
                probe_id = self._next_id()
                if self._send(i, probe_frames(probe_id)):
                    self._probes[probe_id] = i
                self.pool.on_probe_sent(i, now)
            due = self.pool.next_deadline()
            delay = 0.05 if due is None else min(0.05, max(0.001, due - self._loop_time()))
            await asyncio.sleep(delay)

    def tasks(self) -> List[asyncio.Task]:
        return list(self._readers.values()) + ([self._ticker] if self._ticker else [])

    def close(self) -> None:
        for task in self.tasks():
            task.cancel()
        for socket in self._sockets.values():
            socket.close(linger=0)
        self._readers.clear()
        self._sockets.clear()
        self._ticker = None

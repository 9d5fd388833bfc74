"""The asyncio Python client: :class:`AsyncClient` (``await client.infer(...)``).

Owns one zmq.asyncio DEALER socket per endpoint it has used, a reader task per socket that hands
each reply to the future waiting for its id, and the request-id counter. Many coroutines of one
event loop may share an AsyncClient; it is not thread-safe.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Dict, Iterable, List, Optional, Tuple, Union

import numpy as np
import zmq
import zmq.asyncio

from ._aio_spread import AsyncSpreader
from ._wire import (check_status, decode_reply, decode_shm_create, encode_request,
                    encode_shm_create, encode_shm_release, reply_id)
from .admin import DEFAULT_ADMIN_ENDPOINT
from .client import (DEFAULT_MAX_IN_FLIGHT, DEFAULT_TIMEOUT_S, Batch, Endpoints, _as_inputs,
                     _deadline_ms, _deadline_unix_us, _endpoint_list, _no_reply_message,
                     _one_endpoint_only)
from .errors import DeadlineExceeded, Internal, InvalidArgument, TorchfarmError
from .security import ClientKeys, apply_curve, curve_keys
from .shm import AsyncShmRegion, ShmOutput, ShmRegion, as_output_shm, map_region, uses_shm

_Reply = Tuple[dict, List[Any]]


async def async_admin_command(endpoint: str, cmd: str, timeout: float = 5.0,
                              context: Optional[zmq.asyncio.Context] = None) -> Dict[str, Any]:
    """The asyncio form of :func:`torchfarm.admin.admin_command`."""
    context = context or zmq.asyncio.Context.instance()
    timeout_ms = max(1, int(timeout * 1000))
    with context.socket(zmq.REQ) as socket:
        socket.setsockopt(zmq.LINGER, 0)
        socket.connect(endpoint)
        await socket.send(json.dumps({"cmd": cmd}).encode())
        if not await socket.poll(timeout_ms, zmq.POLLIN):
            raise DeadlineExceeded(f"no reply from {endpoint} within {timeout:g} s")
        reply = json.loads(await socket.recv())
    if isinstance(reply, dict) and "error" in reply:
        raise InvalidArgument(str(reply["error"]))
    return reply


class AsyncClient:
    """The asyncio counterpart of :class:`torchfarm.Client`, with the same arguments, inputs,
    outputs, errors and failover rule.

    Failover: a request that gets no reply within `timeout` is sent again to the next endpoint
    (the first request to time out on the current endpoint moves every later request on to the
    next one). Sockets of earlier endpoints stay open, so a late reply from them still counts.

    Shared memory as for Client: ``await create_shm(nbytes)`` gives an
    :class:`~torchfarm.AsyncShmRegion` (``await region.release()``, ``async with region:``).

    Use as ``async with AsyncClient(ep) as client:`` or call :meth:`close` when done.
    """

    def __init__(self, endpoint: Endpoints, timeout: float = DEFAULT_TIMEOUT_S, *,
                 admin_endpoint: Optional[str] = None,
                 context: Optional[zmq.asyncio.Context] = None,
                 server_key: Optional[str] = None,
                 client_keys: Optional[ClientKeys] = None) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self._curve = curve_keys(server_key, client_keys)
        self._endpoints = _endpoint_list(endpoint)
        self.timeout = float(timeout)
        self.admin_endpoint = admin_endpoint or DEFAULT_ADMIN_ENDPOINT
        self._context = context or zmq.asyncio.Context.instance()
        self._current = 0
        self._next_id = 1
        self._sockets: Dict[int, zmq.asyncio.Socket] = {}
        self._readers: Dict[int, asyncio.Task] = {}
        self._waiting: Dict[int, asyncio.Future] = {}
        # Several endpoints: requests are spread over them (see _aio_spread.py, scale-out.md).
        self._spreader: Optional[AsyncSpreader] = None
        if len(self._endpoints) > 1:
            self._spreader = AsyncSpreader(self._endpoints, self._context, self.timeout,
                                           configure=lambda s: apply_curve(s, self._curve))

    @property
    def endpoint(self) -> str:
        """The endpoint new requests go to (several endpoints: the one that answered last)."""
        if self._spreader is not None:
            return self._endpoints[self._spreader.last_answered]
        return self._endpoints[self._current]

    def _take_id(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    def _socket(self, index: int) -> zmq.asyncio.Socket:
        socket = self._sockets.get(index)
        if socket is None:
            socket = self._context.socket(zmq.DEALER)
            socket.setsockopt(zmq.LINGER, 0)
            apply_curve(socket, self._curve)
            try:
                socket.connect(self._endpoints[index])
            except zmq.ZMQError as e:
                socket.close()
                raise InvalidArgument(
                    f"cannot connect to {self._endpoints[index]!r}: {e}") from None
            self._sockets[index] = socket
            self._readers[index] = asyncio.get_running_loop().create_task(self._read(socket))
        return socket

    async def _read(self, socket: zmq.asyncio.Socket) -> None:
        """Resolves the future of every reply's id; drops replies nobody waits for any more."""
        try:
            while True:
                frames = await socket.recv_multipart(copy=False)
                request_id, header = reply_id(frames[0])
                future = self._waiting.get(request_id) if isinstance(request_id, int) else None
                if future is not None and not future.done():
                    future.set_result((header, frames[1:]))
        except zmq.ZMQError as e:
            if socket.closed or isinstance(e, zmq.ContextTerminated):
                return
            for future in self._waiting.values():
                if not future.done():
                    future.set_exception(Internal(f"receiving replies failed: {e}"))

    async def infer(self, model: str, *inputs: Any, timeout: Optional[float] = None,
                    priority: int = 0, deadline: Optional[float] = None,
                    output_shm: Union[ShmOutput, ShmRegion, None] = None,
                    deadline_at: Optional[float] = None) -> List[np.ndarray]:
        """Runs `model` on `inputs`; arguments, result and errors as :meth:`Client.infer`."""
        timeout = self.timeout if timeout is None else float(timeout)
        output = as_output_shm(output_shm)
        if uses_shm(inputs, output):
            _one_endpoint_only(self._endpoints, "a shared-memory tensor")
        request_id = self._take_id()
        frames = encode_request(request_id, model, inputs, _deadline_ms(deadline), priority,
                                output, _deadline_unix_us(deadline_at))
        if self._spreader is not None:
            header, data = await self._spreader.request(request_id, frames, timeout, self._take_id)
        else:
            header, data = await self._exchange(request_id, frames, timeout)
        return decode_reply(header, data, output)

    async def _exchange(self, request_id: int, frames: List[Any],
                        timeout: Optional[float]) -> _Reply:
        """Sends one request on the current endpoint's socket, failing over on silence, and
        returns its reply's header and data frames."""
        timeout = self.timeout if timeout is None else float(timeout)
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        tried: List[str] = []
        try:
            while True:
                index = self._current
                await self._socket(index).send_multipart(frames, copy=False)
                try:
                    # shield: a timeout must not cancel the future the resend waits on.
                    header, data = await asyncio.wait_for(asyncio.shield(future), timeout)
                    break
                except asyncio.TimeoutError:
                    tried.append(self._endpoints[index])
                    if len(tried) >= len(self._endpoints):
                        raise DeadlineExceeded(_no_reply_message(tried, timeout)) from None
                    if self._current == index:
                        self._current = (index + 1) % len(self._endpoints)
        finally:
            del self._waiting[request_id]
        return header, data

    async def infer_many(self, model: str, batches: Iterable[Batch], *,
                         timeout: Optional[float] = None, priority: int = 0,
                         deadline: Optional[float] = None,
                         max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
                         return_exceptions: bool = False,
                         deadline_at: Optional[float] = None) -> List[Any]:
        """Concurrent requests, at most `max_in_flight` at once, results in input order; as
        :meth:`Client.infer_many`."""
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        slots = asyncio.Semaphore(max_in_flight)

        async def one(batch: Batch) -> List[np.ndarray]:
            async with slots:
                return await self.infer(model, *_as_inputs(batch), timeout=timeout,
                                        priority=priority, deadline=deadline,
                                        deadline_at=deadline_at)

        tasks = [one(b) for b in batches]
        if not return_exceptions:
            return list(await asyncio.gather(*tasks))
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException) and not isinstance(r, TorchfarmError):
                raise r
        return list(results)

    async def create_shm(self, nbytes: int, *,
                         timeout: Optional[float] = None) -> AsyncShmRegion:
        """As :meth:`Client.create_shm`; the region's ``release()`` is a coroutine."""
        _one_endpoint_only(self._endpoints, "create_shm")
        request_id = self._take_id()
        header, _ = await self._exchange(request_id, encode_shm_create(request_id, nbytes),
                                         timeout)
        token, name, size = decode_shm_create(header)
        try:
            mapping = map_region(name, size)
        except TorchfarmError:
            await self._release_token(token, timeout)  # unusable here: do not leave it to idle out
            raise
        return AsyncShmRegion(token, name, size, mapping, self.release_shm)

    async def release_shm(self, region: Union[ShmRegion, str], *,
                          timeout: Optional[float] = None) -> None:
        """As :meth:`Client.release_shm`."""
        if isinstance(region, ShmRegion):
            if region.released:
                return
            region.unmap()
            region = region.region
        await self._release_token(region, timeout)

    async def _release_token(self, token: str, timeout: Optional[float]) -> None:
        _one_endpoint_only(self._endpoints, "release_shm")
        request_id = self._take_id()
        header, _ = await self._exchange(request_id, encode_shm_release(request_id, token),
                                         timeout)
        check_status(header)

    async def stats(self, timeout: float = 5.0) -> Dict[str, Any]:
        """As :meth:`Client.stats`."""
        return await async_admin_command(self.admin_endpoint, "stats", timeout, self._context)

    async def health(self, timeout: float = 5.0) -> Dict[str, Any]:
        """As :meth:`Client.health`."""
        return await async_admin_command(self.admin_endpoint, "health", timeout, self._context)

    def close(self) -> None:
        """Stops the reader tasks and closes the sockets; waiting requests are abandoned."""
        for task in self._readers.values():
            task.cancel()
        for socket in self._sockets.values():
            socket.close(linger=0)
        self._readers.clear()
        self._sockets.clear()
        if self._spreader is not None:
            self._spreader.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        readers = list(self._readers.values())
        if self._spreader is not None:
            readers += self._spreader.tasks()
        self.close()
        await asyncio.gather(*readers, return_exceptions=True)

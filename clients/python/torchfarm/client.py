"""The blocking Python client: :class:`Client`.

Owns one ZeroMQ DEALER socket connected to one of the farm's job endpoints, the request-id
counter and nothing else; the ZeroMQ context is shared (``zmq.Context.instance()`` unless one is
given). Not thread-safe: use one Client per thread (they may share the context).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Union

import numpy as np
import zmq

from ._spread import Spreader
from ._wire import (check_status, decode_reply, decode_shm_create, encode_request,
                    encode_shm_create, encode_shm_release, reply_id)
from .admin import DEFAULT_ADMIN_ENDPOINT, admin_command
from .security import ClientKeys, apply_curve, curve_keys
from .errors import DeadlineExceeded, InvalidArgument, TorchfarmError, Unavailable
from .shm import ShmOutput, ShmRegion, as_output_shm, map_region, uses_shm

Endpoints = Union[str, Sequence[str]]
# One request's inputs for infer_many: a tuple holds one array-like per model input; anything
# else is the single input.
Batch = Any

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_MAX_IN_FLIGHT = 128


def _endpoint_list(endpoint: Endpoints) -> List[str]:
    endpoints = [endpoint] if isinstance(endpoint, str) else list(endpoint)
    if not endpoints or not all(isinstance(e, str) and e for e in endpoints):
        raise ValueError(
            f"endpoint must be a non-empty string or list of strings, got {endpoint!r}")
    return endpoints


def _as_inputs(batch: Batch) -> tuple:
    return batch if isinstance(batch, tuple) else (batch,)


def _deadline_ms(deadline: Optional[float]) -> int:
    return 0 if deadline is None else max(1, int(round(deadline * 1000)))


def _deadline_unix_us(deadline_at: Optional[float]) -> int:
    """`deadline_at` (seconds since the Unix epoch, as time.time()) as the header's
    deadline_unix_us; a time before the epoch is refused here, not sent."""
    if deadline_at is None:
        return 0
    if not deadline_at > 0:
        raise ValueError(f"deadline_at must be a time.time() value > 0, got {deadline_at!r}")
    return max(1, int(round(deadline_at * 1_000_000)))


def _one_endpoint_only(endpoints: List[str], what: str) -> None:
    """Shared-memory regions belong to one supervisor: refuses them on a spreading client."""
    if len(endpoints) > 1:
        raise InvalidArgument(
            f"{what} needs a client with one endpoint: a shared-memory region belongs to one "
            f"supervisor, and this client spreads requests over {len(endpoints)} "
            f"({', '.join(endpoints)})")


def _no_reply_message(tried: List[str], timeout: float) -> str:
    if len(tried) == 1:
        return f"no reply from {tried[0]} within {timeout:g} s"
    return f"no reply from {', '.join(tried)} within {timeout:g} s each"


class Client:
    """Sends inference requests to a torchfarm supervisor and waits for the replies.

    Args:
        endpoint: the farm's job endpoint (``"tcp://127.0.0.1:5555"``, ``"ipc:///run/x.sock"``),
            or a list of them for failover: requests go to the current endpoint (the first one
            at the start); when it gives no reply within `timeout`, the client closes its socket,
            connects to the next endpoint in the list (wrapping around) and sends the requests
            still unanswered again. A call gives up with DeadlineExceeded once every endpoint has
            been tried without a reply. The endpoint that answered stays current for later
            calls. Resending assumes idempotent models, as the farm itself does.
        timeout: seconds to wait for a reply (per endpoint tried), unless a call overrides it.
        admin_endpoint: the farm's admin socket for :meth:`stats` and :meth:`health`
            (default ``ipc:///tmp/torchfarm/admin.sock``, the supervisor's default).
        context: a ZeroMQ context to use instead of ``zmq.Context.instance()``.
        server_key, client_keys: CURVE, for a farm that requires it (see
            :mod:`torchfarm.security`): the server's public key (Z85 or key file path) and this
            client's ``(public, secret)`` pair or ``.key_secret`` file path.

    Inputs may be numpy arrays, torch tensors (when torch is imported; CPU contiguous tensors
    are sent without a copy) or anything ``numpy.asarray`` accepts. Supported dtypes: float32,
    float64, float16, int64, int32, int16, int8, uint8, bool. bfloat16 is unsupported in the
    Python client (numpy has no bfloat16 dtype); use the C++ client for it. Arrays are sent
    zero-copy: do not modify an input while a call that sends it is running.

    Outputs are read-only numpy arrays viewing the received message (no copy); ``.copy()`` one
    to modify it.

    On the supervisor's host, tensors may travel through shared memory instead of the socket:
    :meth:`create_shm` makes a region, a :class:`~torchfarm.ShmTensor` in it is an input, and
    ``output_shm`` sends the outputs there (protocol.md, "Shared-memory tensors"; one endpoint
    only).
    """

    def __init__(self, endpoint: Endpoints, timeout: float = DEFAULT_TIMEOUT_S, *,
                 admin_endpoint: Optional[str] = None,
                 context: Optional[zmq.Context] = None,
                 server_key: Optional[str] = None,
                 client_keys: Optional[ClientKeys] = None) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self._curve = curve_keys(server_key, client_keys)
        self._endpoints = _endpoint_list(endpoint)
        self.timeout = float(timeout)
        self.admin_endpoint = admin_endpoint or DEFAULT_ADMIN_ENDPOINT
        self._context = context or zmq.Context.instance()
        self._current = 0
        self._next_id = 1
        self._socket: Optional[zmq.Socket] = None
        # Several endpoints: requests are spread over them (see _spread.py and scale-out.md).
        self._spreader: Optional[Spreader] = None
        if len(self._endpoints) > 1:
            self._spreader = Spreader(self._endpoints, self._context, self.timeout,
                                      configure=lambda s: apply_curve(s, self._curve))
        else:
            self._connect()

    # -- connection ---------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """The endpoint requests currently go to."""
        return self._endpoints[self._current]

    @property
    def endpoints(self) -> List[str]:
        return list(self._endpoints)

    def _connect(self) -> None:
        socket = self._context.socket(zmq.DEALER)
        socket.setsockopt(zmq.LINGER, 0)
        apply_curve(socket, self._curve)
        # A send blocks only while the outbound queue is full; bound that wait too.
        socket.setsockopt(zmq.SNDTIMEO, max(1, int(self.timeout * 1000)))
        try:
            socket.connect(self.endpoint)
        except zmq.ZMQError as e:
            socket.close()
            raise InvalidArgument(f"cannot connect to {self.endpoint!r}: {e}") from None
        self._socket = socket

    def _fail_over(self) -> None:
        self.close()
        self._current = (self._current + 1) % len(self._endpoints)
        self._connect()

    def close(self) -> None:
        """Closes the socket; requests still unanswered are dropped. A later call reconnects."""
        if self._socket is not None:
            self._socket.close(linger=0)
            self._socket = None
        if self._spreader is not None:
            self._spreader.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client(endpoint={self.endpoint!r}, timeout={self.timeout:g})"

    # -- inference ----------------------------------------------------------------------------

    def infer(self, model: str, *inputs: Any, timeout: Optional[float] = None, priority: int = 0,
              deadline: Optional[float] = None,
              output_shm: Union[ShmOutput, ShmRegion, None] = None,
              deadline_at: Optional[float] = None) -> List[np.ndarray]:
        """Runs `model` on `inputs` (one array-like or :class:`~torchfarm.ShmTensor` per model
        input, in the model's order; or one mapping ``{name: input}`` in any order; a list of
        byte strings, such as JPEG files' contents, is a "bytes" input for a model whose
        pipeline decodes it: ``client.infer("resnet18", [jpeg_bytes, ...])``) and returns
        its outputs: a list of arrays (:class:`~torchfarm.Outputs`) that also knows their names
        (``outputs.names``, ``outputs["logits"]``).

        Args:
            timeout: seconds to wait for the reply (default: the client's `timeout`).
            priority: 0 is the highest; clamped by the farm to the model's priority levels.
            deadline: seconds the request may wait in the farm's queue before the farm answers
                DEADLINE_EXCEEDED instead of running it (sent as ``timeout_ms``; default none).
            deadline_at: the same as an absolute time, ``time.time()`` seconds: counted from
                when the client decided it, so time before the farm read the request counts
                too (sent as ``deadline_unix_us``; the farm's and this host's clocks must
                agree). One already past on arrival is answered DEADLINE_EXCEEDED at once.
            output_shm: a :class:`~torchfarm.ShmOutput` range, or a region (all of it), that
                the farm writes the outputs into; they are then returned as read-only views
                into the region, overwritten by the next request that writes that range.

        Raises:
            TorchfarmError subclasses: the farm's error reply, or DeadlineExceeded when no
            reply came within `timeout` from any endpoint.
        """
        return self._run(model, [inputs], timeout, priority, deadline, 1, False,
                         as_output_shm(output_shm), deadline_at=deadline_at)[0]

    def infer_many(self, model: str, batches: Iterable[Batch], *, timeout: Optional[float] = None,
                   priority: int = 0, deadline: Optional[float] = None,
                   max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
                   return_exceptions: bool = False,
                   deadline_at: Optional[float] = None) -> List[Any]:
        """Pipelines one request per item of `batches` and returns their outputs in input order.

        An item is a tuple of array-likes (one per model input) or a single array-like. Up to
        `max_in_flight` requests are outstanding at once on the one socket; replies, which the
        farm sends in completion order, are matched by id. `timeout` bounds each wait for the
        next reply. With `return_exceptions`, a failed request's slot holds its TorchfarmError
        instead of raising it (as ``asyncio.gather`` does). Inputs may be ShmTensors; outputs
        come back in frames (one output range shared by concurrent requests would mix them).
        """
        requests = [_as_inputs(b) for b in batches]
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        return self._run(model, requests, timeout, priority, deadline, max_in_flight,
                         return_exceptions, deadline_at=deadline_at)

    def _run(self, model: str, requests: List[tuple], timeout: Optional[float], priority: int,
             deadline: Optional[float], max_in_flight: int, return_exceptions: bool,
             output_shm: Optional[ShmOutput] = None, *,
             deadline_at: Optional[float] = None) -> List[Any]:
        if any(uses_shm(inputs, output_shm) for inputs in requests):
            _one_endpoint_only(self._endpoints, "a shared-memory tensor")
        timeout = self.timeout if timeout is None else float(timeout)
        deadline_ms = _deadline_ms(deadline)
        deadline_us = _deadline_unix_us(deadline_at)
        first_id = self._take_ids(len(requests))
        # Encoding everything first reports a bad input before anything is sent.
        frames = [encode_request(first_id + i, model, inputs, deadline_ms, priority, output_shm,
                                 deadline_us)
                  for i, inputs in enumerate(requests)]
        if self._spreader is not None:
            return self._run_spread(frames, first_id, timeout, max_in_flight, return_exceptions)
        return self._exchange(frames, first_id, timeout, max_in_flight, return_exceptions,
                              lambda header, data: decode_reply(header, data, output_shm))

    def _take_ids(self, count: int) -> int:
        """Reserves `count` consecutive request ids; returns the first."""
        first_id = self._next_id
        self._next_id += count
        return first_id

    def _exchange(self, frames: List[List[Any]], first_id: int, timeout: Optional[float],
                  max_in_flight: int, return_exceptions: bool,
                  decode: Callable[[dict, List[Any]], Any]) -> List[Any]:
        """Sends requests `first_id`, `first_id + 1`, ... (their `frames`) on the current
        endpoint's socket, at most `max_in_flight` unanswered, failing over on silence; returns
        ``decode(header, data frames)`` of each reply in request order."""
        timeout = self.timeout if timeout is None else float(timeout)
        if self._socket is None:
            self._connect()
        results: List[Any] = [None] * len(frames)
        pending: Dict[int, int] = {}  # request id -> index, sent and not answered
        next_to_send = 0
        answered = 0
        tried: List[str] = []  # endpoints that went silent since the last reply
        wait_until = time.monotonic() + timeout
        while answered < len(frames):
            while next_to_send < len(frames) and len(pending) < max_in_flight:
                self._send(frames[next_to_send])
                pending[first_id + next_to_send] = next_to_send
                next_to_send += 1
            remaining_ms = int((wait_until - time.monotonic()) * 1000)
            if remaining_ms <= 0 or not self._socket.poll(remaining_ms, zmq.POLLIN):
                if time.monotonic() < wait_until:
                    continue
                tried.append(self.endpoint)
                if len(tried) >= len(self._endpoints):
                    raise DeadlineExceeded(_no_reply_message(tried, timeout))
                self._fail_over()
                for index in pending.values():
                    self._send(frames[index])
                wait_until = time.monotonic() + timeout
                continue
            reply = self._socket.recv_multipart(copy=False)
            request_id, header = reply_id(reply[0])
            index = pending.pop(request_id, None) if isinstance(request_id, int) else None
            if index is None:
                continue  # a reply to a request an earlier call gave up on
            answered += 1
            tried.clear()
            wait_until = time.monotonic() + timeout
            try:
                results[index] = decode(header, reply[1:])
            except TorchfarmError as e:
                if not return_exceptions:
                    raise
                results[index] = e
        return results

    def _run_spread(self, frames: List[List[Any]], first_id: int, timeout: float,
                    max_in_flight: int, return_exceptions: bool) -> List[Any]:
        def next_id() -> int:
            self._next_id += 1
            return self._next_id - 1

        try:
            return self._spreader.run(frames, first_id, next_id, timeout, max_in_flight,
                                      return_exceptions)
        finally:
            self._current = self._spreader.last_answered

    def _send(self, frames: List[Any]) -> None:
        try:
            self._socket.send_multipart(frames, copy=False)
        except zmq.Again:
            raise DeadlineExceeded(f"could not send to {self.endpoint} within {self.timeout:g} s "
                                   "(its send queue is full)") from None

    # -- shared memory ------------------------------------------------------------------------

    def create_shm(self, nbytes: int, *, timeout: Optional[float] = None) -> ShmRegion:
        """Asks the farm for a zero-filled shared-memory region of `nbytes` bytes and maps it.

        The client must be on the supervisor's host, as its user or in its ``ipc_group``, and
        have one endpoint. Release the region with ``region.release()`` (or ``with``).

        Raises:
            InvalidArgument: several endpoints, a bad `nbytes`, or the region cannot be mapped
                here (the region is then released again); the farm's errors as for infer
                (RESOURCE_EXHAUSTED past ``client_shm`` limits).
        """
        _one_endpoint_only(self._endpoints, "create_shm")
        request_id = self._take_ids(1)
        (created,) = self._exchange([encode_shm_create(request_id, nbytes)], request_id, timeout,
                                    1, False, lambda header, data: decode_shm_create(header))
        token, name, size = created
        try:
            mapping = map_region(name, size)
        except TorchfarmError:
            self._release_token(token, timeout)  # unusable here: do not leave it to idle out
            raise
        return ShmRegion(token, name, size, mapping, self.release_shm)

    def release_shm(self, region: Union[ShmRegion, str], *,
                    timeout: Optional[float] = None) -> None:
        """Releases a region (or a region token): the farm unlinks it, this process unmaps it.
        Releasing a ShmRegion twice does nothing the second time. Raises the farm's error,
        e.g. NotFound for a region it already freed."""
        if isinstance(region, ShmRegion):
            if region.released:
                return
            region.unmap()
            region = region.region
        self._release_token(region, timeout)

    def _release_token(self, token: str, timeout: Optional[float]) -> None:
        _one_endpoint_only(self._endpoints, "release_shm")
        request_id = self._take_ids(1)
        self._exchange([encode_shm_release(request_id, token)], request_id, timeout, 1, False,
                       lambda header, data: check_status(header))

    # -- admin --------------------------------------------------------------------------------

    def stats(self, timeout: float = 5.0) -> Dict[str, Any]:
        """The farm's counters: ``{"supervisor": {pid, uptime_s, version, config}, "models":
        [{name, state, queue_depth, requests, errors, rejected, batches, mean_batch_size}],
        "workers": [{id, model, pid, device, state, generation, restarts, last_exit, requests,
        batches, mean_batch_size, inflight}]}``."""
        return admin_command(self.admin_endpoint, "stats", timeout, self._context)

    def health(self, timeout: float = 5.0) -> Dict[str, Any]:
        """``{"live": true, "ready": bool, "draining": bool, "models": [{name, ready_workers,
        workers, ready}]}``; ready means every model has a ready worker and the farm is not
        draining."""
        return admin_command(self.admin_endpoint, "health", timeout, self._context)

    def wait_ready(self, timeout: float = 60.0, poll_interval: float = 0.1) -> Dict[str, Any]:
        """Polls :meth:`health` until the farm is ready; returns the last health reply.

        Raises Unavailable when it is not ready within `timeout` seconds.
        """
        give_up = time.monotonic() + timeout
        last: Any = None
        while True:
            try:
                last = self.health(timeout=min(1.0, timeout))
                if last.get("ready"):
                    return last
            except DeadlineExceeded as e:
                last = e
            if time.monotonic() >= give_up:
                raise Unavailable(f"farm at {self.admin_endpoint} not ready within {timeout:g} s "
                                  f"(last health: {last})")
            time.sleep(poll_interval)

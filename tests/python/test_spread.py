"""Multi-endpoint clients against scripted in-test ROUTER servers (no farm): spreading,
ejection with re-sending, probing back in, refusals; and the EndpointPool on simulated time."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import numpy as np
import pytest
import zmq

import torchfarm
from torchfarm._pool import ALL_REFUSED, NONE_LIVE, EndpointPool


class ScriptedServer:
    """A ROUTER on 127.0.0.1 answering on a thread: mode "echo", "silent" or "refuse"; probes
    (model "") get INVALID_ARGUMENT except in "silent"."""

    def __init__(self, mode: str = "echo") -> None:
        self.mode = mode
        self.requests = 0
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.bind("tcp://127.0.0.1:*")
        self.endpoint = self._socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop:
            if not self._socket.poll(10):
                continue
            identity, header_frame, *data = self._socket.recv_multipart()
            header = json.loads(header_frame)
            probe = header["model"] == ""
            self.requests += not probe
            if self.mode == "silent":
                continue
            if probe or self.mode == "refuse":
                code = "INVALID_ARGUMENT" if probe else "RESOURCE_EXHAUSTED"
                reply = {"v": 1, "id": header["id"], "status": "error", "code": code,
                         "message": "scripted"}
                self._socket.send_multipart([identity, json.dumps(reply).encode()])
                continue
            reply = {"v": 1, "id": header["id"], "status": "ok", "outputs": header["inputs"],
                     "timing_us": {"queue": 1, "compute": 1, "total": 2}, "worker": 0}
            self._socket.send_multipart([identity, json.dumps(reply).encode(), *data])

    def close(self) -> None:
        self._stop = True
        self._thread.join()
        self._socket.close(linger=0)
        self._context.term()


@pytest.fixture
def servers():
    made = []

    def make(mode: str = "echo") -> ScriptedServer:
        made.append(ScriptedServer(mode))
        return made[-1]

    yield make
    for server in made:
        server.close()


def _batches(n: int):
    return [np.full((1, 2), i, dtype=np.int32) for i in range(n)]


def test_requests_are_spread_over_every_endpoint(servers):
    a, b = servers(), servers()
    with torchfarm.Client([a.endpoint, b.endpoint], timeout=2) as client:
        results = client.infer_many("echo", _batches(40), max_in_flight=8)
    assert [int(r[0][0, 0]) for r in results] == list(range(40))
    # Least-outstanding picking: a server thread the loaded host descheduled gets fewer (7 of
    # 40 seen under ctest -j2 with the chaos test); both must still get a share.
    assert a.requests >= 4 and b.requests >= 4


def test_silent_endpoint_is_ejected_resent_and_probed_back(servers):
    silent, live = servers("silent"), servers()
    with torchfarm.Client([silent.endpoint, live.endpoint], timeout=0.3) as client:
        start = time.monotonic()
        results = client.infer_many("echo", _batches(20), max_in_flight=20)
        assert time.monotonic() - start < 2.0
        assert [int(r[0][0, 0]) for r in results] == list(range(20))
        assert silent.requests >= 1
        pool = client._spreader.pool
        assert not pool.live(0) and pool.live(1)
        silent.mode = "echo"
        give_up = time.monotonic() + 5
        while not pool.live(0) and time.monotonic() < give_up:
            client.infer("echo", np.zeros((1, 2), np.int32))
            time.sleep(0.02)
        assert pool.live(0), "a probe answer puts it back into rotation"
        before = silent.requests
        client.infer_many("echo", _batches(10), max_in_flight=10)
        assert silent.requests > before


def test_refused_request_goes_elsewhere_and_refusal_raised_when_all_refuse(servers):
    full, ok = servers("refuse"), servers()
    with torchfarm.Client([full.endpoint, ok.endpoint], timeout=2) as client:
        for i in range(5):
            (y,) = client.infer("echo", np.full((1, 2), i, np.int32))
            assert int(y[0, 0]) == i
    assert full.requests == 1
    a, b = servers("refuse"), servers("refuse")
    with torchfarm.Client([a.endpoint, b.endpoint], timeout=2) as client:
        with pytest.raises(torchfarm.ResourceExhausted):
            client.infer("echo", np.zeros((1, 2), np.int32))
    assert a.requests + b.requests == 2


def test_async_client_spreads_and_survives_a_silent_endpoint(servers):
    silent, a, b = servers("silent"), servers(), servers()

    async def run():
        async with torchfarm.AsyncClient([silent.endpoint, a.endpoint, b.endpoint],
                                         timeout=0.3) as client:
            xs = _batches(30)
            ys = await client.infer_many("echo", xs, max_in_flight=30)
            assert [int(y[0][0, 0]) for y in ys] == list(range(30))
            with pytest.raises(torchfarm.ResourceExhausted):
                a.mode = b.mode = "refuse"
                await client.infer("echo", xs[0])

    asyncio.run(asyncio.wait_for(run(), 10))
    assert a.requests >= 5 and b.requests >= 5


# -- EndpointPool on simulated time ---------------------------------------------------------------

def test_pool_picks_least_loaded_round_robin_on_ties():
    pool = EndpointPool(3, eject_after=0.3, heartbeat=0.1)
    assert [pool.pick((), 0) for _ in range(4)] == [0, 1, 2, 0]
    pool.on_sent(0, 0)
    pool.on_sent(1, 0)
    assert pool.pick((), 0) == 2
    assert pool.pick({2}, 0) in (0, 1)


def test_pool_ejects_busy_silent_endpoint_and_probes_with_backoff():
    # Integer milliseconds keep the arithmetic exact; the pool takes any unit.
    pool = EndpointPool(2, eject_after=300, heartbeat=100, probe_backoff=50,
                        max_probe_backoff=150)
    pool.on_sent(0, 0)
    assert pool.tick(50) == ([], [])
    assert pool.tick(100) == ([], [0])
    pool.on_probe_sent(0, 100)
    assert pool.tick(300) == ([0], [])
    assert not pool.live(0) and pool.pick((), 300) == 1
    probes = []
    for t in range(300, 1000):
        if pool.tick(t)[1]:
            pool.on_probe_sent(0, t)
            probes.append(t - 300)
    assert probes == [50, 100, 200, 350, 500, 650]
    assert pool.on_message(0, 1000) and pool.live(0)


def test_pool_refusals_and_no_live_endpoint():
    pool = EndpointPool(2, eject_after=1, refusal_cooldown=0.2)
    pool.on_refused(0, 0)
    assert pool.pick((), 0.1) == 1 and pool.pick((), 0.1) == 1
    assert pool.pick({0, 1}, 0.1) == ALL_REFUSED
    pool.eject(0, 0.1)
    pool.eject(1, 0.1)
    assert pool.pick((), 0.1) == NONE_LIVE

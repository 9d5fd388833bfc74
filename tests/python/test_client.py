"""The Python client against a real farm (conftest.py starts it once per session)."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

import torchfarm
from conftest import IDENTITY_DTYPES, random_array

RNG = np.random.default_rng(8)


@pytest.fixture
def client(farm):
    with torchfarm.Client(farm.endpoint, timeout=10, admin_endpoint=farm.admin_endpoint) as c:
        yield c


def _random(dtype: str, shape=(3, 5)) -> np.ndarray:
    return random_array(RNG, dtype, shape)


def _slow_input(endpoint: str, seconds: float) -> np.ndarray:
    """An input that keeps the slow model busy about `seconds` on this machine.

    The slow model runs x[0, 0] matmuls of 128x128; one of them costs 0.025 ms on a fast core and
    0.3 ms on a slow one, so a fixed count is either too short to outlast a client's timeout or
    minutes long. Two calibration runs of 2,000 (the faster counts) decide the count here.
    """
    probe = np.zeros((1, 4), np.float32)
    probe[0, 0] = 2000
    best = float("inf")
    with torchfarm.Client(endpoint, timeout=30) as c:
        for _ in range(2):
            start = time.monotonic()
            c.infer("slow", probe)
            best = min(best, time.monotonic() - start)
    x = np.zeros((1, 4), np.float32)
    x[0, 0] = min(2_000_000, max(20_000, int(seconds * 2000 / max(best, 1e-4))))
    return x


@pytest.mark.parametrize("dtype", IDENTITY_DTYPES)
def test_identity_returns_the_exact_input(client, dtype):
    x = _random(dtype)
    (y,) = client.infer(f"identity_{dtype}", x)
    assert y.dtype == x.dtype and y.shape == x.shape
    assert y.tobytes() == x.tobytes()


def test_identity_accepts_torch_tensors(client):
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.int64).reshape(3, 4)
    (y,) = client.infer("identity_int64", t.t())  # non-contiguous: made contiguous first
    assert np.array_equal(y, t.t().numpy())


def test_named_inputs_in_any_order_and_named_outputs(client):
    x = np.arange(6, dtype=np.float32).reshape(2, 3) / 3
    y = np.arange(6, dtype=np.float32).reshape(2, 3) / 7
    positional = client.infer("add2", x, y)
    named = client.infer("add2", {"y": y, "x": x})
    assert positional.names == named.names == ["sum"]
    assert named["sum"].tobytes() == positional[0].tobytes() == (x + 2 * y).tobytes()
    with pytest.raises(torchfarm.InvalidArgument, match=r"no input is named \"z\""):
        client.infer("add2", {"x": x, "z": y})
    # A model whose config names nothing answers OUTPUT__k.
    ones = np.ones((2, 5), np.float32)
    assert client.infer("pair", ones, ones).names == ["OUTPUT__0", "OUTPUT__1"]


def test_pair_returns_sum_and_product(client):
    a, b = _random("float32"), _random("float32")
    s, p = client.infer("pair", a, b)
    np.testing.assert_allclose(s, a + b, rtol=1e-6)
    np.testing.assert_allclose(p, a * b, rtol=1e-6)


def test_mlp_matches_torch(client, farm):
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    module = torch.jit.load(str(farm.model_dir / "mlp.pt"))
    x = RNG.standard_normal((6, 256)).astype(np.float32)
    (y,) = client.infer("mlp", x)
    with torch.no_grad():
        expected = module(torch.from_numpy(x)).numpy()
    assert y.shape == (6, 128) and y.dtype == np.float32
    assert np.allclose(y, expected, rtol=1e-4, atol=1e-5)


def test_unknown_model_raises_not_found(client):
    with pytest.raises(torchfarm.NotFound) as info:
        client.infer("no_such_model", np.zeros((1, 256), np.float32))
    assert info.value.code == "NOT_FOUND" and "mlp" in info.value.message


def test_wrong_shape_raises_invalid_argument(client):
    with pytest.raises(torchfarm.InvalidArgument) as info:
        client.infer("mlp", np.zeros((1, 255), np.float32))
    assert info.value.code == "INVALID_ARGUMENT" and "expected" in info.value.message


def test_client_timeout_raises_deadline_exceeded(farm):
    # About 1.5 s of work, well past the client's 0.5 s; the session's farm runs it to the end, so
    # later tests of the slow model wait for it.
    x = _slow_input(farm.endpoint, 1.5)
    with torchfarm.Client(farm.endpoint, timeout=0.5) as client:
        start = time.monotonic()
        with pytest.raises(torchfarm.DeadlineExceeded) as info:
            client.infer("slow", x, deadline=0.2)
        elapsed = time.monotonic() - start
    assert 0.45 < elapsed < 2.0
    assert info.value.message == f"no reply from {farm.endpoint} within 0.5 s"


def test_a_client_deadline_past_on_arrival_is_refused_at_once_and_the_next_request_runs(client):
    # deadline_at is sent as deadline_unix_us: one already past is the farm's DEADLINE_EXCEEDED,
    # answered at once and naming by how much, never run; the same client's next request with a
    # deadline ahead is served.
    x = np.ones((1, 256), np.float32)
    start = time.monotonic()
    with pytest.raises(torchfarm.DeadlineExceeded) as info:
        client.infer("mlp", x, deadline_at=time.time() - 0.25)
    assert time.monotonic() - start < 2.0
    assert info.value.code == "DEADLINE_EXCEEDED"
    assert "ms after its deadline_unix_us" in info.value.message
    late_ms = float(info.value.message.split("arrived ")[1].split(" ms")[0])
    assert 250 <= late_ms < 2250
    (y,) = client.infer("mlp", x, deadline_at=time.time() + 30)
    assert y.shape[0] == 1
    many = client.infer_many("mlp", [x, x], deadline_at=time.time() + 30)
    assert len(many) == 2
    with pytest.raises(ValueError, match="deadline_at"):
        client.infer("mlp", x, deadline_at=-1.0)


def test_async_client_sends_its_deadline_at(farm):
    async def run():
        async with torchfarm.AsyncClient(farm.endpoint, timeout=10) as client:
            x = np.ones((1, 256), np.float32)
            with pytest.raises(torchfarm.DeadlineExceeded, match="deadline_unix_us"):
                await client.infer("mlp", x, deadline_at=time.time() - 1)
            return await client.infer("mlp", x, deadline_at=time.time() + 30)

    (y,) = asyncio.run(run())
    assert y.shape[0] == 1


def test_failover_to_the_next_endpoint(farm):
    silent = f"ipc://{farm.dir}/nobody-listens.sock"
    with torchfarm.Client([silent, farm.endpoint], timeout=0.3) as client:
        x = _random("float32")
        (y,) = client.infer("identity_float32", x)
        assert np.array_equal(y, x)
        assert client.endpoint == farm.endpoint
        (y,) = client.infer("identity_float32", x)  # stays on the endpoint that answered
        assert np.array_equal(y, x)


def test_no_endpoint_answers(farm):
    silent = [f"ipc://{farm.dir}/silent-{i}.sock" for i in range(2)]
    with torchfarm.Client(silent, timeout=0.2) as client:
        with pytest.raises(torchfarm.DeadlineExceeded, match="silent-0.sock, .*silent-1.sock"):
            client.infer("mlp", np.zeros((1, 256), np.float32))


def test_infer_many_pipelines_200_requests_in_order(client):
    batches = [np.full((1, 3), i, dtype=np.int32) for i in range(200)]
    results = client.infer_many("identity_int32", batches, max_in_flight=64)
    assert [int(r[0][0, 0]) for r in results] == list(range(200))


def test_infer_many_matches_mlp_rows_and_multi_input_tuples(client):
    x = RNG.standard_normal((40, 256)).astype(np.float32)
    (whole,) = client.infer("mlp", x)
    rows = client.infer_many("mlp", [x[i:i + 1] for i in range(40)])
    np.testing.assert_allclose(np.concatenate([r[0] for r in rows]), whole, rtol=1e-5, atol=1e-6)
    pairs = client.infer_many("pair", [(np.full((1, 5), i, np.float32),) * 2 for i in range(10)])
    assert [float(p[1][0, 0]) for p in pairs] == [float(i * i) for i in range(10)]


def test_infer_many_return_exceptions(client):
    good, bad = np.zeros((1, 256), np.float32), np.zeros((1, 7), np.float32)
    results = client.infer_many("mlp", [good, bad, good], return_exceptions=True)
    assert isinstance(results[1], torchfarm.InvalidArgument)
    assert results[0][0].shape == results[2][0].shape == (1, 128)
    with pytest.raises(torchfarm.InvalidArgument):
        client.infer_many("mlp", [good, bad, good])
    (y,) = client.infer("mlp", good)  # a stale reply of the failed call is not mistaken for this
    assert y.shape == (1, 128)


def test_async_client_gathers_50_requests(farm):
    async def run():
        async with torchfarm.AsyncClient(farm.endpoint, timeout=10) as client:
            inputs = [np.full((2, 4), i, dtype=np.float64) for i in range(50)]
            results = await asyncio.gather(
                *(client.infer("identity_float64", x) for x in inputs))
            many = await client.infer_many("identity_float64", inputs, max_in_flight=8)
            with pytest.raises(torchfarm.NotFound):
                await client.infer("nothing", inputs[0])
            return inputs, results, many

    inputs, results, many = asyncio.run(run())
    for x, (y,), (z,) in zip(inputs, results, many):
        assert np.array_equal(x, y) and np.array_equal(x, z)


def test_async_client_timeout_and_admin(farm):
    async def run():
        client = torchfarm.AsyncClient(farm.endpoint, timeout=0.3,
                                       admin_endpoint=farm.admin_endpoint)
        try:
            # About 1.2 s of work, well past the 0.3 s the client waits.
            x = _slow_input(farm.endpoint, 1.2)
            with pytest.raises(torchfarm.DeadlineExceeded, match="no reply from"):
                await client.infer("slow", x, deadline=0.1)
            return await client.health()
        finally:
            client.close()

    assert asyncio.run(run())["live"] is True


def test_stats_and_health_return_the_documented_keys(client):
    health = client.health()
    assert health["ready"] is True and health["live"] is True
    assert {m["name"] for m in health["models"]} >= {"mlp", "pair", "slow"}
    for m in health["models"]:
        assert {"name", "ready_workers", "workers", "ready"} <= m.keys()
    client.infer("mlp", np.zeros((2, 256), np.float32))
    stats = client.stats()
    assert {"supervisor", "models", "workers"} <= stats.keys()
    assert {"pid", "uptime_s", "version", "config"} <= stats["supervisor"].keys()
    for m in stats["models"]:
        assert {"name", "state", "queue_depth", "requests", "errors", "rejected", "batches",
                "mean_batch_size"} <= m.keys()
    for w in stats["workers"]:
        assert {"id", "model", "pid", "state", "restarts", "requests", "batches",
                "inflight"} <= w.keys()
    mlp = next(m for m in stats["models"] if m["name"] == "mlp")
    assert mlp["requests"] >= 1


def test_unknown_admin_command_raises_invalid_argument(farm):
    with pytest.raises(torchfarm.InvalidArgument, match="expected"):
        torchfarm.admin_command(farm.admin_endpoint, "reboot")


def test_priority_is_accepted(client):
    (y,) = client.infer("identity_uint8", np.arange(5, dtype=np.uint8)[None], priority=3)
    assert y.tolist() == [[0, 1, 2, 3, 4]]


def test_async_client_fails_over(farm):
    async def run():
        silent = f"ipc://{farm.dir}/async-silent.sock"
        async with torchfarm.AsyncClient([silent, farm.endpoint], timeout=0.3) as client:
            x = np.arange(6, dtype=np.int64).reshape(2, 3)
            (y,) = await client.infer("identity_int64", x)
            assert np.array_equal(x, y) and client.endpoint == farm.endpoint

    asyncio.run(run())

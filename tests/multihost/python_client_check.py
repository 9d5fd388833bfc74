#!/usr/bin/python3
"""Run by multihost_test inside the client namespace: the Python Client and AsyncClient given
both hosts' endpoints must answer every request with its own data.

Usage: python_client_check.py COUNT ENDPOINT... (PYTHONPATH must hold clients/python).
Exit 0 when every request came back right; the error otherwise.
"""

import asyncio
import sys

import numpy as np

import torchfarm


def main() -> int:
    count = int(sys.argv[1])
    endpoints = sys.argv[2:]
    inputs = [np.full((1, 4), i, dtype=np.float32) for i in range(count)]
    with torchfarm.Client(endpoints, timeout=1.0) as client:
        outputs = client.infer_many("identity", inputs, max_in_flight=16)
    assert [int(y[0][0, 0]) for y in outputs] == list(range(count)), "Client: wrong results"

    async def run_async():
        async with torchfarm.AsyncClient(endpoints, timeout=1.0) as client:
            return await client.infer_many("identity", inputs, max_in_flight=16)

    outputs = asyncio.run(run_async())
    assert [int(y[0][0, 0]) for y in outputs] == list(range(count)), "AsyncClient: wrong results"
    return 0


if __name__ == "__main__":
    sys.exit(main())

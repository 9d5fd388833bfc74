#!/usr/bin/python3
"""Classifies random "images" with the convnet model through a torchfarm farm, concurrently, and
prints throughput. Three ways, one after another:

  threads   N threads, each with its own blocking torchfarm.Client (a Client is not thread-safe)
  pipeline  one Client, requests pipelined on one socket with infer_many
  asyncio   one AsyncClient, asyncio.gather over all images

With `make run` serving configs/demo.json in another terminal:

    PYTHONPATH=clients/python /usr/bin/python3 examples/python/classify_images.py --images 400
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python"))
import torchfarm  # noqa: E402  (after the path above, for running from a checkout)


def report(label: str, images: int, seconds: float, labels: np.ndarray) -> None:
    counts = np.bincount(labels, minlength=10)
    print(f"{label:9s} {images} images in {seconds:.2f} s = {images / seconds:8.1f} images/s; "
          f"class histogram {counts.tolist()}")


def with_threads(args, images: np.ndarray) -> None:
    labels = np.zeros(len(images), dtype=np.int64)
    errors = []

    def work(indices: range) -> None:
        try:
            with torchfarm.Client(args.endpoint, timeout=args.timeout) as client:
                for i in indices:
                    (logits,) = client.infer("convnet", images[i:i + args.batch])
                    labels[i:i + args.batch] = logits.argmax(axis=1)
        except torchfarm.TorchfarmError as e:
            errors.append(e)

    starts = range(0, len(images), args.batch)
    threads = [threading.Thread(target=work, args=(starts[k::args.threads],))
               for k in range(args.threads)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    report(f"threads={args.threads}", len(images), time.perf_counter() - start, labels)


def with_pipeline(args, images: np.ndarray) -> None:
    batches = [images[i:i + args.batch] for i in range(0, len(images), args.batch)]
    with torchfarm.Client(args.endpoint, timeout=args.timeout) as client:
        start = time.perf_counter()
        results = client.infer_many("convnet", batches, max_in_flight=32)
        seconds = time.perf_counter() - start
    labels = np.concatenate([logits.argmax(axis=1) for (logits,) in results])
    report("pipeline", len(images), seconds, labels)


def with_asyncio(args, images: np.ndarray) -> None:
    async def run() -> np.ndarray:
        async with torchfarm.AsyncClient(args.endpoint, timeout=args.timeout) as client:
            replies = await asyncio.gather(*(client.infer("convnet", images[i:i + args.batch])
                                             for i in range(0, len(images), args.batch)))
        return np.concatenate([logits.argmax(axis=1) for (logits,) in replies])

    start = time.perf_counter()
    labels = asyncio.run(run())
    report("asyncio", len(images), time.perf_counter() - start, labels)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint", default="tcp://127.0.0.1:5555")
    parser.add_argument("--admin-endpoint", default=torchfarm.DEFAULT_ADMIN_ENDPOINT)
    parser.add_argument("--images", type=int, default=400)
    parser.add_argument("--batch", type=int, default=1, help="images per request")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args()

    images = np.random.default_rng(0).random((args.images, 3, 32, 32), dtype=np.float32)
    try:
        health = torchfarm.admin_command(args.admin_endpoint, "health", timeout=2)
        print(f"farm ready={health['ready']} models={[m['name'] for m in health['models']]}")
    except torchfarm.TorchfarmError as e:
        print(f"(no health from {args.admin_endpoint}: {e})")
    try:
        with_threads(args, images)
        with_pipeline(args, images)
        with_asyncio(args, images)
    except torchfarm.TorchfarmError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

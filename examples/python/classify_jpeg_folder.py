#!/usr/bin/python3
"""Classifies every JPEG in a folder with resnet18 behind the worker's image pipeline: the files'
bytes go to the farm as they are (about 1/10 of a float tensor), the worker decodes, resizes,
normalises, runs the model and answers the top 5 (README, "Image pipelines").

With `make run-images` serving configs/images.json in another terminal:

    /usr/bin/python3 examples/python/classify_jpeg_folder.py ~/Pictures [--batch 8]

The models have random weights (`make models-real` downloads nothing): the classes are
meaningless, the speed is real. Prints one line per image and the throughput.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python"))
import torchfarm  # noqa: E402  (after the path above, for running from a checkout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--endpoint", default="tcp://127.0.0.1:5555")
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--batch", type=int, default=8, help="images per request")
    args = parser.parse_args()
    files = sorted(p for p in args.folder.iterdir()
                   if p.suffix.lower() in (".jpg", ".jpeg") and p.is_file())
    if not files:
        print(f"no .jpg or .jpeg files in {args.folder}", file=sys.stderr)
        return 1
    start = time.perf_counter()
    sent = 0
    failed = 0
    with torchfarm.Client(args.endpoint, timeout=60) as client:
        for first in range(0, len(files), args.batch):
            chunk = files[first:first + args.batch]
            images = [p.read_bytes() for p in chunk]
            sent += sum(len(b) for b in images)
            try:
                probabilities, classes = client.infer(args.model, images)
            except torchfarm.InvalidArgument as e:
                # A corrupt file fails its request; retry one by one to name it.
                for path, image in zip(chunk, images):
                    try:
                        (p1, c1) = client.infer(args.model, [image])
                        print(f"{path.name}: class {c1[0][0]} ({p1[0][0]:.3f})")
                    except torchfarm.InvalidArgument as single:
                        failed += 1
                        print(f"{path.name}: {single}")
                continue
            for path, p, c in zip(chunk, probabilities, classes):
                top = ", ".join(f"{int(k)} ({float(v):.3f})" for k, v in zip(c, p))
                print(f"{path.name}: {top}")
    seconds = time.perf_counter() - start
    print(f"{len(files)} images ({failed} unreadable) in {seconds:.2f} s = "
          f"{len(files) / seconds:.1f} images/s; {sent / len(files) / 1024:.1f} KiB sent per image")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Issue 27's figures, side by side in one run (repeat with --rounds): what one client costs another.

  1. flood vs light   convnet [1, 3, 32, 32] (max_batch_size 4, 1 worker):
                      a light client (1 in flight) alone, then beside a flooding client (64 in
                      flight), with fair_queueing true (default) and false: light p50/p99 and
                      the flooder's throughput
  2. cost at c=64     identity [1, 64] (2 workers, max_batch_size 8, 200 us delay), one client
                      keeping 64 requests in flight, fair_queueing true vs false: req/s and p50

Uses Debian's /usr/bin/python3 (no packages beyond the standard library) and the build's
`torchfarm bench` as the load generator. Run from the repository root after a build:
  /usr/bin/python3 bench/fairness_bench.py --build-dir build [--rounds 2]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from worker_start_bench import Farm  # noqa: E402


def convnet(model_dir, fair):
    return [{"name": "convnet", "path": os.path.join(model_dir, "convnet.pt"),
             "inputs": [{"dtype": "float32", "shape": [-1, 3, 32, 32]}],
             "instances": [{"device": "cpu", "count": 1}], "max_batch_size": 4,
             "fair_queueing": fair}]


def identity(model_dir, fair):
    return [{"name": "identity", "path": os.path.join(model_dir, "identity.pt"),
             "inputs": [{"dtype": "float32", "shape": [-1, 64]}],
             "instances": [{"device": "cpu", "count": 2}], "max_batch_size": 8,
             "max_queue_delay_us": 200, "fair_queueing": fair}]


def bench_argv(args, endpoint, model, shape, depth, seconds):
    argv = [os.path.join(args.bin_dir, "torchfarm"), "bench", "--endpoint", endpoint,
            "--concurrency", "1", "--depth", str(depth), "--seconds", str(seconds),
            "--warmup", "1", "--json", "--model", model, "--shape", shape]
    return argv


def step_of(out):
    step = json.loads(out)["steps"][0]
    return {"rps": step["ok_per_s"], "p50_ms": step["latency_us"]["p50"] / 1000,
            "p99_ms": step["latency_us"]["p99"] / 1000, "errors": step["error_count"]}


def run(argv):
    return step_of(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)


def flood_vs_light(args, tmp, fair):
    with Farm(args.bin_dir, tmp, "fair-%s" % fair, convnet(args.model_dir, fair)) as farm:
        light_argv = bench_argv(args, farm.endpoint, "convnet", "1,3,32,32", 1, args.seconds)
        idle = run(light_argv)
        flood_argv = bench_argv(args, farm.endpoint, "convnet", "1,3,32,32", 64,
                                args.seconds + 2)
        flood = subprocess.Popen(flood_argv, stdout=subprocess.PIPE, text=True)
        busy = run(light_argv)
        flood_out, _ = flood.communicate()
        return {"idle": idle, "busy": busy, "flood": step_of(flood_out)}


def one_client_c64(args, tmp, fair):
    with Farm(args.bin_dir, tmp, "c64-%s" % fair, identity(args.model_dir, fair)) as farm:
        return run(bench_argv(args, farm.endpoint, "identity", "1,64", 64, args.seconds))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", default="build")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=5)
    args = parser.parse_args()
    args.bin_dir = os.path.abspath(os.path.join(args.build_dir, "bin"))
    args.model_dir = os.path.abspath(os.path.join(args.build_dir, "bench-models"))
    subprocess.run([os.path.join(args.bin_dir, "torchfarm-mkmodel"), "--all", args.model_dir],
                   check=True, capture_output=True)
    with tempfile.TemporaryDirectory(prefix="torchfarm-fair-") as tmp:
        for r in range(args.rounds):
            print("round %d" % (r + 1))
            for fair in (True, False):
                f = flood_vs_light(args, tmp, fair)
                print("  flood vs light, fair_queueing=%-5s light idle p50 %.2f p99 %.2f ms | "
                      "beside flood p50 %.2f p99 %.2f ms | flood %.0f req/s (errors %d)" %
                      (fair, f["idle"]["p50_ms"], f["idle"]["p99_ms"], f["busy"]["p50_ms"],
                       f["busy"]["p99_ms"], f["flood"]["rps"],
                       f["busy"]["errors"] + f["flood"]["errors"]))
            c64 = {fair: one_client_c64(args, tmp, fair) for fair in (True, False)}
            print("  one client, 64 in flight, identity: fair %.0f req/s p50 %.2f ms | fifo %.0f "
                  "req/s p50 %.2f ms | ratio %.3f" %
                  (c64[True]["rps"], c64[True]["p50_ms"], c64[False]["rps"],
                   c64[False]["p50_ms"], c64[True]["rps"] / max(c64[False]["rps"], 1e-9)))


if __name__ == "__main__":
    main()

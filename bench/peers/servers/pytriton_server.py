"""PyTriton server of the peer benchmark (issue 31): Triton (bundled by nvidia-pytriton) serving
each model with Triton's dynamic batcher and `--workers` model instances (one Python callable
each, one intra-op thread each), KServe v2 over HTTP on `--port`.

    python pytriton_server.py --port P --models-dir D --models mlp,resnet18 --workers 2 \
        --max-batch 16 --delay-us 2000
"""
import argparse
import json
import os
import signal
import sys

import numpy as np
import torch


def make_infer(path):
    from pytriton.decorators import batch

    model = torch.jit.load(path).eval()

    @batch
    def infer(INPUT__0):
        with torch.no_grad():
            out = model(torch.from_numpy(np.ascontiguousarray(INPUT__0)))
        return {"OUTPUT__0": out.numpy()}

    return infer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--models-dir", required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument("--delay-us", type=int, default=2000)
    args = parser.parse_args()
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig

    torch.set_num_threads(1)
    with open(os.path.join(args.models_dir, "models.json")) as f:
        specs = json.load(f)["models"]
    config = TritonConfig(http_address="127.0.0.1", http_port=args.port, grpc_port=args.port + 1,
                          metrics_port=args.port + 2, allow_grpc=True, allow_metrics=False)
    # No token on statistics and the rest (loopback only): perf_analyzer reads the statistics,
    # and torchfarm asks no token either.
    with Triton(config=config,
                security_config=TritonSecurityConfig(restricted_endpoints=[])) as triton:
        for name in args.models.split(","):
            path = os.path.join(args.models_dir, name + ".pt")
            triton.bind(
                model_name=name,
                infer_func=[make_infer(path) for _ in range(args.workers)],
                inputs=[Tensor(name="INPUT__0", dtype=np.float32,
                               shape=tuple(specs[name]["in_shape"]))],
                outputs=[Tensor(name="OUTPUT__0", dtype=np.float32,
                                shape=tuple(specs[name]["out_shape"]))],
                config=ModelConfig(max_batch_size=args.max_batch,
                                   batcher=DynamicBatcher(
                                       max_queue_delay_microseconds=args.delay_us)),
                strict=False)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        print("pytriton: serving", flush=True)
        triton.serve()


if __name__ == "__main__":
    main()

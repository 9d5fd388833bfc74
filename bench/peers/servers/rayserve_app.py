"""Ray Serve app of the peer benchmark (issue 31): one deployment per model, `--workers` replicas
of one intra-op thread each, `@serve.batch` with the given max batch and wait, raw float32 bytes
in and out on route /{model} (bench/peers/peer_wire.py). max_ongoing_requests is raised to the
batch size: Ray Serve's default of 5 would cap each replica's batch at 5.

    python rayserve_app.py --port P --models-dir D --models mlp --workers 2 --max-batch 16 \
        --delay-us 2000
"""
import argparse
import json
import os
import signal
import sys
import time

import numpy as np


def deployment(serve, name, path, in_shape, max_batch, delay_s):
    from starlette.responses import Response

    class PeerModel:
        def __init__(self):
            import torch

            torch.set_num_threads(1)
            self.torch = torch
            self.model = torch.jit.load(path).eval()
            self.want = int(np.prod(in_shape)) * 4

        @serve.batch(max_batch_size=max_batch, batch_wait_timeout_s=delay_s)
        async def run(self, raws):
            x = np.stack([np.frombuffer(r, dtype="<f4").reshape(in_shape) for r in raws])
            with self.torch.no_grad():
                out = self.model(self.torch.from_numpy(x))
            return [row.numpy().astype("<f4").tobytes() for row in out]

        async def __call__(self, request):
            raw = await request.body()
            if len(raw) != self.want:
                return Response(f"expected {self.want} bytes (float32 {in_shape}), got {len(raw)}",
                                status_code=400)
            return Response(await self.run(raw), media_type="application/octet-stream")

    PeerModel.__name__ = f"PeerModel_{name}"
    return PeerModel


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--models-dir", required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument("--delay-us", type=int, default=2000)
    args = parser.parse_args()
    import ray
    from ray import serve

    with open(os.path.join(args.models_dir, "models.json")) as f:
        specs = json.load(f)["models"]
    ray.init(num_cpus=16, include_dashboard=False,
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}})
    serve.start(http_options={"host": "127.0.0.1", "port": args.port})
    for name in args.models.split(","):
        cls = deployment(serve, name, os.path.join(args.models_dir, name + ".pt"),
                         specs[name]["in_shape"], args.max_batch, args.delay_us / 1e6)
        app = serve.deployment(num_replicas=args.workers,
                               max_ongoing_requests=max(2 * args.max_batch, 32),
                               ray_actor_options={"num_cpus": 1})(cls).bind()
        serve.run(app, name=name, route_prefix=f"/{name}")

    def stop(*_):
        serve.shutdown()
        ray.shutdown()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    print("rayserve: serving", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()

"""LitServe app of the peer benchmark (issue 31): one model per server on `--port`,
`--workers` inference workers of one intra-op thread each, LitServe's batching with the given
max batch and timeout, JSON {"data": base64 float32} in and out on /predict
(bench/peers/peer_wire.py; LitServe's default decoder takes JSON or forms only).

    python litserve_app.py --port P --models-dir D --model mlp --workers 2 --max-batch 16 \
        --delay-us 2000
"""
import argparse
import base64
import json
import os

import numpy as np


import litserve as ls  # noqa: E402  (the peers' venv only)
import torch  # noqa: E402


class PeerAPI(ls.LitAPI):
    """At module level: LitServe pickles the API into its spawned worker processes."""

    def __init__(self, path, in_shape, max_batch, delay_s):
        super().__init__(max_batch_size=max_batch, batch_timeout=delay_s)
        self.path, self.in_shape = path, in_shape

    def setup(self, device):
        torch.set_num_threads(1)
        self.model = torch.jit.load(self.path).eval()

    def decode_request(self, request):
        raw = base64.b64decode(request["data"])
        return torch.from_numpy(np.frombuffer(raw, dtype="<f4").reshape(self.in_shape).copy())

    def batch(self, inputs):
        return torch.stack(inputs)

    def predict(self, x):
        with torch.no_grad():
            return self.model(x)

    def unbatch(self, output):
        return list(output)

    def encode_response(self, output):
        return {"data": base64.b64encode(output.numpy().astype("<f4").tobytes()).decode()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--models-dir", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument("--delay-us", type=int, default=2000)
    args = parser.parse_args()
    with open(os.path.join(args.models_dir, "models.json")) as f:
        in_shape = json.load(f)["models"][args.model]["in_shape"]
    api = PeerAPI(os.path.join(args.models_dir, args.model + ".pt"), in_shape, args.max_batch,
                  args.delay_us / 1e6)
    server = ls.LitServer(api, accelerator="cpu", workers_per_device=args.workers)
    server.run(host="127.0.0.1", port=args.port, generate_client_file=False)


if __name__ == "__main__":
    main()

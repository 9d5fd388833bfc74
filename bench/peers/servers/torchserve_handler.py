"""TorchServe handler of the peer benchmark (issue 31): one batch of raw float32 requests
through a TorchScript model, answers as raw float32 bytes (bench/peers/peer_wire.py). The input
shape comes from peer_model.json, packed into the .mar by bench/peers/peer_servers.py. One
intra-op thread per worker process: the same CPU budget as every server of the benchmark."""
import json
import os

import numpy as np
import torch


class PeerHandler:
    def initialize(self, context):
        torch.set_num_threads(1)
        model_dir = context.system_properties["model_dir"]
        with open(os.path.join(model_dir, "peer_model.json")) as f:
            self.in_shape = json.load(f)["in_shape"]
        serialized = context.manifest["model"]["serializedFile"]
        self.model = torch.jit.load(os.path.join(model_dir, serialized)).eval()
        self.want = int(np.prod(self.in_shape)) * 4

    def handle(self, data, context):
        rows = []
        for item in data:
            raw = item.get("body") or item.get("data")
            if len(raw) != self.want:
                raise ValueError(f"expected {self.want} bytes (float32 {self.in_shape}), "
                                 f"got {len(raw)}")
            rows.append(np.frombuffer(bytes(raw), dtype="<f4").reshape(self.in_shape))
        with torch.no_grad():
            out = self.model(torch.from_numpy(np.stack(rows)))
        return [row.numpy().astype("<f4").tobytes() for row in out]

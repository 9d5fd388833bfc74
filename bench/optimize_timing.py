#!/usr/bin/env python3
"""A TorchScript model as loaded vs torch.jit.optimize_for_inference (the model config's
"optimize": "inference", docs/models.md): median forward ms at batch 1 and 8, one thread,
six alternating repeats. Image-shaped input [B, 3, 224, 224] (resnet18 of bench/peers).

Usage: .venv/bin/python bench/optimize_timing.py build/peer-models/resnet18.pt
"""
import statistics
import sys
import time

import torch

torch.set_num_threads(1)
path = sys.argv[1]
plain = torch.jit.load(path).eval()
opt = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.load(path).eval()))
def run(m, x, n):
    with torch.inference_mode():
        m(x)
        t = time.perf_counter()
        for _ in range(n): m(x)
        return (time.perf_counter() - t) / n * 1000
for b, n in ((1, 10), (8, 3)):
    x = torch.randn(b, 3, 224, 224)
    a, o = [], []
    for _ in range(6):
        a.append(run(plain, x, n)); o.append(run(opt, x, n))
    ma, mo = statistics.median(a), statistics.median(o)
    print(f"batch {b}: as loaded {ma:.1f} ms, optimize_for_inference {mo:.1f} ms, ratio {ma/mo:.2f} (ranges {min(a):.1f}-{max(a):.1f} / {min(o):.1f}-{max(o):.1f})")

#!/usr/bin/env python3
"""Reference outputs for tests/integration/pipeline_test.cc: decode + preprocess + model +
postprocess in PyTorch on the same JPEG bytes the farm gets.

Usage: pipeline_reference.py MODEL_DIR OUT_DIR a.jpg b.jpg ...
Writes OUT_DIR/ref_values.npy (float32 [N, 3]) and OUT_DIR/ref_classes.npy (int64 [N, 3]).
Exit code 77 when python3-torch or python3-torchvision is missing (the test then skips).
"""
import os
import sys

try:
    import numpy
    import torch
    import torchvision.io
except ImportError as error:  # the caller skips
    print(f"pipeline_reference: {error}", file=sys.stderr)
    sys.exit(77)


def main():
    model_dir, out_dir, images = sys.argv[1], sys.argv[2], sys.argv[3:]
    torch.set_num_threads(1)
    pre = torch.jit.load(os.path.join(model_dir, "jpeg_pre.pt")).eval()
    model = torch.jit.load(os.path.join(model_dir, "convnet.pt")).eval()
    post = torch.jit.load(os.path.join(model_dir, "topk_post.pt")).eval()
    rows = []
    with torch.inference_mode():
        for path in images:
            with open(path, "rb") as f:
                data = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
            # torchvision decodes to [3, H, W]; the farm's preprocess takes [H, W, 3].
            image = torchvision.io.decode_jpeg(data, mode=torchvision.io.ImageReadMode.RGB)
            rows.append(pre(image.permute(1, 2, 0).contiguous()))
        values, classes = post(model(torch.stack(rows)))
    numpy.save(os.path.join(out_dir, "ref_values.npy"), values.numpy())
    numpy.save(os.path.join(out_dir, "ref_classes.npy"), classes.numpy())


if __name__ == "__main__":
    main()

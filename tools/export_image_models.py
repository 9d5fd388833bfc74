#!/usr/bin/python3
"""Writes the real models of `make models-real` (issue 20): torchvision models with RANDOM
weights (nothing is downloaded: the answers are meaningless, the speed is real), the TorchScript
pre/post-processing modules of the worker's image pipeline (worker/pipeline_stages.h), and an
int8 dynamically quantised linear-heavy model for the CPU path.

    .venv/bin/python tools/export_image_models.py --out models/real   (what `make models-real` runs;
    Debian's /usr/bin/python3 with python3-torch works too, for a -DTORCHFARM_TORCH=debian build)

Needs torch and torchvision (.venv's, from tools/install-deps.sh; or Debian's python3-torch and
python3-torchvision, install-deps.sh --models); without them it says so and exits with status 3. Files (configs/images.json serves them):

  resnet18.pt          float32 [-1, 3, 224, 224] -> float32 [-1, 1000]        (traced, frozen)
  resnet18_pre.pt      uint8 [H, W, 3] -> float32 [3, 224, 224]: shorter side to 256 (bilinear),
                       centre crop 224, /255, ImageNet mean/std               (scripted)
  resnet18_post.pt     float32 [-1, 1000] -> (float32 [-1, 5] probabilities, int64 [-1, 5] classes)
  lraspp.pt            segmentation, torchvision lraspp_mobilenet_v3_large, 21 classes:
                       float32 [-1, 3, 224, 224] -> float32 [-1, 21, 224, 224] (traced, frozen)
  lraspp_pre.pt        uint8 [H, W, 3] -> float32 [3, 224, 224]: resize to 224 x 224, normalised
  lraspp_post.pt       float32 [-1, 21, H, W] -> uint8 [-1, H, W] class per pixel
  mlp_large.pt         float32 [-1, 1024] -> float32 [-1, 1000]: 1024-4096-4096-1000 ReLU MLP
  mlp_large_int8.pt    the same, torch.ao.quantization.quantize_dynamic (int8 weights of every
                       Linear, qnnpack engine: Debian's torch has no fbgemm)
"""
import argparse
import os
import sys

EXIT_MISSING = 3


def image_modules(torch):
    nn = torch.nn
    F = torch.nn.functional

    class ResizeCropNormalize(nn.Module):
        """ImageNet evaluation transform on one decoded image, uint8 [H, W, 3]."""

        def __init__(self, resize: int, crop: int):
            super().__init__()
            self.resize = resize
            self.crop = crop
            self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1))
            self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1))

        def forward(self, image: torch.Tensor) -> torch.Tensor:
            x = image.permute(2, 0, 1).unsqueeze(0).float() / 255.0
            h, w = x.shape[2], x.shape[3]
            if self.crop == 0:
                size = [self.resize, self.resize]
            elif h < w:
                size = [self.resize, int(w * self.resize / h)]
            else:
                size = [int(h * self.resize / w), self.resize]
            x = F.interpolate(x, size=size, mode="bilinear", align_corners=False)
            if self.crop > 0:
                top = (x.shape[2] - self.crop) // 2
                left = (x.shape[3] - self.crop) // 2
                x = x[:, :, top:top + self.crop, left:left + self.crop]
            return (x[0] - self.mean) / self.std

    class TopK(nn.Module):
        def __init__(self, k: int):
            super().__init__()
            self.k = k

        def forward(self, logits: torch.Tensor):
            return torch.topk(torch.softmax(logits, 1), self.k, 1)

    class PixelClasses(nn.Module):
        def forward(self, logits: torch.Tensor) -> torch.Tensor:
            return logits.argmax(1).to(torch.uint8)

    return ResizeCropNormalize, TopK, PixelClasses


def traced(torch, model, example, out, freeze=True):
    model.eval()
    with torch.no_grad():
        module = torch.jit.trace(model, example, check_trace=False)
        if freeze:
            module = torch.jit.freeze(module)
        expected = model(example)
        module.save(out)
        got = torch.jit.load(out)(example)
    expected = expected if isinstance(expected, torch.Tensor) else expected["out"]
    if not torch.allclose(got, expected, rtol=1e-3, atol=1e-3):
        raise RuntimeError(f"{out}: the saved module's output differs from the eager model's")
    print(f"wrote {out}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder to write into")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    try:
        import torch
        import torchvision
    except ImportError as error:
        print(f"export_image_models: skipped: {error} (tools/install-deps.sh --models)",
              file=sys.stderr)
        return EXIT_MISSING
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(args.seed)
    torch.set_num_threads(2)
    path = lambda name: os.path.join(args.out, name)  # noqa: E731
    ResizeCropNormalize, TopK, PixelClasses = image_modules(torch)
    example = torch.rand(2, 3, 224, 224)

    traced(torch, torchvision.models.resnet18(weights=None), example, path("resnet18.pt"))
    torch.jit.script(ResizeCropNormalize(256, 224)).save(path("resnet18_pre.pt"))
    torch.jit.script(TopK(5)).save(path("resnet18_post.pt"))

    class Segmenter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = torchvision.models.segmentation.lraspp_mobilenet_v3_large(
                weights=None, weights_backbone=None)

        def forward(self, x):
            return self.net(x)["out"]

    traced(torch, Segmenter(), example, path("lraspp.pt"))
    torch.jit.script(ResizeCropNormalize(224, 0)).save(path("lraspp_pre.pt"))
    torch.jit.script(PixelClasses()).save(path("lraspp_post.pt"))

    nn = torch.nn
    mlp = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                        nn.Linear(4096, 1000)).eval()
    vectors = torch.randn(4, 1024)
    traced(torch, mlp, vectors, path("mlp_large.pt"))
    torch.backends.quantized.engine = "qnnpack"
    quantized = torch.ao.quantization.quantize_dynamic(mlp, {nn.Linear}, dtype=torch.qint8)
    with torch.no_grad():
        module = torch.jit.trace(quantized, vectors, check_trace=False)
        module.save(path("mlp_large_int8.pt"))
    print(f"wrote {path('mlp_large_int8.pt')}")
    for name in ("resnet18_pre.pt", "resnet18_post.pt", "lraspp_pre.pt", "lraspp_post.pt"):
        print(f"wrote {path(name)}")
    print("note: every model has random weights (nothing downloaded): real speed, meaningless "
          "answers")
    return 0


if __name__ == "__main__":
    sys.exit(main())

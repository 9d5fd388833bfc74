#!/usr/bin/python3
"""Exports a torchvision model (default ResNet-18) to TorchScript with random weights.

For the benchmarks (bench/run_suite.py, tools/gpu-check.sh): a realistic compute-heavy model
without downloading weights. Needs Debian's python3-torch and python3-torchvision (not in
tools/install-deps.sh: on a fresh machine torchvision pulls in the ffmpeg libraries), or any
PyTorch with torchvision. Without torchvision it prints why and exits with status 3, which the
suite reports as "skipped"; any other failure exits 1.

    /usr/bin/python3 tools/export_torchvision.py --out models/resnet18.pt [--model resnet18]
        [--no-freeze] [--builtin-if-missing]

The module is traced in eval mode on a [1, 3, 224, 224] float32 input on the CPU and checked by
loading it back and comparing one output with the eager model. Its input spec for a farm config:
{"dtype": "float32", "shape": [-1, 3, 224, 224]}; output [-1, 1000].

By default the traced module is frozen (torch.jit.freeze: weights become graph constants, which
is faster on the CPU). A module meant for a GPU or another precision must not be frozen
(--no-freeze): Module::to(device / dtype), as the worker and torchfarm-bench-inprocess call it,
moves and casts parameters, not constants. --builtin-if-missing: when torchvision cannot be
imported, export this file's own ResNet-50 (the same layers as torchvision's resnet50) instead of
exiting with status 3; only for --model resnet50.
"""
import argparse
import sys

EXIT_MISSING = 3


def builtin_resnet50(nn):
    """ResNet-50 v1.5 as torchvision builds it: bottlenecks [3, 4, 6, 3], stride on the 3x3."""

    class Bottleneck(nn.Module):
        def __init__(self, inplanes, planes, stride):
            super().__init__()
            out = planes * 4
            self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(out)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = nn.Identity()
            if stride != 1 or inplanes != out:
                self.downsample = nn.Sequential(nn.Conv2d(inplanes, out, 1, stride, bias=False),
                                                nn.BatchNorm2d(out))

        def forward(self, x):
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.relu(self.bn2(self.conv2(y)))
            return self.relu(self.bn3(self.conv3(y)) + self.downsample(x))

    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
              nn.MaxPool2d(3, 2, 1)]
    inplanes = 64
    for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(Bottleneck(inplanes, planes, stride if i == 0 else 1))
            inplanes = planes * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, 1000)]
    return nn.Sequential(*layers)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="TorchScript file to write")
    parser.add_argument("--model", default="resnet18", help="a torchvision.models constructor")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-freeze", action="store_true",
                        help="keep weights as parameters (needed to move the module to a GPU)")
    parser.add_argument("--builtin-if-missing", action="store_true",
                        help="without torchvision, export the built-in ResNet-50 (--model resnet50)")
    args = parser.parse_args()
    try:
        import torch
    except ImportError as error:
        print(f"export_torchvision: skipped: {error} "
              "(apt-get install python3-torch python3-torchvision)", file=sys.stderr)
        return EXIT_MISSING
    try:
        import torchvision
        source = f"torchvision {torchvision.__version__}"
        constructor = getattr(torchvision.models, args.model, None)
    except ImportError as error:
        if not (args.builtin_if_missing and args.model == "resnet50"):
            print(f"export_torchvision: skipped: {error} (apt-get install python3-torchvision)",
                  file=sys.stderr)
            return EXIT_MISSING
        print(f"export_torchvision: {error}; using the built-in ResNet-50", file=sys.stderr)
        source = "built-in resnet50 (no torchvision)"
        constructor = lambda: builtin_resnet50(torch.nn)  # noqa: E731
    if constructor is None:
        print(f"export_torchvision: torchvision.models has no '{args.model}'", file=sys.stderr)
        return 1
    torch.manual_seed(args.seed)
    model = constructor()  # random initialisation: no weights are downloaded
    model.eval()
    example = torch.rand(1, 3, 224, 224)
    with torch.no_grad():
        traced = torch.jit.trace(model, example)
        if not args.no_freeze and hasattr(torch.jit, "freeze"):
            traced = torch.jit.freeze(traced)
        traced.save(args.out)
        loaded = torch.jit.load(args.out)
        if not torch.allclose(loaded(example), model(example), rtol=1e-3, atol=1e-4):
            print("export_torchvision: the saved module disagrees with the eager model",
                  file=sys.stderr)
            return 1
    frozen = "not frozen" if args.no_freeze else "frozen"
    print(f"export_torchvision: wrote {args.out} ({args.model}, {frozen}, torch {torch.__version__}, "
          f"{source})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Exports a torchvision model (default ResNet-18) to TorchScript with random weights.

For the benchmarks (bench/run_suite.py): a realistic compute-heavy model without downloading
weights. Needs Debian's python3-torch and python3-torchvision (not in tools/install-deps.sh: on a
fresh machine torchvision pulls in the ffmpeg libraries). Without torchvision it prints why and
exits with status 3, which the suite reports as "skipped"; any other failure exits 1.

    /usr/bin/python3 tools/export_torchvision.py --out models/resnet18.pt [--model resnet18]

The module is traced in eval mode on a [1, 3, 224, 224] float32 input and checked by loading it
back and comparing one output with the eager model. Its input spec for a farm config:
{"dtype": "float32", "shape": [-1, 3, 224, 224]}; output [-1, 1000].
"""
import argparse
import sys

EXIT_MISSING = 3


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="TorchScript file to write")
    parser.add_argument("--model", default="resnet18", help="a torchvision.models constructor")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    try:
        import torch
        import torchvision
    except ImportError as error:
        print(f"export_torchvision: skipped: {error} "
              "(apt-get install python3-torch python3-torchvision)", file=sys.stderr)
        return EXIT_MISSING
    constructor = getattr(torchvision.models, args.model, None)
    if constructor is None:
        print(f"export_torchvision: torchvision.models has no '{args.model}'", file=sys.stderr)
        return 1
    torch.manual_seed(args.seed)
    model = constructor()  # random initialisation: no weights are downloaded
    model.eval()
    example = torch.rand(1, 3, 224, 224)
    with torch.no_grad():
        traced = torch.jit.trace(model, example)
        traced = torch.jit.freeze(traced) if hasattr(torch.jit, "freeze") else traced
        traced.save(args.out)
        loaded = torch.jit.load(args.out)
        if not torch.allclose(loaded(example), model(example), rtol=1e-3, atol=1e-4):
            print("export_torchvision: the saved module disagrees with the eager model",
                  file=sys.stderr)
            return 1
    print(f"export_torchvision: wrote {args.out} ({args.model}, torch {torch.__version__}, "
          f"torchvision {torchvision.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env -S .venv/bin/python
"""Writes torchfarm's test and demo models as TorchScript and as AOTInductor packages (issue 29).

Run with the project's .venv (tools/install-deps.sh: pip's torch 2.15.0 and torchvision 0.29.2),
never with Debian's /usr/bin/python3 (torch 1.13 has no torch.export):

    .venv/bin/python tools/export_model.py --out models/py [--models mlp,transformer]
        [--formats torchscript,aoti] [--max-batch 256] [--fixed-batch 4] [--reference 1,3,17]
        [--hostile] [--skip-existing]

For each model NAME it writes
    NAME.pt            TorchScript (traced, or scripted for the transformer), frozen
    NAME.pt2           AOTInductor package, batch dimension dynamic in [1, --max-batch]
                       (torch.export.Dim), compiled for this machine's CPU (-march of the host:
                       not portable to another CPU type) and this torch version
    NAME_b{N}.pt2      with --fixed-batch N: the same model compiled for batch N only
    NAME.ref{R}.in.npy / NAME.ref{R}.out.npy   with --reference: a seeded float32 input of R rows
                       and what the eager (uncompiled) PyTorch module returns for it
    NAME.json          the input and output specs for a farm config ("inputs"/"outputs" entries)
--hostile adds packages a farm must refuse, from mlp.pt2 (tests/integration/aoti_test.cc):
    mlp_wrong_name.pt2  its model folder renamed (data/aotinductor/model -> .../other)
    mlp_cuda.pt2        its metadata says it was compiled for cuda
    mlp_old_torch.pt2   its metadata says torch 2.9.0 compiled it
Each package carries torchfarm_* metadata (aot_inductor.metadata): the torch version that
compiled it, its batch range and its input/output specs; the worker checks them.

Models (random weights, nothing downloaded):
    mlp          float32 [-1, 256] -> [-1, 128]: torchfarm-mkmodel's mlp (seed 0, same init, same
                 order: with the same torch the weights are the same as `torchfarm-mkmodel mlp`)
    convnet      float32 [-1, 3, 32, 32] -> [-1, 10]: torchfarm-mkmodel's convnet
    transformer  float32 [-1, 32, 128] -> [-1, 32, 128]: nn.TransformerEncoder, 2 layers of
                 d_model 128, 4 heads, feed-forward 512, batch_first, eval
    resnet18     float32 [-1, 3, 224, 224] -> [-1, 1000]: torchvision's, weights=None

AOTInductor export needs g++ (the package's .so is compiled now: ~20 s the first time, ~7 s
after, a ~360 MB cache in /tmp/torchinductor_$USER). Exit status: 0 written, 1 failed, 2 bad
arguments.
"""
import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
import zipfile

MODELS = ("mlp", "convnet", "transformer", "resnet18")
FORMATS = ("torchscript", "aoti")


def build_mlp(torch, nn):
    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            # torchfarm-mkmodel's BuildMlp: the same draws in the same order.
            self.w1 = nn.Parameter(torch.randn(512, 256) / math.sqrt(256), requires_grad=False)
            self.b1 = nn.Parameter(torch.randn(512) / math.sqrt(256), requires_grad=False)
            self.w2 = nn.Parameter(torch.randn(128, 512) / math.sqrt(512), requires_grad=False)
            self.b2 = nn.Parameter(torch.randn(128) / math.sqrt(512), requires_grad=False)

        def forward(self, x):
            h = torch.relu(torch.matmul(x, self.w1.t()) + self.b1)
            return torch.matmul(h, self.w2.t()) + self.b2

    return Mlp(), [256], [128]


def build_convnet(torch, nn):
    import torch.nn.functional as F

    class Convnet(nn.Module):
        def __init__(self):
            super().__init__()

            def weight(shape, fan_in):
                return nn.Parameter(torch.randn(*shape) / math.sqrt(fan_in), requires_grad=False)

            self.c1w, self.c1b = weight((16, 3, 3, 3), 27), weight((16,), 27)
            self.c2w, self.c2b = weight((32, 16, 3, 3), 144), weight((32,), 144)
            self.fw, self.fb = weight((10, 32), 32), weight((10,), 32)

        def forward(self, x):
            h = torch.relu(F.conv2d(x, self.c1w, self.c1b, 1, 1))
            h = F.max_pool2d(h, 2)
            h = torch.relu(F.conv2d(h, self.c2w, self.c2b, 1, 1))
            h = torch.flatten(F.adaptive_avg_pool2d(h, 1), 1)
            return torch.matmul(h, self.fw.t()) + self.fb

    return Convnet(), [3, 32, 32], [10]


def build_transformer(torch, nn):
    layer = nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=512, dropout=0.0,
                                       batch_first=True)
    # enable_nested_tensor=False: no padding mask here, and nested tensors do not export.
    return nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False), [32, 128], [32, 128]


def build_resnet18(torch, nn):
    import torchvision

    return torchvision.models.resnet18(weights=None), [3, 224, 224], [1000]


def build(name, torch):
    torch.manual_seed(0)
    module, in_shape, out_shape = globals()["build_" + name](torch, torch.nn)
    return module.eval(), in_shape, out_shape


def write_torchscript(torch, name, module, example, path):
    with torch.no_grad():
        if name == "transformer":
            scripted = torch.jit.script(module)
        else:
            scripted = torch.jit.trace(module, (example,), check_trace=False)
        frozen = torch.jit.freeze(scripted.eval())
        frozen.save(path + ".tmp")
    os.replace(path + ".tmp", path)


def package_metadata(torch, in_shape, out_shape, batch):
    """What the worker reads from the package (worker/aoti_model_runner.h, docs/models.md)."""
    return {
        "torchfarm_torch_version": torch.__version__.split("+")[0],
        "torchfarm_batch": batch,  # "1..256" (dynamic) or "4" (compiled for 4 rows only)
        "torchfarm_inputs": json.dumps([{"dtype": "float32", "shape": [-1] + in_shape}]),
        "torchfarm_outputs": json.dumps([{"dtype": "float32", "shape": [-1] + out_shape}]),
    }


def export_program(torch, module, example, max_batch, min_batch):
    import torch.fx.experimental._config as fx_config
    dynamic = None
    if max_batch > 0:
        dynamic = ({0: torch.export.Dim("batch", min=min_batch, max=max_batch)},)
    # backed_size_oblivious: without it torch.export specializes sizes 0 and 1, so a Dim(min=1)
    # compiles as ">= 2" and the package refuses batch 1 ("dim value is too small at 0").
    with torch.no_grad(), fx_config.patch(backed_size_oblivious=max_batch > 0):
        return torch.export.export(module, (example,), dynamic_shapes=dynamic)


def write_aoti(torch, module, example, path, max_batch, in_shape, out_shape):
    """Compiles `module` into an AOTInductor package; max_batch 0: the example's batch only.

    A model whose export cannot keep batch 1 dynamic (nn.TransformerEncoder's attention guards
    batch != 1) is compiled for 2..max_batch; the worker pads a 1-row batch to 2 and cuts the
    output back (worker/aoti_package_info.h, AotiRunRows)."""
    min_batch = 1
    try:
        program = export_program(torch, module, example, max_batch, min_batch)
    except Exception as e:  # torch's UserError: Constraints violated (batch)
        if max_batch == 0 or "!= 1" not in str(e):
            raise
        min_batch = 2
        program = export_program(torch, module, example, max_batch, min_batch)
    batch = f"{min_batch}..{max_batch}" if max_batch > 0 else str(example.shape[0])
    metadata = package_metadata(torch, in_shape, out_shape, batch)
    with torch.no_grad():
        # The archive's top folder is named after the file: write it under its final name.
        with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(path))) as tmp:
            staged = os.path.join(tmp, os.path.basename(path))
            torch._inductor.aoti_compile_and_package(
                program, package_path=staged,
                inductor_configs={"aot_inductor.metadata": metadata})
            os.replace(staged, path)
    if max_batch > 0 and min_batch == 1 and not runs_one_row(torch, path, in_shape):
        # Inductor may specialise batch 1 away after export kept it (torchvision's resnet18: the
        # package answers "dim value is too small at 0, expected it to be >= 2"). Record what the
        # package takes, so the worker pads a 1-row batch instead of failing it.
        batch = f"2..{max_batch}"
        rewrite_package(path, path, metadata_patch={"torchfarm_batch": batch})
    return batch


def runs_one_row(torch, path, in_shape):
    """The package at `path` runs a batch of one row (the range its metadata will claim), with
    its input checks on as the worker runs it (AOTI_RUNTIME_CHECK_INPUTS=1: those checks may
    hold the batch to >= 2 where the unchecked kernels would run)."""
    os.environ["AOTI_RUNTIME_CHECK_INPUTS"] = "1"
    try:
        with torch.no_grad():
            torch._inductor.aoti_load_package(path)(torch.zeros(1, *in_shape))
        return True
    except Exception as e:  # the package's own input check: RuntimeError "... too small ..."
        if "too small" not in str(e):
            raise
        return False


def rewrite_package(src, dst, rename=None, metadata_patch=None):
    """Copies the zip at src to dst, renaming path parts and patching *_metadata.json values."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst + ".tmp", "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            name = item.filename
            if rename:
                name = name.replace(rename[0], rename[1])
            if metadata_patch and name.endswith("_metadata.json"):
                meta = json.loads(data)
                meta.update(metadata_patch)
                data = json.dumps(meta).encode()
            zout.writestr(zipfile.ZipInfo(name, item.date_time), data,
                          compress_type=zipfile.ZIP_STORED)
    os.replace(dst + ".tmp", dst)


def save_npy(numpy, path, tensor):
    numpy.save(path + ".tmp.npy", tensor.detach().contiguous().numpy())
    os.replace(path + ".tmp.npy", path)


def parse_list(text, allowed, what):
    items = [t for t in text.split(",") if t]
    bad = [t for t in items if t not in allowed]
    if bad:
        raise SystemExit(f"export_model: --{what}: expected some of {','.join(allowed)}, "
                         f"got '{','.join(bad)}'")
    return items


STAMP = "export_stamp.json"


def export_identity(torch):
    """What the files of a folder depend on: the torch that wrote them (TorchScript and the
    package's runtime) and the CPU the packages were compiled for (-march of the host)."""
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f
                        if line.startswith("model name")), "")
    except OSError:
        pass
    return {"torch": torch.__version__, "cpu": cpu}


def stamp_matches(out, torch):
    """--skip-existing keeps files only when the same torch on the same CPU type wrote them."""
    try:
        with open(os.path.join(out, STAMP)) as f:
            stamp = json.load(f)
    except (OSError, ValueError):
        stamp = None
    want = export_identity(torch)
    if stamp == want:
        return True
    if stamp is not None or any(n.endswith((".pt", ".pt2")) for n in os.listdir(out)):
        print(f"export_model: {out} was written by {stamp or 'an unknown export'}, this is "
              f"{want}: removing its model files and writing them again")
    return False


def write_stamp(out, torch):
    with open(os.path.join(out, STAMP + ".tmp"), "w") as f:
        json.dump(export_identity(torch), f)
    os.replace(os.path.join(out, STAMP + ".tmp"), os.path.join(out, STAMP))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder to write into (created)")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--max-batch", type=int, default=256,
                        help="upper bound of the dynamic batch dimension of NAME.pt2")
    parser.add_argument("--fixed-batch", type=int, default=0,
                        help="also write NAME_bN.pt2 compiled for batch N only (0: not)")
    parser.add_argument("--reference", default="",
                        help="row counts to write eager reference inputs/outputs for, e.g. 1,3,17")
    parser.add_argument("--skip-existing", action="store_true",
                        help="keep model files that exist already (ctest's fixture reruns), "
                             "unless export_stamp.json says another torch or CPU type wrote them")
    parser.add_argument("--hostile", action="store_true",
                        help="also write mlp_wrong_name.pt2 and mlp_cuda.pt2 (needs mlp, aoti)")
    args = parser.parse_args()
    try:
        models = parse_list(args.models, MODELS, "models")
        formats = parse_list(args.formats, FORMATS, "formats")
        references = [int(r) for r in args.reference.split(",") if r]
    except ValueError as e:
        print(f"export_model: --reference: expected row counts like 1,3,17: {e}", file=sys.stderr)
        return 2
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    if args.max_batch < 2 or args.fixed_batch < 0 or any(r < 1 for r in references):
        print("export_model: --max-batch must be >= 2, --fixed-batch >= 0, --reference rows >= 1",
              file=sys.stderr)
        return 2
    if args.hostile and ("mlp" not in models or "aoti" not in formats):
        print("export_model: --hostile needs mlp among --models and aoti among --formats",
              file=sys.stderr)
        return 2

    import numpy
    import torch

    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    os.makedirs(args.out, exist_ok=True)
    if args.skip_existing and not stamp_matches(args.out, torch):
        # Files of another torch or CPU type: none is kept, also not the models this call does
        # not write (a later call with other --models must not find them and skip them).
        for stale in os.listdir(args.out):
            if stale.endswith((".pt", ".pt2", ".json", ".npy")):
                os.remove(os.path.join(args.out, stale))
    for name in models:
        module, in_shape, out_shape = build(name, torch)
        example = torch.randn(2, *in_shape)
        base = os.path.join(args.out, name)
        with open(base + ".json.tmp", "w") as f:
            json.dump({"inputs": [{"dtype": "float32", "shape": [-1] + in_shape}],
                       "outputs": [{"dtype": "float32", "shape": [-1] + out_shape}]}, f)
        os.replace(base + ".json.tmp", base + ".json")
        if "torchscript" in formats and not (args.skip_existing and os.path.exists(base + ".pt")):
            start = time.monotonic()
            write_torchscript(torch, name, module, example, base + ".pt")
            print(f"export_model: {base}.pt ({time.monotonic() - start:.1f} s)")
        if "aoti" in formats and not (args.skip_existing and os.path.exists(base + ".pt2")):
            start = time.monotonic()
            batch = write_aoti(torch, module, example, base + ".pt2", args.max_batch, in_shape,
                               out_shape)
            print(f"export_model: {base}.pt2 batch {batch} "
                  f"({time.monotonic() - start:.1f} s)")
        fixed = f"{base}_b{args.fixed_batch}.pt2"
        if "aoti" in formats and args.fixed_batch and not (args.skip_existing and
                                                            os.path.exists(fixed)):
            start = time.monotonic()
            write_aoti(torch, module, torch.randn(args.fixed_batch, *in_shape), fixed, 0,
                       in_shape, out_shape)
            print(f"export_model: {fixed} batch {args.fixed_batch} only "
                  f"({time.monotonic() - start:.1f} s)")
        generator = torch.Generator().manual_seed(1234)
        for rows in references:
            x = torch.randn(rows, *in_shape, generator=generator)
            with torch.no_grad():
                y = module(x)
            save_npy(numpy, f"{base}.ref{rows}.in.npy", x)
            save_npy(numpy, f"{base}.ref{rows}.out.npy", y)
    write_stamp(args.out, torch)
    if args.hostile:
        src = os.path.join(args.out, "mlp.pt2")
        rewrite_package(src, os.path.join(args.out, "mlp_wrong_name.pt2"),
                        rename=("data/aotinductor/model/", "data/aotinductor/other/"))
        rewrite_package(src, os.path.join(args.out, "mlp_cuda.pt2"),
                        metadata_patch={"AOTI_DEVICE_KEY": "cuda"})
        rewrite_package(src, os.path.join(args.out, "mlp_old_torch.pt2"),
                        metadata_patch={"torchfarm_torch_version": "2.9.0"})
        print(f"export_model: {args.out}/mlp_wrong_name.pt2, mlp_cuda.pt2, mlp_old_torch.pt2 "
              "(hostile)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # a failed export is reported as such, with torch's reason
        print(f"export_model: failed: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)

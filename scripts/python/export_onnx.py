#!/usr/bin/env python3
"""Export a `trainer export` model (model.safetensors or model.pt) to ONNX.

    python export_onnx.py export/model.safetensors --out export/model.onnx [--patch D,H,W] [--opset N]

The network is rebuilt with u3d_model.py (the same names and computation as the C++ network) and
exported with torch.onnx.export(dynamo=True) (torch.export + onnxscript); when that route fails, with
the deprecated TorchScript-based exporter (dynamo=False), which is said on the console. The graph
has one input "input" (N, C_in, D, H, W) float32 and one output "output" (N, C_out, D, H, W):
logits for segmentation, the dose / target_scale for dose (after the configured output activation);
batch and spatial sizes are dynamic (spatial sizes multiples of the meta's size_divisor) unless
--static. The export's metadata (task, channels, labels, config, ...) is stored as the ONNX model's
metadata_props. The result is then checked with onnx.checker and run against PyTorch on a seeded
random input of --patch voxels (default 2 x size_divisor per axis, or 1 x above 32 voxels), with onnxruntime when it is
installed, else onnx.reference.ReferenceEvaluator; the max abs difference is printed and must be at
most --tol. Errors end the script with exit status 1 and one line.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

INPUT_NAME = "input"
OUTPUT_NAME = "output"


class ExportError(Exception):
    pass


def quiet_exporter_logs():
    """The exporter's console chatter (e.g. 'torchvision is not installed') off; errors still show."""
    for name in ("torch.onnx", "torch.export", "torch._export", "torch.onnx._internal.exporter._registration",
                 "onnxscript"):
        logging.getLogger(name).setLevel(logging.ERROR)


def default_check_size(divisor):
    """Spatial size of the verification input: 2 blocks of the size divisor, one above 32 voxels
    (the OpenKBP baseline's 64) so the reference evaluator stays quick."""
    return 2 * divisor if 2 * divisor <= 32 else divisor


def parse_patch(text, divisor):
    try:
        parts = [int(p) for p in text.replace("x", ",").split(",") if p.strip()]
    except ValueError:
        raise ExportError(f"--patch '{text}': expected D,H,W (or one number)") from None
    if len(parts) == 1:
        parts *= 3
    if len(parts) != 3 or any(p <= 0 for p in parts):
        raise ExportError(f"--patch '{text}': expected three positive sizes D,H,W")
    if any(p % divisor for p in parts):
        raise ExportError(f"--patch {parts}: every size must divide by the network's size divisor {divisor}")
    return parts


def run_onnx(path, x):
    """Runs the ONNX model at `path` on the float32 tensor `x`; returns (output tensor, runtime name)."""
    import numpy as np
    import torch

    feed = x.detach().cpu().numpy().astype(np.float32)
    try:
        import onnxruntime as ort  # noqa: F401
    except ImportError:
        ort = None
    if ort is not None:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 2
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        name = sess.get_inputs()[0].name
        out = sess.run(None, {name: feed})[0]
        return torch.from_numpy(np.asarray(out)), f"onnxruntime {ort.__version__}"
    import onnx
    from onnx.reference import ReferenceEvaluator

    model = onnx.load(path)
    ref = ReferenceEvaluator(model)
    out = ref.run(None, {model.graph.input[0].name: feed})[0]
    return torch.from_numpy(np.asarray(out, dtype=np.float32)), "onnx.reference.ReferenceEvaluator"


def static_input_shape(path):
    """The ONNX model's input shape when every dimension is fixed, else None."""
    import onnx

    model = onnx.load(path, load_external_data=False)
    dims = model.graph.input[0].type.tensor_type.shape.dim
    shape = [d.dim_value if d.HasField("dim_value") else None for d in dims]
    return None if any(s is None for s in shape) else shape


def export(net, meta, out, patch, opset, static, legacy=False):
    import torch
    import onnx

    divisor = int(meta.get("size_divisor", 0)) or __import__("u3d_model").size_divisor(net)
    cin = int(meta["in_channels"])
    # torch.export specialises example sizes of 1: trace dynamic graphs on 2 blocks per axis.
    example = torch.randn(2 if not static else 1, cin, *([2 * divisor] * 3 if not static else patch))
    route = "dynamo"
    kwargs = {"input_names": [INPUT_NAME], "output_names": [OUTPUT_NAME]}
    if opset:
        kwargs["opset_version"] = opset
    try:
        if legacy:
            raise ExportError("--legacy given")
        from torch.export import Dim

        dyn = None
        if not static:
            dims = {0: Dim("batch", min=1, max=4096)}
            for axis, name in zip((2, 3, 4), ("depth", "height", "width")):
                dims[axis] = divisor * Dim(f"{name}_blocks", min=1, max=65536 // divisor)
            dyn = (dims,)
        torch.onnx.export(net, (example,), out, dynamo=True, dynamic_shapes=dyn, verbose=False,
                          external_data=False, **kwargs)
    except Exception as e:  # the dynamo route cannot take this network: the legacy exporter
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if legacy:
            print("note: using the deprecated TorchScript-based exporter (dynamo=False), as --legacy asks")
        else:
            print(f"note: torch.onnx.export(dynamo=True) failed ({type(e).__name__}: {first[:200]}); using the "
                  f"deprecated TorchScript-based exporter (dynamo=False)")
        route = "torchscript (deprecated)"
        axes = None
        if not static:
            names = {0: "batch", 2: "depth", 3: "height", 4: "width"}
            axes = {INPUT_NAME: names, OUTPUT_NAME: names}
        kwargs.setdefault("opset_version", 17)
        torch.onnx.export(net, (example,), out, dynamo=False, dynamic_axes=axes, **kwargs)
    model = onnx.load(out)
    del model.metadata_props[:]
    for key in sorted(meta):
        entry = model.metadata_props.add()
        entry.key, entry.value = str(key), str(meta[key])
    model.doc_string = (f"unet3d-trainer {meta.get('architecture', '')} ({meta.get('task', '')}): input "
                        f"(N, {cin}, D, H, W) float32 normalised as metadata 'config' data.normalize says, "
                        f"spatial sizes multiples of {divisor}")
    onnx.save(model, out)
    opsets = ",".join(f"{o.domain or 'ai.onnx'}:{o.version}" for o in model.opset_import)
    return route, opsets


def error_line(e):
    """An exception as one line: its type and the first line of its message (at most 500 characters)."""
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {msg[:500]}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="model.safetensors or model.pt written by `trainer export`")
    ap.add_argument("--out", help="ONNX file to write (default: model.onnx beside MODEL)")
    ap.add_argument("--patch", help="D,H,W of the verification input (and of the graph with --static); "
                                    "default 2 x size_divisor per axis, at most 32 unless the divisor is larger")
    ap.add_argument("--opset", type=int, default=None, help="ONNX opset (default: the exporter's)")
    ap.add_argument("--static", action="store_true", help="fixed input shape (1, C_in, patch) instead of dynamic")
    ap.add_argument("--legacy", action="store_true",
                    help="use the deprecated TorchScript-based exporter (dynamo=False) directly")
    ap.add_argument("--tol", type=float, default=1e-4, help="largest accepted |ONNX - PyTorch| (default 1e-4)")
    ap.add_argument("--no-verify", action="store_true", help="skip the run against PyTorch")
    args = ap.parse_args(argv)

    warnings.filterwarnings("ignore")
    try:
        import torch
        import onnx
        import u3d_model

        quiet_exporter_logs()

        torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
        if not os.path.isfile(args.model):
            raise ExportError(f"{args.model}: no such file")
        kind = u3d_model._file_kind(args.model)
        if kind == "jit":
            raise ExportError(f"{args.model}: a TorchScript file; give the export's model.safetensors or model.pt")
        if kind not in ("safetensors", "pickle"):
            raise ExportError(f"{args.model}: not a model.safetensors or model.pt of `trainer export`")
        try:
            net = u3d_model.load(args.model)
        except (ValueError, KeyError, RuntimeError) as e:
            raise ExportError(str(e).splitlines()[0]) from None
        meta = net.meta
        divisor = u3d_model.size_divisor(net)
        patch = parse_patch(args.patch, divisor) if args.patch else [default_check_size(divisor)] * 3
        out = args.out or os.path.join(os.path.dirname(os.path.abspath(args.model)), "model.onnx")
        if os.path.dirname(os.path.abspath(out)) and not os.path.isdir(os.path.dirname(os.path.abspath(out))):
            raise ExportError(f"--out {out}: folder does not exist")
        route, opsets = export(net, meta, out, patch, args.opset, args.static, args.legacy)
        onnx.checker.check_model(out)
        print(f"wrote {out} ({os.path.getsize(out) / 1e6:.1f} MB; {meta.get('architecture')}, "
              f"{meta.get('task')}; exporter {route}; opset {opsets}; "
              f"{'static' if args.static else 'dynamic batch and spatial'} shapes)")
        print("ok onnx.checker")
        got_opset = next((o.version for o in onnx.load(out, load_external_data=False).opset_import
                          if o.domain in ("", "ai.onnx")), None)
        if args.opset and got_opset != args.opset:
            print(f"note: opset {got_opset} written, not the {args.opset} asked for (the dynamo exporter's "
                  f"lowest; --legacy exports older opsets)")
        if not args.no_verify:
            g = torch.Generator().manual_seed(0)
            x = torch.randn(1, int(meta["in_channels"]), *patch, generator=g)
            with torch.no_grad():
                ref = net(x)
            got, runtime = run_onnx(out, x)
            if tuple(got.shape) != tuple(ref.shape):
                raise ExportError(f"ONNX output shape {tuple(got.shape)} != PyTorch {tuple(ref.shape)}")
            diff = (got - ref).abs().max().item()
            print(f"{'ok' if diff <= args.tol else 'FAIL'} ONNX ({runtime}) vs PyTorch on 1x{x.shape[1]}x"
                  f"{'x'.join(map(str, patch))}: max abs diff {diff:.3g}")
            if not diff <= args.tol:
                raise ExportError(f"ONNX output differs from PyTorch by {diff:.3g} (> --tol {args.tol:g})")
    except ExportError as e:
        print(f"export_onnx: error: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # one line, not a traceback
        print(f"export_onnx: error: {error_line(e)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

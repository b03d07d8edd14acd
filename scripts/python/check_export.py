#!/usr/bin/env python3
"""Verify the files `trainer export` wrote: python check_export.py EXPORT_DIR [--input FILE.pt]

For each of model.safetensors, model.pt, model.ts and model.onnx present in EXPORT_DIR:
  model.safetensors  read with the safetensors package (safetensors.torch.load_file), its metadata
                     checked (format u3d-model, format_version 1, task, architecture, channels, ...),
                     the same tensors and metadata read by u3d_model's built-in reader, and loaded
                     into the u3d_model network (names and shapes must match exactly);
  model.pt           torch.load(path, weights_only=True); {"state_dict", "config", "meta"}; tensors,
                     meta and config identical to model.safetensors';
  model.ts           torch.jit.load with its meta.json (identical to the others' metadata); its
                     forward on a seeded random float32 input (1 x C_in x S^3, S = 2 x size_divisor,
                     or the divisor above 32 voxels) compared with the u3d_model network's: max abs
                     difference <= 1e-5, and once more on a batch of 2 of another shape;
  model.onnx         onnx.checker, its metadata_props, and its output on the same input against the
                     u3d_model network's (<= 1e-4; onnxruntime when installed, else
                     onnx.reference.ReferenceEvaluator).
--input FILE.pt: a tensor (N, C_in, D, H, W) or (C_in, D, H, W), or a dict {"input": ..., "output":
...} saved with torch.save, used instead of the random input; a given "output" (e.g. the C++
network's) must match the u3d_model output within 1e-5 too.

One line per check ("ok ..."); the first failure ends it with exit status 1 and one line.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

REQUIRED_META = ("format", "format_version", "task", "architecture", "in_channels", "out_channels", "model",
                 "config", "channels", "labels", "patch_size", "size_divisor")
TS_TOL = 1e-5
ONNX_TOL = 1e-4


class CheckError(Exception):
    pass


def ok(text):
    print(f"ok {text}", flush=True)


def dtype_summary(state):
    counts = {}
    for t in state.values():
        name = str(t.dtype).replace("torch.", "")
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))


def same_state(a, b, what):
    if set(a) != set(b):
        only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
        raise CheckError(f"{what}: different tensor names (only in the first: {only_a[:3]}, only in the second: "
                         f"{only_b[:3]})")
    for k in a:
        x, y = a[k], b[k]
        if x.dtype != y.dtype or tuple(x.shape) != tuple(y.shape):
            raise CheckError(f"{what}: {k} is {x.dtype} {tuple(x.shape)} vs {y.dtype} {tuple(y.shape)}")
        if not torch.equal(x.cpu(), y.cpu()):
            raise CheckError(f"{what}: {k} differs (max abs diff {(x.double() - y.double()).abs().max().item():.3g})")


def check_meta(meta, where):
    if not isinstance(meta, dict):
        raise CheckError(f"{where}: metadata is not a dict")
    missing = [k for k in REQUIRED_META if k not in meta]
    if missing:
        raise CheckError(f"{where}: metadata lacks {', '.join(missing)}")
    bad = [k for k, v in meta.items() if not isinstance(v, str)]
    if bad:
        raise CheckError(f"{where}: metadata values must be strings; {', '.join(bad[:3])} are not")
    if meta["format"] != "u3d-model":
        raise CheckError(f"{where}: metadata format '{meta['format']}', expected 'u3d-model'")
    if meta["format_version"] != "1":
        raise CheckError(f"{where}: format_version '{meta['format_version']}', expected '1'")
    if meta["task"] not in ("dose", "segmentation"):
        raise CheckError(f"{where}: task '{meta['task']}' is not dose or segmentation")
    try:
        info = u3d_model.decoded_meta(meta)
        cfg = u3d_model.model_config(meta)
        cin, cout, div = int(meta["in_channels"]), int(meta["out_channels"]), int(meta["size_divisor"])
    except (ValueError, TypeError) as e:
        raise CheckError(f"{where}: metadata does not parse: {e}") from None
    if cfg["architecture"] != meta["architecture"]:
        raise CheckError(f"{where}: architecture '{meta['architecture']}' but model.architecture "
                         f"'{cfg['architecture']}'")
    expected_div = 64 if cfg["architecture"] == "openkbp_baseline" else 1 << (cfg["levels"] - 1)
    if div != expected_div:
        raise CheckError(f"{where}: size_divisor {div}, the network's is {expected_div}")
    # [] when the exporter could not read the run's dataset any more (names unknown).
    if not isinstance(info["channels"], list) or len(info["channels"]) not in (0, cin):
        raise CheckError(f"{where}: channels {meta['channels']} do not list in_channels {cin} names")
    if not isinstance(info["labels"], list) or (meta["task"] == "segmentation" and len(info["labels"]) not in (0, cout)):
        raise CheckError(f"{where}: labels {meta['labels']} do not list out_channels {cout} classes")
    if "normalize" in meta:
        nz = info["normalize"]
        if not (isinstance(nz, list) and len(nz) in (1, cin) and all(isinstance(n, str) for n in nz)):
            raise CheckError(f"{where}: normalize {meta['normalize']} is not 1 or {cin} strings")
    ps = info["patch_size"]
    if not (isinstance(ps, list) and len(ps) == 3 and all(isinstance(p, int) and p % div == 0 for p in ps)):
        raise CheckError(f"{where}: patch_size {meta['patch_size']} is not 3 sizes dividing by {div}")
    return info


def required_module(name, missing):
    """The module `name`, imported; CheckError(missing) when it is not installed."""
    try:
        return importlib.import_module(name)
    except ImportError:
        raise CheckError(missing) from None


def compare(name, got, ref, tol):
    if not isinstance(got, torch.Tensor):
        raise CheckError(f"{name}: the output is a {type(got).__name__}, expected one tensor")
    if tuple(got.shape) != tuple(ref.shape):
        raise CheckError(f"{name}: output shape {tuple(got.shape)}, expected {tuple(ref.shape)}")
    if not torch.isfinite(got).all():
        raise CheckError(f"{name}: output has NaN/Inf")
    diff = (got.double() - ref.double()).abs().max().item()
    if not diff <= tol:
        raise CheckError(f"{name}: max abs diff {diff:.3g} > {tol:g}")
    ok(f"{name}: max abs diff {diff:.3g}")


def run(args):
    folder = args.export_dir
    if not os.path.isdir(folder):
        raise CheckError(f"{folder}: no such folder")
    paths = {k: os.path.join(folder, f"model.{k}") for k in ("safetensors", "pt", "ts", "onnx")}
    present = {k for k, p in paths.items() if os.path.isfile(p)}
    if not present & {"safetensors", "pt", "ts"}:
        raise CheckError(f"{folder}: no model.safetensors, model.pt or model.ts")

    meta = state = None
    net = None
    if "safetensors" in present:
        p = paths["safetensors"]
        missing = "the safetensors package is not installed (pip install safetensors)"
        safe_open = required_module("safetensors", missing).safe_open
        load_file = required_module("safetensors.torch", missing).load_file
        try:
            state = load_file(p)
            with safe_open(p, framework="pt") as f:
                meta = dict(f.metadata() or {})
        except Exception as e:
            raise CheckError(f"{p}: safetensors cannot read it: {e}") from None
        info = check_meta(meta, p)
        for k, t in state.items():
            if t.is_floating_point() and t.dtype != torch.float32:
                raise CheckError(f"{p}: {k} is {t.dtype}, expected float32")
        ok(f"safetensors: {len(state)} tensors ({dtype_summary(state)}), format u3d-model v1, task {meta['task']}, "
           f"architecture {meta['architecture']}, {meta['in_channels']} -> {meta['out_channels']} channels")
        own_state, own_meta = u3d_model.read_safetensors(p, use_package=False)
        same_state(own_state, state, "u3d_model's built-in safetensors reader vs the safetensors package")
        if own_meta != meta:
            raise CheckError("u3d_model's built-in safetensors reader: metadata differs from the package's")
        ok("safetensors built-in reader: tensors and metadata identical to the safetensors package's")
        try:
            net = u3d_model.load(p)
        except Exception as e:
            raise CheckError(f"u3d_model.load({os.path.basename(p)}): {str(e).splitlines()[0]}") from None
        ok(f"u3d_model.load(model.safetensors): {type(net).__name__} ({meta['architecture']}), "
           f"{len(net.state_dict())} tensors, names and shapes match")

    if "pt" in present:
        p = paths["pt"]
        try:
            obj = torch.load(p, weights_only=True)
        except Exception as e:
            raise CheckError(f"{p}: torch.load(weights_only=True) fails: {str(e).splitlines()[0]}") from None
        if not isinstance(obj, dict) or not {"state_dict", "config", "meta"} <= set(obj):
            raise CheckError(f"{p}: expected a dict with state_dict, config and meta")
        pt_state, pt_meta = obj["state_dict"], obj["meta"]
        if not isinstance(pt_state, dict) or not all(isinstance(t, torch.Tensor) for t in pt_state.values()):
            raise CheckError(f"{p}: state_dict is not a dict of tensors")
        check_meta(pt_meta, p)
        if obj["config"] != pt_meta["config"]:
            raise CheckError(f"{p}: config differs from meta['config']")
        if meta is not None:
            same_state(state, pt_state, "model.safetensors vs model.pt")
            if dict(pt_meta) != meta:
                diff = sorted(k for k in set(meta) | set(pt_meta) if meta.get(k) != pt_meta.get(k))
                raise CheckError(f"model.pt meta differs from model.safetensors metadata in {', '.join(diff[:5])}")
            ok(f"pt: {len(pt_state)} tensors, meta and config identical to model.safetensors'")
        else:
            meta, state = dict(pt_meta), pt_state
            ok(f"pt: {len(pt_state)} tensors ({dtype_summary(pt_state)}), task {meta['task']}, "
               f"architecture {meta['architecture']}")
        try:
            pt_net = u3d_model.load(p)
        except Exception as e:
            raise CheckError(f"u3d_model.load(model.pt): {str(e).splitlines()[0]}") from None
        ok(f"u3d_model.load(model.pt): {len(pt_net.state_dict())} tensors, names and shapes match")
        if net is None:
            net = pt_net

    ts = None
    if "ts" in present:
        p = paths["ts"]
        extra = {"meta.json": ""}
        try:
            ts = torch.jit.load(p, map_location="cpu", _extra_files=extra)
        except Exception as e:
            raise CheckError(f"{p}: torch.jit.load fails: {str(e).splitlines()[0]}") from None
        if not extra["meta.json"]:
            raise CheckError(f"{p}: no meta.json extra file")
        try:
            ts_meta = json.loads(extra["meta.json"])
        except ValueError as e:
            raise CheckError(f"{p}: meta.json is not JSON: {e}") from None
        check_meta(ts_meta, f"{p} (meta.json)")
        if meta is not None and ts_meta != meta:
            diff = sorted(k for k in set(meta) | set(ts_meta) if meta.get(k) != ts_meta.get(k))
            raise CheckError(f"model.ts meta.json differs from the other files' metadata in {', '.join(diff[:5])}")
        tail = " identical to the other files' metadata" if meta is not None else ""
        ok(f"ts: torch.jit.load with meta.json{tail}")
        if meta is None:
            meta = ts_meta
        ts.eval()

    if net is None:  # model.ts alone: the reference network from its meta, weights from the module
        net = u3d_model.build(meta)
        ts_state = {k: v.detach() for k, v in list(ts.named_parameters()) + list(ts.named_buffers())}
        if not ts_state:  # weights folded into the graph: nothing to build a reference from
            s = export_onnx.default_check_size(int(meta["size_divisor"]))
            x = torch.randn(1, int(meta["in_channels"]), s, s, s, generator=torch.Generator().manual_seed(0))
            with torch.no_grad():
                y = ts(x)
            want = (1, int(meta["out_channels"]), s, s, s)
            if not isinstance(y, torch.Tensor) or tuple(y.shape) != want or not torch.isfinite(y).all():
                raise CheckError(f"model.ts: forward on {tuple(x.shape)} does not give a finite {want} tensor")
            ok(f"forward model.ts on {'x'.join(map(str, x.shape))}: {'x'.join(map(str, y.shape))} (no parameters "
               f"in the module and no model.safetensors/model.pt: not compared)")
            return
        try:
            u3d_model._load_state(net, ts_state, paths["ts"])
        except Exception as e:
            raise CheckError(f"model.ts: its weights do not fit the u3d_model network: {str(e)[:200]}") from None
        ok(f"u3d_model network from model.ts's meta and weights: {len(ts_state)} tensors")
    net.eval()

    cin, divisor = int(meta["in_channels"]), int(meta["size_divisor"])
    expected = None
    if args.input:
        try:
            given = torch.load(args.input, weights_only=True)
        except Exception as e:
            raise CheckError(f"--input {args.input}: {str(e).splitlines()[0]}") from None
        if isinstance(given, dict):
            if "input" not in given:
                raise CheckError(f"--input {args.input}: a dict needs an 'input' tensor")
            x, expected = given["input"], given.get("output")
        else:
            x = given
        if not isinstance(x, torch.Tensor):
            raise CheckError(f"--input {args.input}: not a tensor")
        x = x.float()
        if x.dim() == 4:
            x = x.unsqueeze(0)
            if expected is not None and expected.dim() == 4:
                expected = expected.unsqueeze(0)
        if x.dim() != 5 or x.shape[1] != cin:
            raise CheckError(f"--input: shape {tuple(x.shape)}, expected (N, {cin}, D, H, W)")
        if any(s % divisor for s in x.shape[2:]):
            raise CheckError(f"--input: spatial shape {tuple(x.shape[2:])} does not divide by {divisor}")
        source = f"--input {os.path.basename(args.input)}"
    else:
        s = export_onnx.default_check_size(divisor)
        x = torch.randn(1, cin, s, s, s, generator=torch.Generator().manual_seed(0))
        source = "seeded random input"
    shape_text = "x".join(map(str, x.shape))
    with torch.no_grad():
        ref = net(x)
    ok(f"forward u3d_model on {source} {shape_text}: output {'x'.join(map(str, ref.shape))}")
    if expected is not None:
        compare("forward u3d_model vs --input's output", ref, expected.float(), TS_TOL)

    if ts is not None:
        with torch.no_grad():
            got = ts(x)
        compare("forward model.ts vs u3d_model", got, ref, TS_TOL)
        # Another batch size and shape: a trace must not have kept the example's sizes.
        s2 = list(x.shape[2:])
        s2[2] += divisor
        x2 = torch.randn(2, cin, *s2, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            compare(f"forward model.ts vs u3d_model on {'x'.join(map(str, x2.shape))}", ts(x2), net(x2), TS_TOL)

    if "onnx" in present:
        p = paths["onnx"]
        onnx = required_module("onnx", "model.onnx present but the onnx package is not installed")
        try:
            onnx.checker.check_model(p)
        except Exception as e:
            raise CheckError(f"{p}: onnx.checker: {str(e).splitlines()[0]}") from None
        props = {e.key: e.value for e in onnx.load(p, load_external_data=False).metadata_props}
        if props and props != meta:
            diff = sorted(k for k in set(meta) | set(props) if meta.get(k) != props.get(k))
            raise CheckError(f"model.onnx metadata_props differ from the export's metadata in {', '.join(diff[:5])}")
        tail = ", metadata_props identical to the export's metadata" if props else ", no metadata_props"
        ok(f"onnx.checker model.onnx{tail}")
        xo, ro = x, ref
        static = export_onnx.static_input_shape(p)
        if static is not None and list(static) != list(x.shape):
            xo = torch.randn(*static, generator=torch.Generator().manual_seed(0))
            with torch.no_grad():
                ro = net(xo)
        try:
            got, runtime = export_onnx.run_onnx(p, xo)
        except Exception as e:
            raise CheckError(f"model.onnx does not run: {type(e).__name__}: {str(e).splitlines()[0][:300]}") from None
        compare(f"forward model.onnx ({runtime}) vs u3d_model on {'x'.join(map(str, xo.shape))}", got, ro, ONNX_TOL)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("export_dir", help="folder written by `trainer export`")
    ap.add_argument("--input", help="torch.save'd input tensor, or {'input': ..., 'output': ...}")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    global torch, u3d_model, export_onnx
    try:
        import torch
        import u3d_model
        import export_onnx

        torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
        run(args)
    except CheckError as e:
        print(f"check_export: FAIL: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # one line, not a traceback
        line = export_onnx.error_line(e) if "export_onnx" in globals() else f"{type(e).__name__}: {e}"
        print(f"check_export: FAIL: {line}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The trainer's networks and training step in PyTorch, for a side-by-side with `trainer --benchmark`
on the same GPU (scripts/bench/compare.py).

--arch openkbp (default): the same network as model.architecture: openkbp_baseline (the challenge's
provided U-Net), same step: MAE loss without a mask (run the trainer with training.loss=l1 to
match), AdamW (fused), bf16 autocast, channels_last_3d, cudnn.benchmark.
The networks are scripts/python/u3d_model's (the C++ module names; build() below).
--arch unet: model.architecture: unet as src/model/unet.cpp builds it (the nnU-Net-like network of
configs/segmentation_nnunet_like.yaml by default: --levels/--base-filters/... mirror the model.*
keys), with the trainer's segmentation step: deep supervision (weights 1/2^i, the coarsest 0,
labels down-sampled by strided slicing), Dice + cross-entropy in float32 outside autocast (as
src/train/losses.cpp), gradient clipping, SGD with Nesterov momentum (fused). Random labels of
--out-channels classes. Variants: eager and torch.compile. Prints a line and
one JSON line per variant with the keys that `trainer --benchmark` prints ({"benchmark": "step",
"tool": "pytorch-eager", "step_ms_median": ..., "flops_per_step": ...}), so scripts/bench/compare.py
can put the two side by side. FLOPs are counted by forward hooks with the rule the trainer's
count_conv_flops() uses (2 x multiply-adds of every convolution; training = 3 x forward).
PyTorch is a benchmark here, never a dependency of the trainer.

    python3 scripts/bench/pytorch_step.py --filters 64 --batch 2 --size 128 --steps 50 --warmup 10
    python3 scripts/bench/pytorch_step.py --device cpu --filters 4 --size 32 --steps 3   # smoke test
    python3 scripts/bench/pytorch_step.py --arch unet --out-channels 4 --size 128 --batch 2   # nnU-Net-like
    python3 scripts/bench/pytorch_step.py --arch unet --params-only --levels 4 --base-filters 4 --max-filters 12
    python3 scripts/bench/pytorch_step.py --arch mlperf_unet3d --size 128 --batch 2   # the MLPerf 3D U-Net
    python3 scripts/bench/pytorch_step.py --arch unet --dims 2 --levels 5 --max-filters 512 --norm batch \
        --activation relu --deep-supervision 0 --out-channels 1 --loss bce_dice --optimizer adamw --lr 1e-3 \
        --weight-decay 1e-4 --grad-clip-norm 0 --size 256 --batch 16   # the slice user's 2D U-Net (unet2d)

--arch resenc: model.architecture resenc_unet (nnU-Net's residual-encoder U-Net) with the unet step;
--blocks-per-level as model.blocks_per_level (default nnU-Net's 1, 3, 4, 6, 6, 6, ...).
--arch mlperf_unet3d: the MLPerf Training 3D U-Net (model.preset mlperf_unet3d), u3d_model's
MlperfUNet3d (the reference's layers and names) with the unet step
above and the MLPerf recipe's defaults (3 classes, no deep supervision, SGD lr 0.8, momentum 0.9,
no weight decay, no clipping); --levels/--base-filters/--max-filters/--kernel-size/--norm apply.
"""
import json
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from bench_args import Parser  # one line and exit 2 for a bad argument, beside this file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import u3d_model  # noqa: E402  (scripts/python/u3d_model: the one PyTorch copy of the trainer's networks)


def soft_dice_loss(logits, labels, smooth=1e-5):
    """losses.cpp soft_dice_loss: 1 - mean over foreground classes 1..K-1 of the per-(sample, class)
    soft Dice of softmax(logits) and the one-hot labels."""
    k = logits.shape[1]
    probs = torch.softmax(logits.float(), dim=1)
    onehot = F.one_hot(labels, k).movedim(-1, 1).float()
    spatial = tuple(range(2, logits.dim()))
    inter = (probs * onehot).sum(spatial)
    denom = probs.sum(spatial) + onehot.sum(spatial)
    dice = (2.0 * inter + smooth) / (denom + smooth)
    return 1.0 - dice[:, 1:].mean()


def dice_ce_loss(logits, labels):
    return F.cross_entropy(logits.float(), labels) + soft_dice_loss(logits, labels)


def bce_dice_loss(logits, labels, smooth=1e-5):
    """--loss bce_dice (model.head sigmoid, the slice user's BCE + Dice): channel k - 1 is label k
    (one channel for two classes); BCE with logits plus 1 - the mean per-(sample, channel) soft
    Dice of sigmoid(logits) and those one-hot targets."""
    c = logits.shape[1]
    target = F.one_hot(labels, c + 1).movedim(-1, 1)[:, 1:].float()
    logits = logits.float()
    probs = torch.sigmoid(logits)
    spatial = tuple(range(2, logits.dim()))
    dice = (2.0 * (probs * target).sum(spatial) + smooth) / (probs.sum(spatial) + target.sum(spatial) + smooth)
    return F.binary_cross_entropy_with_logits(logits, target) + 1.0 - dice.mean()


def deep_supervision_weights(n):
    w = [1.0 / (1 << i) for i in range(n)]
    if n >= 2:
        w[-1] = 0.0
    s = sum(w)
    return [v / s for v in w]


def deep_supervision_loss(outs, labels, weights):
    total = None
    for o, w in zip(outs, weights):
        if w == 0:
            continue
        lab = labels
        nd = o.dim() - 2  # spatial axes: 3, or 2 (--dims 2)
        for a in range(nd):  # downsample_labels(): every f-th voxel from f / 2
            f = labels.shape[-nd + a] // o.shape[2 + a]
            if f > 1:
                idx = [slice(None)] * lab.dim()
                idx[lab.dim() - nd + a] = slice(f // 2, None, f)
                lab = lab[tuple(idx)]
        term = dice_ce_loss(o, lab.contiguous()) * w
        total = term if total is None else total + term
    return total


MLPERF_DEFAULTS = {"out_channels": 3, "deep_supervision": 0, "lr": 0.8, "momentum": 0.9, "weight_decay": 0.0,
                   "grad_clip_norm": 0.0}  # configs/mlperf_unet3d.yaml, unless given on the command line


def in_channels(args):
    """The network's input channels: --in-channels, or 11 (openkbp) / 1 (the others) when it is 0."""
    return args.in_channels or (11 if args.arch == "openkbp" else 1)


ARCHITECTURES = {"unet": "unet", "resenc": "resenc_unet", "openkbp": "openkbp_baseline",
                 "mlperf_unet3d": "mlperf_unet3d"}


def model_keys(args):
    """The model.* keys of the network --arch and the options describe (u3d_model's config)."""
    if args.arch == "openkbp":
        return {"architecture": "openkbp_baseline", "base_filters": args.filters}
    cfg = {"architecture": ARCHITECTURES[args.arch], "levels": args.levels, "base_filters": args.base_filters,
           "max_filters": args.max_filters, "kernel_size": args.kernel_size, "norm": args.norm}
    if args.arch == "mlperf_unet3d":
        return dict(cfg, activation="relu")
    blocks = [int(b) for b in args.blocks_per_level.split(",")] if args.blocks_per_level else []
    # (D, H, W) triples; --dims 2 takes (H, W) pairs (compare.py drops the slice axis): 1 on D
    stages = lambda lst: [(1,) + t if len(t) == 2 else t for t in lst or []]
    return dict(cfg, dims=args.dims, convs_per_level=args.convs_per_level, blocks_per_level=blocks,
                kernel_sizes=stages(args.kernel_list), strides=stages(args.stride_list), activation=args.activation,
                negative_slope=args.negative_slope, dropout=args.dropout,
                deep_supervision=bool(args.deep_supervision), activation_checkpointing=args.checkpointing)


def build(args):
    """The trainer's network for --arch and the options (scripts/python/u3d_model: the C++ module names,
    initialised as the C++ constructors do), in training mode."""
    out = 1 if args.arch == "openkbp" else args.out_channels
    return u3d_model.build(model_keys(args), in_channels(args), out).train()


def conv_flops(model, x):
    """FLOPs of one forward pass (2 * multiply-adds of every convolution), by hooks."""
    total = 0

    def hook(mod, inp, out):
        nonlocal total
        k = mod.weight[0, 0].numel()  # the kernel's voxels (3D) or pixels (2D)
        if isinstance(mod, (nn.ConvTranspose3d, nn.ConvTranspose2d)):  # weight (C_in, C_out, k...): every input
            total += 2 * inp[0].numel() * mod.weight.shape[1] * k
        else:  # weight (C_out, C_in, k...): every output voxel
            total += 2 * out.numel() * mod.weight.shape[1] * k
    convs = (nn.Conv3d, nn.ConvTranspose3d, nn.Conv2d, nn.ConvTranspose2d)
    hs = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, convs)]
    was_training = model.training
    model.eval()  # as forward_flops(): batch-norm statistics untouched, 1-voxel instance norms allowed
    with torch.no_grad():
        model(x)
    model.train(was_training)
    for h in hs:
        h.remove()
    return total


def make_step(variant, args):
    """(step, model, flops of one forward pass) for one variant ("eager" or "compile"): step() runs one
    training step on a fixed batch and returns its loss; cuDNN autotuning is on, nothing has run yet."""
    dev = torch.device(args.device)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True
    model = build(args).to(dev)
    nd = args.dims  # spatial axes
    mf = (torch.channels_last_3d if nd == 3 else torch.channels_last) if args.channels_last else torch.contiguous_format
    model = model.to(memory_format=mf)
    shape = (args.batch, in_channels(args)) + args.shape
    x = torch.rand(shape, device=dev).to(memory_format=mf)
    flops_fwd = conv_flops(model, x)
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}[args.precision]
    fused = dev.type == "cuda"

    if args.arch == "openkbp":
        opt = torch.optim.AdamW(model.parameters(), lr=2e-4, betas=(0.5, 0.999), fused=fused)
        y = torch.rand((args.batch, 1) + args.shape, device=dev).to(memory_format=mf)

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast(dev.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                loss = (model(x) - y).abs().mean()
            loss.backward()
            opt.step()
            return loss
    else:
        # configs/segmentation_nnunet_like.yaml's training: SGD, Nesterov momentum, weight decay, clip;
        # or AdamW (--optimizer adamw: configs/slices_2d.yaml)
        if args.optimizer == "adamw":
            opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay, fused=fused)
        else:
            opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                                  nesterov=bool(args.nesterov), weight_decay=args.weight_decay, fused=fused)
        classes = args.out_channels + 1 if args.loss == "bce_dice" else args.out_channels
        labels = torch.randint(0, classes, (args.batch,) + args.shape, device=dev)
        seg_loss = bce_dice_loss if args.loss == "bce_dice" else dice_ce_loss
        weights = None

        def step():
            nonlocal weights
            opt.zero_grad(set_to_none=True)
            total = 0.0
            for _ in range(args.accumulate):  # training.accumulate_steps: the same batch each time
                with torch.autocast(dev.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                    outs = model.forward_deep(x) if args.deep_supervision else [model(x)]
                outs = [o.float() for o in outs]  # the loss in float32, outside autocast
                if args.deep_supervision:
                    weights = weights or deep_supervision_weights(len(outs))
                    loss = deep_supervision_loss(outs, labels, weights)
                else:
                    loss = seg_loss(outs[0], labels)
                loss = loss / args.accumulate if args.accumulate > 1 else loss
                loss.backward()
                total = total + loss.detach()
            loss = total
            if args.grad_clip_norm > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip_norm, foreach=True)
            opt.step()
            return loss

    return (torch.compile(step) if variant == "compile" else step), model, flops_fwd


def run(variant, args):
    dev = torch.device(args.device)
    fn, model, flops_fwd = make_step(variant, args)
    nd = args.dims
    for _ in range(args.warmup):
        fn()
    sync = (lambda: torch.cuda.synchronize()) if dev.type == "cuda" else (lambda: None)
    sync()
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    med = statistics.median(times)
    q = lambda p: times[min(len(times) - 1, int(p * len(times)))]
    flops_step = 3 * flops_fwd * args.accumulate  # forward + backward (2x forward); recomputation not counted
    return {
        "benchmark": "step", "tool": f"pytorch-{variant}", "torch": torch.__version__, "device": str(dev),
        "gpu": torch.cuda.get_device_name(0) if dev.type == "cuda" else None,
        "precision": args.precision, "channels_last": args.channels_last, "batch": args.batch,
        "patch": list(args.shape) if nd == 3 else [1] + list(args.shape), "dims": nd,
        "architecture": ARCHITECTURES[args.arch],
        "accumulate_steps": args.accumulate, "activation_checkpointing": args.checkpointing,
        "filters": args.filters if args.arch == "openkbp" else args.base_filters, "in_channels": in_channels(args),
        "out_channels": 1 if args.arch == "openkbp" else args.out_channels, "steps": args.steps,
        "step_ms_median": med, "step_ms_p10": q(0.1), "step_ms_p90": q(0.9),
        "samples_per_s": args.batch * args.accumulate * 1e3 / med,
        "peak_gpu_mem_bytes": torch.cuda.max_memory_reserved() if dev.type == "cuda" else None,
        "peak_gpu_reserved_bytes": torch.cuda.max_memory_reserved() if dev.type == "cuda" else None,
        "peak_gpu_allocated_bytes": torch.cuda.max_memory_allocated() if dev.type == "cuda" else None,
        "flops_per_step": flops_step, "tflops": flops_step / (med * 1e-3) / 1e12,
        "parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
    }


def make_parser():  # also parses torch_side.py's requests, in its one process; profile_step.py adds --top
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--filters", type=int, default=64)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--size", default="128",
                   help="patch edge, or D,H,W (model.dims 2: H,W) for a patch that is not a cube")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="bf16")
    p.add_argument("--threads", type=int, default=0,
                   help="intra-op CPU threads (torch.set_num_threads; the trainer's training.threads); 0: torch's default")
    p.add_argument("--no-channels-last", dest="channels_last", action="store_false")
    p.add_argument("--variants", default="eager,compile")
    p.add_argument("--arch", choices=["openkbp", "unet", "resenc", "mlperf_unet3d"], default="openkbp",
                   help="openkbp: the OpenKBP baseline (--filters); unet: model.architecture unet (below); "
                        "resenc: nnU-Net's residual-encoder U-Net (model.architecture resenc_unet); "
                        "mlperf_unet3d: the MLPerf 3D U-Net (model.preset mlperf_unet3d)")
    p.add_argument("--in-channels", type=int, default=0, help="0: 11 (openkbp) or 1 (unet)")
    g = p.add_argument_group("--arch unet: the model.* and training.* keys (defaults: "
                             "configs/segmentation_nnunet_like.yaml)")
    g.add_argument("--out-channels", type=int, default=4, help="classes (background included)")
    g.add_argument("--levels", type=int, default=6)
    g.add_argument("--base-filters", type=int, default=32)
    g.add_argument("--max-filters", type=int, default=320)
    g.add_argument("--convs-per-level", type=int, default=2)
    g.add_argument("--kernel-size", type=int, default=3)
    g.add_argument("--kernel-sizes", default="",
                   help="--arch unet: model.kernel_sizes, one D,H,W triple per stage separated by ';' "
                        "(e.g. 1,3,3;3,3,3); empty: --kernel-size everywhere")
    g.add_argument("--strides", default="",
                   help="--arch unet: model.strides per stage as --kernel-sizes (e.g. 1,1,1;1,2,2); empty: 1, 2, 2, ...")
    g.add_argument("--norm", choices=["instance", "batch", "none"], default="instance")
    g.add_argument("--activation", choices=["leaky_relu", "relu"], default="leaky_relu")
    g.add_argument("--dims", type=int, choices=[2, 3], default=3,
                   help="model.dims: 2 is the 2D U-Net on slices, (batch, C, size, size) inputs")
    g.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd")
    g.add_argument("--loss", choices=["dice_ce", "bce_dice"], default="dice_ce",
                   help="bce_dice: sigmoid outputs (model.head sigmoid: --out-channels = classes - 1), BCE + Dice")
    g.add_argument("--negative-slope", type=float, default=0.01)
    g.add_argument("--dropout", type=float, default=0.0)
    g.add_argument("--deep-supervision", type=int, choices=[0, 1], default=1)
    g.add_argument("--lr", type=float, default=0.01)
    g.add_argument("--momentum", type=float, default=0.99)
    g.add_argument("--nesterov", type=int, choices=[0, 1], default=1)
    g.add_argument("--weight-decay", type=float, default=3e-5)
    g.add_argument("--grad-clip-norm", type=float, default=12.0)
    g.add_argument("--blocks-per-level", default="", help="resenc: residual blocks per level, e.g. 1,3,4,6,6,6 "
                   "(default: nnU-Net's)")
    g.add_argument("--checkpointing", choices=["off", "encoder", "all"], default="off",
                   help="model.activation_checkpointing: torch.utils.checkpoint on the encoder (and decoder) stages")
    g.add_argument("--accumulate", type=int, default=1, help="training.accumulate_steps: micro-batches per step")
    p.add_argument("--params-only", action="store_true",
                   help="print {\"benchmark\": \"params\", \"parameters\": N, ...} for the network and stop")
    return p


def parse_args(argv=None, parser=None):
    """(parser or make_parser()).parse_args(argv), with the MLPerf recipe's defaults for what argv leaves out."""
    argv = __import__("sys").argv[1:] if argv is None else list(argv)
    p = parser or make_parser()
    args = p.parse_args(argv)
    for name, low in (("batch", 1), ("steps", 1), ("warmup", 0), ("filters", 1), ("threads", 0),
                      ("in_channels", 0), ("out_channels", 1), ("levels", 1), ("base_filters", 1),
                      ("max_filters", 1), ("convs_per_level", 1), ("kernel_size", 1), ("accumulate", 1),
                      ("top", 1)):
        if hasattr(args, name):
            p.at_least(args, name, low)
    try:
        device = torch.device(args.device)
    except RuntimeError:
        p.error(f"--device {args.device}: expected cpu, cuda or cuda:N")
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error(f"--device {args.device}: no CUDA device here (torch.cuda.is_available() is False); use --device cpu")

    def whole(text, flag, what):  # positive whole numbers separated by ','
        try:
            values = [int(v) for v in str(text).split(",")]
        except ValueError:
            values = []
        if not values or min(values) < 1:
            p.error(f"{flag} {text}: expected {what}")
        return values

    size = whole(args.size, "--size", "a positive whole number or D,H,W of them")
    args.shape = tuple(size * args.dims if len(size) == 1 else size)  # the patch's spatial axes
    if len(args.shape) != args.dims:
        p.error(f"--size {args.size}: expected one edge or {args.dims} of them (--dims {args.dims})")
    stages = lambda text, flag: [tuple(whole(t, flag, "D,H,W triples of positive whole numbers separated by ';'"))
                                 for t in text.split(";")] if text else None
    args.kernel_list, args.stride_list = stages(args.kernel_sizes, "--kernel-sizes"), stages(args.strides, "--strides")
    if (args.kernel_list or args.stride_list) and args.arch != "unet":
        p.error("--kernel-sizes / --strides: --arch unet only")
    if any(lst and len(lst) != args.levels for lst in (args.kernel_list, args.stride_list)):
        p.error(f"--kernel-sizes/--strides: expected {args.levels} stages (--levels)")
    if args.arch == "mlperf_unet3d":
        given = {a.split("=", 1)[0].lstrip("-").replace("-", "_") for a in argv if a.startswith("--")}
        for key, value in MLPERF_DEFAULTS.items():
            if key not in given:
                setattr(args, key, value)
    return args


def run_script(script, parser, fn, errors=(RuntimeError,)):
    """A measuring script's main (conv_floor.py, norm_bench.py): parse with `parser`, print fn(args) as
    one JSON line; one of `errors` (a patch too small for the network's down-samplings, the device's
    memory, a tool that failed) is one line naming the network, exit 1."""
    args = parse_args(parser=parser)
    try:
        result = fn(args)
    except errors as ex:
        parser.exit(1, f"{script}: --arch {args.arch} --size {args.size} --batch {args.batch}: "
                       f"{str(ex).strip().splitlines()[0]}\n")
    print(json.dumps(result))


def main():
    args = parse_args()
    if args.params_only:
        torch.manual_seed(0)
        m = build(args)
        flops = conv_flops(m, torch.zeros(1, in_channels(args), *args.shape))
        print(json.dumps({"benchmark": "params", "architecture": args.arch,
                          "parameters": sum(p.numel() for p in m.parameters() if p.requires_grad),
                          "forward_flops_per_sample": flops}))
        return
    for variant in args.variants.split(","):
        r = run(variant, args)
        print(f"{r['tool']:>16}: step {r['step_ms_median']:.2f} ms (p10 {r['step_ms_p10']:.2f}, p90 "
              f"{r['step_ms_p90']:.2f}), {r['samples_per_s']:.1f} samples/s, {r['tflops']:.1f} TFLOP/s, "
              f"peak {(r['peak_gpu_mem_bytes'] or 0) / 2**30:.2f} GiB")
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()

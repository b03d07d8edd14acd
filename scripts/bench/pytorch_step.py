#!/usr/bin/env python3
"""The trainer's networks and training step in PyTorch, for a side-by-side with `trainer --benchmark`
on the same GPU (scripts/bench/compare.py).

--arch openkbp (default): the same network as model.architecture: openkbp_baseline (the challenge's
provided U-Net), same step: MAE loss without a mask (run the trainer with training.loss=l1 to
match), AdamW (fused), bf16 autocast, channels_last_3d, cudnn.benchmark.
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

--arch mlperf_unet3d: the MLPerf Training 3D U-Net (model.preset mlperf_unet3d), the network of
scripts/python/u3d_model.py (MlperfUNet3d: the reference's layers and names) with the unet step
above and the MLPerf recipe's defaults (3 classes, no deep supervision, SGD lr 0.8, momentum 0.9,
no weight decay, no clipping); --levels/--base-filters/--max-filters/--kernel-size/--norm apply.
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint


class OpenKbpBaseline(nn.Module):
    """Six 4x4x4 stride-2 'same' convolutions down (f, 2f, 4f, 8f, 8f, 8f; no bias; BN momentum
    0.01 eps 1e-3 except the last; LeakyReLU 0.2), five 4x4x4 stride-2 transposed convolutions up
    (8f, 8f, 4f, 2f, f; no bias; BN; channel dropout 0.2 on the 2nd and 4th; ReLU), the 2nd to 5th
    taking the concatenation with the matching encoder output, then a final transposed convolution
    (bias) of [up5, enc1] to 1 channel, 3x3x3 average pooling (stride 1, 'same', padding left out of
    the average) and ReLU. 116,975,361 parameters at f = 64 with 11 input channels."""

    def __init__(self, in_channels=11, f=64):
        super().__init__()
        enc = [f, 2 * f, 4 * f, 8 * f, 8 * f, 8 * f]
        self.down = nn.ModuleList()
        self.down_bn = nn.ModuleList()
        prev = in_channels
        for i, c in enumerate(enc):
            self.down.append(nn.Conv3d(prev, c, 4, stride=2, padding=1, bias=False))
            self.down_bn.append(nn.BatchNorm3d(c, momentum=0.01, eps=1e-3) if i < 5 else nn.Identity())
            prev = c
        dec = [8 * f, 8 * f, 4 * f, 2 * f, f]
        skips = [None, enc[4], enc[3], enc[2], enc[1]]
        self.up = nn.ModuleList()
        self.up_bn = nn.ModuleList()
        prev = enc[5]
        for c, s in zip(dec, skips):
            cin = prev + (s or 0)
            self.up.append(nn.ConvTranspose3d(cin, c, 4, stride=2, padding=1, bias=False))
            self.up_bn.append(nn.BatchNorm3d(c, momentum=0.01, eps=1e-3))
            prev = c
        self.drop = nn.Dropout3d(0.2)
        self.final = nn.ConvTranspose3d(prev + enc[0], 1, 4, stride=2, padding=1, bias=True)

    def forward(self, x):
        e = []
        for conv, bn in zip(self.down, self.down_bn):
            x = F.leaky_relu(bn(conv(x)), 0.2)
            e.append(x)
        y = e[5]
        for i, (conv, bn) in enumerate(zip(self.up, self.up_bn)):
            if i > 0:
                y = torch.cat([y, e[5 - i]], dim=1)
            y = bn(conv(y))
            if i in (1, 3):
                y = self.drop(y)
            y = F.relu(y)
        y = self.final(torch.cat([y, e[0]], dim=1))
        y = F.avg_pool3d(y, 3, stride=1, padding=1, count_include_pad=False)
        return F.relu(y)


class ConvBlock(nn.Module):
    """conv (bias only without a norm) -> [channel dropout] -> [instance norm, affine] -> LeakyReLU: the
    trainer's ConvBlockImpl with norm: instance|none and activation: leaky_relu."""

    def __init__(self, cin, cout, stride, a):
        super().__init__()
        k = a.kernel_size
        self.conv = nn.Conv3d(cin, cout, k, stride=stride, padding=k // 2, bias=a.norm == "none")
        self.dropout = nn.Dropout3d(a.dropout) if a.dropout > 0 else None
        # LibTorch's InstanceNorm3d defaults: eps 1e-5; affine, no running statistics (unet.cpp).
        self.norm = nn.InstanceNorm3d(cout, affine=True, track_running_stats=False) if a.norm == "instance" else None
        self.slope = a.negative_slope

    def forward(self, x):
        y = self.conv(x)
        if self.dropout is not None:
            y = self.dropout(y)
        if self.norm is not None:
            y = self.norm(y)
        return F.leaky_relu(y, self.slope)


class UNet(nn.Module):
    """src/model/unet.cpp: `levels` stages of min(base * 2^l, max) filters and `convs` ConvBlocks, the
    first of stages l > 0 with stride 2; the decoder up-samples with 2x2x2 stride-2 transposed
    convolutions (bias), concatenates [up, skip] and applies `convs` ConvBlocks; a 1x1x1 head (bias);
    with deep supervision a 1x1x1 head on decoder stages 1 .. levels - 2. forward() returns the
    full-resolution logits alone (what the trainer's FLOP count runs); forward_deep() full resolution
    first, then 1/2, 1/4, ..."""

    def __init__(self, in_channels, out_channels, a):
        super().__init__()
        self.levels = a.levels
        f = [min(a.base_filters << l, a.max_filters) for l in range(a.levels)]
        self.encoder = nn.ModuleList()
        prev = in_channels
        for l in range(a.levels):
            self.encoder.append(nn.Sequential(*[
                ConvBlock(prev if c == 0 else f[l], f[l], 2 if (l > 0 and c == 0) else 1, a)
                for c in range(a.convs_per_level)]))
            prev = f[l]
        self.up = nn.ModuleList()
        self.decoder = nn.ModuleList()
        for l in range(a.levels - 2, -1, -1):  # deepest first
            self.up.append(nn.ConvTranspose3d(f[l + 1], f[l], 2, stride=2))
            self.decoder.append(nn.Sequential(*[
                ConvBlock(2 * f[l] if c == 0 else f[l], f[l], 1, a) for c in range(a.convs_per_level)]))
        self.checkpointing = getattr(a, "checkpointing", "off")
        self.head = nn.Conv3d(f[0], out_channels, 1)
        self.deep_heads = nn.ModuleList(
            [nn.Conv3d(f[l], out_channels, 1) for l in range(1, a.levels - 1)] if a.deep_supervision else [])
        for m in self.modules():  # init_weights(): Kaiming normal (fan in, leaky_relu), zero biases
            if isinstance(m, (nn.Conv3d, nn.ConvTranspose3d)):
                nn.init.kaiming_normal_(m.weight, a=a.negative_slope, mode="fan_in", nonlinearity="leaky_relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def run(self, x, deep):
        skips = []
        ckpt = getattr(self, "checkpointing", "off")
        for stage in self.encoder:
            x = staged(stage, x, ckpt != "off" and self.training)
            skips.append(x)
        for i, (up, stage) in enumerate(zip(self.up, self.decoder)):
            l = self.levels - 2 - i
            x = staged(stage, torch.cat([up(x), skips[l]], dim=1), ckpt == "all" and self.training)
            if deep is not None and 1 <= l <= len(self.deep_heads):
                deep.append(self.deep_heads[l - 1](x))
        return self.head(x)

    def forward(self, x):
        return self.run(x, None)

    def forward_deep(self, x):
        if len(self.deep_heads) == 0:
            return [self.forward(x)]
        deep = []  # coarsest first while decoding
        full = self.run(x, deep)
        return [full] + deep[::-1]


def conv_norm_act(cin, cout, k, stride, bias, slope):
    """nnU-Net's ConvDropoutNormReLU: conv ('same' padding) -> InstanceNorm3d (eps 1e-5, affine) ->
    LeakyReLU, or without the activation when slope is None."""
    layers = [nn.Conv3d(cin, cout, k, stride=stride, padding=k // 2, bias=bias),
              nn.InstanceNorm3d(cout, eps=1e-5, affine=True)]
    if slope is not None:
        layers.append(nn.LeakyReLU(slope))
    return nn.Sequential(*layers)


class ResidualBlockD(nn.Module):
    """nnU-Net's residual basic block 'D': act(conv2(conv1(x)) + skip(x)); conv1 conv-norm-act with the
    stride, conv2 conv-norm; skip: average pooling (kernel = stride) when strided, then a 1x1x1
    convolution without bias and a norm when the width changes."""

    def __init__(self, cin, cout, stride, a):
        super().__init__()
        k, s = a.kernel_size, a.negative_slope
        self.conv1 = conv_norm_act(cin, cout, k, stride, True, s)
        self.conv2 = conv_norm_act(cout, cout, k, 1, True, None)
        skip = []
        if stride != 1:
            skip.append(nn.AvgPool3d(stride, stride))
        if cin != cout:
            skip.append(conv_norm_act(cin, cout, 1, 1, False, None))
        self.skip = nn.Sequential(*skip)
        self.slope = s

    def forward(self, x):
        return F.leaky_relu(self.conv2(self.conv1(x)) + self.skip(x), self.slope)


class ResEncUNet(nn.Module):
    """nnU-Net's ResidualEncoderUNet (package dynamic_network_architectures), built from the
    configuration nnU-Net publishes in its ResEnc plans (nnUNetResEncUNet{M,L,XL}Plans.json:
    n_stages = --levels, features_per_stage min(32 * 2^s, 320), kernel 3, strides 1, 2, 2, ...,
    n_blocks_per_stage 1, 3, 4, 6, 6, 6, n_conv_per_stage_decoder 1, conv_bias true, InstanceNorm3d
    eps 1e-5 affine, LeakyReLU 0.01): a stem conv-norm-act, per stage residual blocks (the first
    strided), then per decoder stage a transposed convolution (kernel = stride, bias), the
    concatenation with the skip, n_conv conv-norm-act blocks and a 1x1x1 segmentation layer (bias);
    nnU-Net builds a segmentation layer for every decoder stage whether or not deep supervision is
    on, so compare its count with the trainer's deep_supervision: true. No code of nnU-Net's is used;
    the init follows its InitWeights_He(1e-2) and init_last_bn_before_add_to_0."""

    def __init__(self, in_channels, out_channels, a):
        super().__init__()
        n = a.levels
        f = [min(a.base_filters << s, a.max_filters) for s in range(n)]
        blocks = [int(b) for b in a.blocks_per_level.split(",")] if a.blocks_per_level else \
            [1, 3, 4, 6, 6, 6, 6, 6][:n]
        self.stem = conv_norm_act(in_channels, f[0], a.kernel_size, 1, True, a.negative_slope)
        self.stages = nn.ModuleList()
        prev = f[0]
        for s in range(n):
            stride = 1 if s == 0 else 2
            self.stages.append(nn.Sequential(*[
                ResidualBlockD(prev if b == 0 else f[s], f[s], stride if b == 0 else 1, a) for b in range(blocks[s])]))
            prev = f[s]
        self.transpconvs = nn.ModuleList()
        self.dec = nn.ModuleList()
        self.seg_layers = nn.ModuleList()
        for s in range(1, n):  # from the bottleneck up
            below, skip = f[-s], f[-(s + 1)]
            self.transpconvs.append(nn.ConvTranspose3d(below, skip, 2, stride=2, bias=True))
            self.dec.append(nn.Sequential(*[
                conv_norm_act(2 * skip if c == 0 else skip, skip, a.kernel_size, 1, True, a.negative_slope)
                for c in range(a.convs_per_level)]))
            self.seg_layers.append(nn.Conv3d(skip, out_channels, 1, bias=True))
        self.checkpointing = getattr(a, "checkpointing", "off")
        for m in self.modules():
            if isinstance(m, (nn.Conv3d, nn.ConvTranspose3d)):
                nn.init.kaiming_normal_(m.weight, a=1e-2)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        for m in self.modules():
            if isinstance(m, ResidualBlockD):
                nn.init.zeros_(m.conv2[1].weight)
                nn.init.zeros_(m.conv2[1].bias)

    def run(self, x, deep):
        skips = []
        x = self.stem(x)
        for stage in self.stages:
            x = staged(stage, x, self.checkpointing != "off" and self.training)
            skips.append(x)
        outs = []
        for i, (up, stage) in enumerate(zip(self.transpconvs, self.dec)):
            x = staged(stage, torch.cat([up(x), skips[-(i + 2)]], dim=1), self.checkpointing == "all" and self.training)
            if deep is not None or i == len(self.dec) - 1:
                outs.append(self.seg_layers[i](x))
        return outs[::-1]  # full resolution first

    def forward(self, x):
        return self.run(x, None)[0]

    def forward_deep(self, x):
        return self.run(x, [])


def staged(stage, x, checkpoint):
    """stage(x), through torch.utils.checkpoint (non-reentrant) when asked: the trainer's
    model.activation_checkpointing."""
    if checkpoint:
        return torch.utils.checkpoint.checkpoint(stage, x, use_reentrant=False)
    return stage(x)


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
        for a in range(3):  # downsample_labels(): every f-th voxel from f / 2
            f = labels.shape[-3 + a] // o.shape[2 + a]
            if f > 1:
                idx = [slice(None)] * lab.dim()
                idx[lab.dim() - 3 + a] = slice(f // 2, None, f)
                lab = lab[tuple(idx)]
        term = dice_ce_loss(o, lab.contiguous()) * w
        total = term if total is None else total + term
    return total


def build_mlperf(args):
    """The MLPerf 3D U-Net of scripts/python/u3d_model.py (the trainer's mlperf_unet3d)."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import u3d_model
    cfg = {"architecture": "mlperf_unet3d", "levels": args.levels, "base_filters": args.base_filters,
           "max_filters": args.max_filters, "kernel_size": args.kernel_size, "norm": args.norm, "activation": "relu"}
    return u3d_model.build(cfg, args.in_channels or 1, args.out_channels).train()


MLPERF_DEFAULTS = {"out_channels": 3, "deep_supervision": 0, "lr": 0.8, "momentum": 0.9, "weight_decay": 0.0,
                   "grad_clip_norm": 0.0}  # configs/mlperf_unet3d.yaml, unless given on the command line


def build(args):
    if args.arch == "mlperf_unet3d":
        return build_mlperf(args)
    if args.arch == "openkbp":
        return OpenKbpBaseline(args.in_channels or 11, args.filters)
    if args.arch == "resenc":
        return ResEncUNet(args.in_channels or 1, args.out_channels, args)
    return UNet(args.in_channels or 1, args.out_channels, args)


def conv_flops(model, x):
    """FLOPs of one forward pass (2 * multiply-adds of every convolution), by hooks."""
    total = 0

    def hook(mod, inp, out):
        nonlocal total
        k = mod.weight.shape[2] * mod.weight.shape[3] * mod.weight.shape[4]
        if isinstance(mod, nn.ConvTranspose3d):  # weight (C_in, C_out, k, k, k): every input voxel
            total += 2 * inp[0].numel() * mod.weight.shape[1] * k
        else:  # weight (C_out, C_in, k, k, k): every output voxel
            total += 2 * out.numel() * mod.weight.shape[1] * k
    hs = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, (nn.Conv3d, nn.ConvTranspose3d))]
    was_training = model.training
    model.eval()  # as forward_flops(): batch-norm statistics untouched, 1-voxel instance norms allowed
    with torch.no_grad():
        model(x)
    model.train(was_training)
    for h in hs:
        h.remove()
    return total


def run(variant, args):
    dev = torch.device(args.device)
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True
    model = build(args).to(dev)
    mf = torch.channels_last_3d if args.channels_last else torch.contiguous_format
    model = model.to(memory_format=mf)
    cin = args.in_channels or (11 if args.arch == "openkbp" else 1)
    shape = (args.batch, cin, args.size, args.size, args.size)
    x = torch.rand(shape, device=dev).to(memory_format=mf)
    flops_fwd = conv_flops(model, x)
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}[args.precision]
    fused = dev.type == "cuda"

    if args.arch == "openkbp":
        opt = torch.optim.AdamW(model.parameters(), lr=2e-4, betas=(0.5, 0.999), fused=fused)
        y = torch.rand((args.batch, 1, args.size, args.size, args.size), device=dev).to(memory_format=mf)

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast(dev.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                loss = (model(x) - y).abs().mean()
            loss.backward()
            opt.step()
            return loss
    else:
        # configs/segmentation_nnunet_like.yaml's training: SGD, Nesterov momentum, weight decay, clip.
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum, nesterov=args.nesterov,
                              weight_decay=args.weight_decay, fused=fused)
        labels = torch.randint(0, args.out_channels, (args.batch, args.size, args.size, args.size), device=dev)
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
                    loss = dice_ce_loss(outs[0], labels)
                loss = loss / args.accumulate if args.accumulate > 1 else loss
                loss.backward()
                total = total + loss.detach()
            loss = total
            if args.grad_clip_norm > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip_norm, foreach=True)
            opt.step()
            return loss

    fn = torch.compile(step) if variant == "compile" else step
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
        "patch": [args.size] * 3,
        "architecture": {"unet": "unet", "resenc": "resenc_unet", "openkbp": "openkbp_baseline",
                         "mlperf_unet3d": "mlperf_unet3d"}[args.arch],
        "accumulate_steps": args.accumulate, "activation_checkpointing": args.checkpointing,
        "filters": args.filters if args.arch == "openkbp" else args.base_filters, "in_channels": cin,
        "out_channels": 1 if args.arch == "openkbp" else args.out_channels, "steps": args.steps,
        "step_ms_median": med, "step_ms_p10": q(0.1), "step_ms_p90": q(0.9),
        "samples_per_s": args.batch * args.accumulate * 1e3 / med,
        "peak_gpu_mem_bytes": torch.cuda.max_memory_reserved() if dev.type == "cuda" else None,
        "peak_gpu_reserved_bytes": torch.cuda.max_memory_reserved() if dev.type == "cuda" else None,
        "peak_gpu_allocated_bytes": torch.cuda.max_memory_allocated() if dev.type == "cuda" else None,
        "flops_per_step": flops_step, "tflops": flops_step / (med * 1e-3) / 1e12,
        "parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--filters", type=int, default=64)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="bf16")
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
    g.add_argument("--norm", choices=["instance", "none"], default="instance")
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
    given = set(a.split("=", 1)[0].lstrip("-").replace("-", "_") for a in __import__("sys").argv[1:] if a.startswith("--"))
    args = p.parse_args()
    if args.arch == "mlperf_unet3d":  # the MLPerf recipe's defaults for what the command line leaves out
        for key, value in MLPERF_DEFAULTS.items():
            if key not in given:
                setattr(args, key, value)
    if args.params_only:
        torch.manual_seed(0)
        m = build(args)
        x = torch.zeros(1, args.in_channels or (11 if args.arch == "openkbp" else 1), *([args.size] * 3))
        try:
            flops = conv_flops(m, x)
        except ValueError:  # PyTorch's instance norm refuses a 1-voxel bottleneck (LibTorch's does not)
            flops = None
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

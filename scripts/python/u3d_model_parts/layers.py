"""The U-Nets' building blocks (src/model/unet.cpp): ConvBlock and ResidualBlock with the LibTorch
module names, the norms, the activations and the per-block activation checkpointing, in 3D or (model.dims
2) 2D: Conv2d over the two axes other than model.slice_axis, on (N, C, H, W) tensors."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

from .config import _triple


def _activate(y, activation, negative_slope):
    if activation == "relu":
        return torch.relu(y)
    if activation == "leaky_relu":
        return F.leaky_relu(y, negative_slope)
    if activation == "gelu":
        return F.gelu(y)
    if activation == "elu":
        return F.elu(y)
    return y


class InstanceNorm3d(nn.InstanceNorm3d):
    """nn.InstanceNorm3d (affine, no running statistics) without Python's check against a single
    voxel per channel, which LibTorch does not make: a 1x1x1 map normalises to the bias, as in C++
    (the deepest stage of a network given inputs of size_divisor voxels). Also 2D (N, C, H, W) inputs."""

    def __init__(self, channels):
        super().__init__(channels, affine=True, track_running_stats=False)

    def forward(self, x):
        return torch.instance_norm(x, self.weight, self.bias, None, None, True, self.momentum or 0.0, self.eps,
                                   torch.backends.cudnn.enabled)


def _make_norm(norm, channels, groups, dims=3):
    if norm == "batch":
        return nn.BatchNorm2d(channels) if dims == 2 else nn.BatchNorm3d(channels)
    if norm == "instance":
        return InstanceNorm3d(channels)
    if norm == "group":
        g = min(groups, channels)  # largest divisor of `channels` not above the requested count
        while channels % g != 0:
            g -= 1
        return nn.GroupNorm(g, channels)
    return None


CONVS = (nn.Conv3d, nn.ConvTranspose3d, nn.Conv2d, nn.ConvTranspose2d)


def plane(triple, cfg):
    """A (D, H, W) kernel, stride or padding as the stage's convolution takes it: the triple, or with
    model.dims 2 the two entries of the axes other than model.slice_axis."""
    t = tuple(_triple(triple))
    if cfg.get("dims", 3) == 2:
        return tuple(v for a, v in enumerate(t) if a != cfg.get("slice_axis", 0))
    return t


def stage_conv(cfg, cin, cout, kernel, stride, padding=0, bias=True, transposed=False):
    """model/stage_conv.h: Conv3d / ConvTranspose3d, or Conv2d / ConvTranspose2d with model.dims 2."""
    two = cfg.get("dims", 3) == 2
    if transposed:
        cls = nn.ConvTranspose2d if two else nn.ConvTranspose3d
        return cls(cin, cout, plane(kernel, cfg), stride=plane(stride, cfg), bias=bias)
    cls = nn.Conv2d if two else nn.Conv3d
    return cls(cin, cout, plane(kernel, cfg), stride=plane(stride, cfg), padding=plane(padding, cfg), bias=bias)


class ConvBlock(nn.Module):
    """conv -> [dropout] -> [norm] -> [activation]; `bias` None: only without a norm."""

    def __init__(self, cin, cout, stride, cfg, kernel=0, bias=None, activate=True):
        super().__init__()
        k = _triple(kernel if kernel else cfg["kernel_size"])
        if bias is None:
            bias = cfg["norm"] == "none"
        self.conv = stage_conv(cfg, cin, cout, k, stride, padding=[a // 2 for a in k], bias=bias)
        dropout = nn.Dropout2d if cfg.get("dims", 3) == 2 else nn.Dropout3d
        self.dropout = dropout(cfg["dropout"]) if cfg["dropout"] > 0 else None
        self.norm = _make_norm(cfg["norm"], cout, cfg["norm_groups"], cfg.get("dims", 3))
        self.activation = cfg["activation"]
        self.negative_slope = cfg["negative_slope"]
        self.activate = activate

    def forward(self, x):
        y = self.conv(x)
        if self.dropout is not None:
            y = self.dropout(y)
        if self.norm is not None:
            y = self.norm(y)
        return _activate(y, self.activation, self.negative_slope) if self.activate else y


class ResidualBlock(nn.Module):
    """nnU-Net's BasicBlockD: activation(conv2(conv1(x)) + project(pool(x)))."""

    def __init__(self, cin, cout, stride, cfg, kernel=0):
        super().__init__()
        stride = _triple(stride)
        self.conv1 = ConvBlock(cin, cout, stride, cfg, kernel=kernel, bias=True)
        self.conv2 = ConvBlock(cout, cout, 1, cfg, kernel=kernel, bias=True, activate=False)
        pool, s = (nn.AvgPool2d if cfg.get("dims", 3) == 2 else nn.AvgPool3d), plane(stride, cfg)
        self.pool = pool(s, s) if max(stride) > 1 else None
        self.project = ConvBlock(cin, cout, 1, cfg, kernel=1, bias=False, activate=False) if cin != cout else None
        self.activation = cfg["activation"]
        self.negative_slope = cfg["negative_slope"]
        if self.conv2.norm is not None:  # nnU-Net's init_last_bn_before_add_to_0, as the C++ constructor
            with torch.no_grad():
                for p in self.conv2.norm.parameters():
                    p.zero_()

    def forward(self, x):
        skip = self.pool(x) if self.pool is not None else x
        if self.project is not None:
            skip = self.project(skip)
        return _activate(self.conv2(self.conv1(x)) + skip, self.activation, self.negative_slope)


def run_stage(stage, x, checkpoint):
    """stage(x); with `checkpoint` in training under grad mode block by block through
    torch.utils.checkpoint (non-reentrant): model.activation_checkpointing, as UNet3dImpl::run_stage."""
    if not (checkpoint and stage.training and torch.is_grad_enabled()):
        return stage(x)
    for block in stage:
        x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
    return x


def init_weights(module, negative_slope):
    """unet.cpp's init_weights(): Kaiming normal (fan in, leaky_relu with `negative_slope`) for every
    convolution's weight, zero biases; norms keep theirs."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, CONVS):
                nn.init.kaiming_normal_(m.weight, a=negative_slope, mode="fan_in", nonlinearity="leaky_relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

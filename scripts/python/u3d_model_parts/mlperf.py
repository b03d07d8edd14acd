"""model.architecture mlperf_unet3d (include/u3d/model/mlperf_unet3d.h): the MLPerf Training 3D U-Net
with the reference's module names (input_block, downsample.<i>, bottleneck, upsample.<j>, output)."""

from __future__ import annotations

import torch
import torch.nn as nn

from .layers import _activate, _make_norm


class _MlperfConv(nn.Sequential):
    """The MLPerf reference's conv_block_factory: "0" convolution (bias only without a norm), "1"
    norm, then the activation (no module: the C++ fuses it into the norm)."""

    def __init__(self, cin, cout, cfg, kernel=3, stride=1, padding=1, transposed=False, plain=False):
        norm = "none" if plain else cfg["norm"]
        conv = nn.ConvTranspose3d if transposed else nn.Conv3d
        layers = [conv(cin, cout, kernel, stride=stride, padding=padding, bias=norm == "none")]
        made = _make_norm(norm, cout, cfg["norm_groups"])
        if made is not None:
            layers.append(made)
        super().__init__(*layers)
        self.plain = plain
        self.activation = cfg["activation"]
        self.negative_slope = cfg["negative_slope"]

    def forward(self, x):
        y = super().forward(x)
        return y if self.plain else _activate(y, self.activation, self.negative_slope)


class _MlperfBlock(nn.Module):
    def __init__(self, cin, cout, stride, cfg):
        super().__init__()
        k = cfg["kernel_size"]
        self.conv1 = _MlperfConv(cin, cout, cfg, k, stride, k // 2)
        self.conv2 = _MlperfConv(cout, cout, cfg, k, 1, k // 2)

    def forward(self, x):
        return self.conv2(self.conv1(x))


class _MlperfUpBlock(nn.Module):
    def __init__(self, cin, cout, cfg):
        super().__init__()
        k = cfg["kernel_size"]
        self.upsample_conv = _MlperfConv(cin, cout, cfg, 2, 2, 0, transposed=True, plain=True)
        self.conv1 = _MlperfConv(2 * cout, cout, cfg, k, 1, k // 2)
        self.conv2 = _MlperfConv(cout, cout, cfg, k, 1, k // 2)

    def forward(self, x, skip):
        return self.conv2(self.conv1(torch.cat((self.upsample_conv(x), skip), dim=1)))


class _MlperfOutput(nn.Module):
    def __init__(self, cin, cout, cfg):
        super().__init__()
        self.conv = _MlperfConv(cin, cout, cfg, 1, 1, 0, plain=True)

    def forward(self, x):
        return self.conv(x)


class MlperfUNet3d(nn.Module):
    """model.architecture mlperf_unet3d (include/u3d/model/mlperf_unet3d.h): the MLPerf Training 3D
    U-Net with the reference's names: input_block, downsample.<i>, bottleneck, upsample.<j>, output."""

    def __init__(self, cfg, in_channels, out_channels):
        super().__init__()
        self.levels = cfg["levels"]
        f = [min(cfg["base_filters"] << l, cfg["max_filters"]) for l in range(self.levels)]
        self.input_block = _MlperfBlock(in_channels, f[0], 1, cfg)
        self.downsample = nn.ModuleList([_MlperfBlock(f[i], f[i + 1], 2, cfg) for i in range(self.levels - 2)])
        self.bottleneck = _MlperfBlock(f[-2], f[-1], 2, cfg)
        self.upsample = nn.ModuleList([_MlperfUpBlock(f[self.levels - 1 - j], f[self.levels - 2 - j], cfg)
                                       for j in range(self.levels - 1)])
        self.output = _MlperfOutput(f[0], out_channels, cfg)

    def size_divisor(self):
        return 1 << (self.levels - 1)

    def forward(self, x):
        y = self.input_block(x)
        skips = [y]
        for block in self.downsample:
            y = block(y)
            skips.append(y)
        y = self.bottleneck(y)
        for block, skip in zip(self.upsample, reversed(skips)):
            y = block(y, skip)
        return self.output(y)

    def forward_deep(self, x):
        return [self.forward(x)]

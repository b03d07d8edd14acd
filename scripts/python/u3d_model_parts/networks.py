"""The networks of src/model/ with the LibTorch module names, so a C++ state dict loads with
load_state_dict(strict=True): unet and resenc_unet (UNet3d, src/model/unet.cpp), openkbp_baseline
(src/model/openkbp_baseline.cpp) and mlperf_unet3d (MlperfUNet3d, mlperf.py); build() makes the one a
config names. Fresh weights are initialised as the C++ constructors do. The benchmarks
(scripts/bench/pytorch_step.py) build their networks here too."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import NNUNET_BLOCKS, _is_sigmoid, model_config, stage_geometry
from .layers import ConvBlock, ResidualBlock, init_weights, run_stage, stage_conv
from .mlperf import MlperfUNet3d


class UNet3d(nn.Module):
    """model.architecture unet and resenc_unet: encoder<l>, up<l>, decoder<l>, head, deep_head<l>."""

    def __init__(self, cfg, in_channels, out_channels):
        super().__init__()
        self.levels = cfg["levels"]
        self.output_activation = cfg["output_activation"]
        residual = cfg["architecture"] == "resenc_unet"
        bias = True if residual else None
        self.filters = [min(cfg["base_filters"] << l, cfg["max_filters"]) for l in range(self.levels)]
        f = self.filters
        # model.kernel_sizes and model.strides (core/stage_geometry.h): per stage, per axis.
        kernels, strides = stage_geometry(cfg)
        self.squeeze = cfg["slice_axis"] + 2 if cfg["dims"] == 2 else None  # 2D: (N, C, 1, H, W) in C++
        self.checkpointing = cfg["activation_checkpointing"]
        self.divisors = [1, 1, 1]
        for s in strides:
            self.divisors = [d * a for d, a in zip(self.divisors, s)]
        prev = in_channels
        for l in range(self.levels):
            blocks = []
            if residual:
                if l == 0:  # the stem
                    blocks.append(ConvBlock(prev, f[0], 1, cfg, kernel=kernels[0], bias=True))
                    prev = f[0]
                n = cfg["blocks_per_level"][l] if cfg["blocks_per_level"] else NNUNET_BLOCKS[min(l, 7)]
                for b in range(n):
                    blocks.append(ResidualBlock(prev if b == 0 else f[l], f[l], strides[l] if b == 0 else 1, cfg,
                                                kernel=kernels[l]))
            else:
                for c in range(cfg["convs_per_level"]):
                    blocks.append(ConvBlock(prev if c == 0 else f[l], f[l], strides[l] if c == 0 else 1, cfg,
                                            kernel=kernels[l]))
            self.add_module(f"encoder{l}", nn.Sequential(*blocks))
            prev = f[l]
        for l in range(self.levels - 2, -1, -1):
            self.add_module(f"up{l}", stage_conv(cfg, f[l + 1], f[l], strides[l + 1], strides[l + 1], transposed=True))
            self.add_module(f"decoder{l}", nn.Sequential(*[
                ConvBlock(2 * f[l] if c == 0 else f[l], f[l], 1, cfg, kernel=kernels[l], bias=bias)
                for c in range(cfg["convs_per_level"])]))
        self.head = stage_conv(cfg, f[0], out_channels, 1, 1)
        self.deep_heads = []
        if cfg["deep_supervision"]:
            for l in range(1, self.levels - 1):
                self.add_module(f"deep_head{l}", stage_conv(cfg, f[l], out_channels, 1, 1))
                self.deep_heads.append(f"deep_head{l}")
        init_weights(self, cfg["negative_slope"] if cfg["activation"] == "leaky_relu" else 0.0)

    def size_divisor(self):
        return max(self.divisors)

    def _run(self, x, deep):
        squeeze = self.squeeze is not None and x.dim() == self.squeeze + 3  # a 2D network given (N, C, 1, H, W)
        y = x.squeeze(self.squeeze) if squeeze else x
        skips = []
        for l in range(self.levels):
            y = run_stage(getattr(self, f"encoder{l}"), y, self.checkpointing != "off")
            skips.append(y)
        for l in range(self.levels - 2, -1, -1):
            y = getattr(self, f"up{l}")(y)
            y = torch.cat([y, skips[l]], dim=1)
            y = run_stage(getattr(self, f"decoder{l}"), y, self.checkpointing == "all")
            if deep is not None and 1 <= l <= len(self.deep_heads):
                d = getattr(self, f"deep_head{l}")(y)
                deep.append(d.unsqueeze(self.squeeze) if squeeze else d)
        y = self.head(y)
        if self.output_activation == "relu":
            y = torch.relu(y)
        elif self.output_activation == "sigmoid":
            y = torch.sigmoid(y)
        return y.unsqueeze(self.squeeze) if squeeze else y

    def forward(self, x):
        """(N, C_in, D, H, W) -> (N, C_out, D, H, W): logits or the regression output; model.dims 2:
        (N, C_in, H, W) -> (N, C_out, H, W), or the C++ network's 5-D form with size 1 on the slice axis."""
        return self._run(x, None)

    def forward_deep(self, x):
        """Outputs at every supervised resolution, full resolution first (training's view)."""
        if not self.deep_heads:
            return [self.forward(x)]
        deep = []
        full = self._run(x, deep)
        return [full] + deep[::-1]


class OpenKbpBaseline(nn.Module):
    """model.architecture openkbp_baseline: the OpenKBP challenge's network, f = base_filters."""

    def __init__(self, cfg, in_channels, out_channels):
        super().__init__()
        f = cfg["base_filters"]
        down = [f, 2 * f, 4 * f, 8 * f, 8 * f, 8 * f]
        prev = in_channels
        for i, n in enumerate(down):
            self.add_module(f"down{i + 1}", nn.Conv3d(prev, n, 4, stride=2, padding=1, bias=False))
            if i + 1 < len(down):
                self.add_module(f"down{i + 1}_norm", nn.BatchNorm3d(n, eps=1e-3, momentum=0.01))
            prev = n
        ups = [8 * f, 8 * f, 4 * f, 2 * f, f]
        up_in = [8 * f, 16 * f, 16 * f, 8 * f, 4 * f]
        for i, (cin, n) in enumerate(zip(up_in, ups)):
            self.add_module(f"up{i + 1}", nn.ConvTranspose3d(cin, n, 4, stride=2, padding=1, bias=False))
            self.add_module(f"up{i + 1}_norm", nn.BatchNorm3d(n, eps=1e-3, momentum=0.01))
        self.dropout = nn.Dropout3d(0.2)
        self.head = nn.ConvTranspose3d(2 * f, out_channels, 4, stride=2, padding=1, bias=True)
        with torch.no_grad():  # as openkbp_baseline.cpp: Xavier uniform convolutions, a zero head bias
            for m in self.children():
                if isinstance(m, (nn.Conv3d, nn.ConvTranspose3d)):
                    nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(self.head.bias)

    def size_divisor(self):
        return 64

    def forward(self, x):
        skips = []
        y = x
        for i in range(1, 7):
            y = getattr(self, f"down{i}")(y)
            if i < 6:
                y = getattr(self, f"down{i}_norm")(y)
            y = F.leaky_relu(y, 0.2)
            skips.append(y)
        for i in range(5):
            if i > 0:
                y = torch.cat([y, skips[len(skips) - 1 - i]], dim=1)
            y = getattr(self, f"up{i + 1}_norm")(getattr(self, f"up{i + 1}")(y))
            if i == 1 or i == 3:
                y = self.dropout(y)
            y = torch.relu(y)
        y = torch.cat([y, skips[0]], dim=1)
        y = self.head(y)
        y = F.avg_pool3d(y, 3, stride=1, padding=1, count_include_pad=False)
        return torch.relu(y)


def build(meta_or_model_dict, in_channels=None, out_channels=None) -> nn.Module:
    """The network (fresh weights, eval mode) described by an export's meta dict, a model.* dict or
    a resolved config YAML; in_channels/out_channels default to the meta's."""
    spec = meta_or_model_dict
    cfg = model_config(spec)
    if isinstance(spec, dict) and "model" in spec:
        in_channels = int(spec["in_channels"]) if in_channels is None else in_channels
        if out_channels is None:  # the classes K; a sigmoid head (model.head) has K - 1 channels
            out_channels = int(spec["out_channels"]) - (1 if _is_sigmoid(cfg) else 0)
    if in_channels is None or out_channels is None:
        raise ValueError("build: in_channels and out_channels are needed (the meta dict has them)")
    if cfg["architecture"] == "openkbp_baseline":
        net = OpenKbpBaseline(cfg, int(in_channels), int(out_channels))
    elif cfg["architecture"] == "mlperf_unet3d":
        net = MlperfUNet3d(cfg, int(in_channels), int(out_channels))
    else:
        if cfg["architecture"] == "resenc_unet" and cfg["blocks_per_level"] and \
                len(cfg["blocks_per_level"]) < cfg["levels"]:
            raise ValueError("model.blocks_per_level: fewer entries than model.levels")
        net = UNet3d(cfg, int(in_channels), int(out_channels))
    net.config = cfg
    if isinstance(spec, dict) and "model" in spec:
        net.meta = dict(spec)
    return net.eval()


def size_divisor(model) -> int:
    """Every spatial input size must divide by this."""
    if hasattr(model, "size_divisor") and callable(getattr(model, "size_divisor")) and \
            not isinstance(model, torch.jit.ScriptModule):
        return int(model.size_divisor())
    meta = getattr(model, "meta", None) or {}
    if "size_divisor" in meta:
        return int(meta["size_divisor"])
    cfg = model_config(meta)
    return 64 if cfg["architecture"] == "openkbp_baseline" else 1 << (cfg["levels"] - 1)

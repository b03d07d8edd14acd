"""The trainer's networks in PyTorch (scripts/bench/pytorch_step.py --arch openkbp|unet|resenc): the
same layers, shapes and parameter names as src/model/, for the side-by-side step benchmark."""
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


def layers(a):
    """The torch.nn classes of the trainer's model.dims (a.dims: 3, or 2 for the 2D U-Net on slices)."""
    if getattr(a, "dims", 3) == 2:
        return dict(conv=nn.Conv2d, up=nn.ConvTranspose2d, drop=nn.Dropout2d, inorm=nn.InstanceNorm2d,
                    bnorm=nn.BatchNorm2d)
    return dict(conv=nn.Conv3d, up=nn.ConvTranspose3d, drop=nn.Dropout3d, inorm=nn.InstanceNorm3d,
                bnorm=nn.BatchNorm3d)


CONVS = (nn.Conv3d, nn.ConvTranspose3d, nn.Conv2d, nn.ConvTranspose2d)


class ConvBlock(nn.Module):
    """conv (bias only without a norm) -> [channel dropout] -> [instance or batch norm, affine] ->
    LeakyReLU or ReLU: the trainer's ConvBlockImpl with norm: instance|batch|none and activation:
    leaky_relu|relu, in 3D or (a.dims 2) 2D."""

    def __init__(self, cin, cout, stride, a, kernel=None):
        super().__init__()
        k, L = kernel or a.kernel_size, layers(a)
        pad = tuple(v // 2 for v in k) if isinstance(k, tuple) else k // 2
        self.conv = L["conv"](cin, cout, k, stride=stride, padding=pad, bias=a.norm == "none")
        self.dropout = L["drop"](a.dropout) if a.dropout > 0 else None
        # LibTorch's InstanceNorm defaults: eps 1e-5; affine, no running statistics (unet.cpp); BatchNorm's.
        self.norm = (L["inorm"](cout, affine=True, track_running_stats=False) if a.norm == "instance" else
                     L["bnorm"](cout) if a.norm == "batch" else None)
        self.slope = 0.0 if getattr(a, "activation", "leaky_relu") == "relu" else a.negative_slope

    def forward(self, x):
        y = self.conv(x)
        for layer in (self.dropout, self.norm):  # each when configured
            if layer is not None:
                y = layer(y)
        return F.relu(y) if self.slope == 0.0 else F.leaky_relu(y, self.slope)


class UNet(nn.Module):
    """src/model/unet.cpp: `levels` stages of min(base * 2^l, max) filters and `convs` ConvBlocks, the
    first of stages l > 0 with stride 2 (or model.strides' triple, kernels model.kernel_sizes'); the
    decoder up-samples with 2x2x2 stride-2 (the stage's stride) transposed
    convolutions (bias), concatenates [up, skip] and applies `convs` ConvBlocks; a 1x1x1 head (bias);
    with deep supervision a 1x1x1 head on decoder stages 1 .. levels - 2. forward() returns the
    full-resolution logits alone (what the trainer's FLOP count runs); forward_deep() full resolution
    first, then 1/2, 1/4, ..."""

    def __init__(self, in_channels, out_channels, a):
        super().__init__()
        self.levels = a.levels
        f = [min(a.base_filters << l, a.max_filters) for l in range(a.levels)]
        # model.kernel_sizes / model.strides (a.kernel_list, a.stride_list: per-stage tuples), else the
        # cubic kernel and stride 1, 2, 2, ...; the up-sampling's kernel and stride are the stage's stride.
        kernels = getattr(a, "kernel_list", None) or [None] * a.levels
        strides = getattr(a, "stride_list", None) or [1] + [2] * (a.levels - 1)
        if len(kernels) != a.levels or len(strides) != a.levels:
            raise SystemExit(f"--kernel-sizes/--strides: expected {a.levels} stages (--levels)")
        self.encoder = nn.ModuleList()
        prev = in_channels
        for l in range(a.levels):
            self.encoder.append(nn.Sequential(*[
                ConvBlock(prev if c == 0 else f[l], f[l], strides[l] if c == 0 else 1, a, kernels[l])
                for c in range(a.convs_per_level)]))
            prev = f[l]
        self.up = nn.ModuleList()
        self.decoder = nn.ModuleList()
        for l in range(a.levels - 2, -1, -1):  # deepest first
            self.up.append(layers(a)["up"](f[l + 1], f[l], strides[l + 1], stride=strides[l + 1]))
            self.decoder.append(nn.Sequential(*[
                ConvBlock(2 * f[l] if c == 0 else f[l], f[l], 1, a, kernels[l]) for c in range(a.convs_per_level)]))
        self.checkpointing = getattr(a, "checkpointing", "off")
        conv = layers(a)["conv"]
        self.head = conv(f[0], out_channels, 1)
        self.deep_heads = nn.ModuleList(
            [conv(f[l], out_channels, 1) for l in range(1, a.levels - 1)] if a.deep_supervision else [])
        for m in self.modules():  # init_weights(): Kaiming normal (fan in, leaky_relu), zero biases
            if isinstance(m, CONVS):
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


class BudaUNet2d(nn.Module):
    """The slice user's network as published (Buda et al., brain-segmentation-pytorch, unet.py; written
    from its layer list, none of its code): encoders of 32, 64, 128, 256 filters and a 512 bottleneck,
    each two 3x3 conv (no bias) - BatchNorm2d - ReLU, 2x2 max-pooling between them, 2x2 stride-2
    transposed convolutions (bias) up, the concatenation [up, skip], two conv-BN-ReLU, a 1x1 conv (bias)
    to `out_channels` and a sigmoid: 7,762,465 parameters for 1 channel in and out. The trainer's
    model.preset unet2d has the same parameters, with the stage's first convolution strided instead of
    the max-pool."""

    def __init__(self, in_channels=1, out_channels=1, features=32):
        super().__init__()

        def block(cin, cout):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                                 nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())
        f = [features << i for i in range(5)]
        self.enc = nn.ModuleList([block(in_channels if i == 0 else f[i - 1], f[i]) for i in range(4)])
        self.bottleneck = block(f[3], f[4])
        self.ups = nn.ModuleList([nn.ConvTranspose2d(f[i + 1], f[i], 2, stride=2) for i in range(3, -1, -1)])
        self.dec = nn.ModuleList([block(2 * f[i], f[i]) for i in range(3, -1, -1)])
        self.head = nn.Conv2d(f[0], out_channels, 1)

    def forward(self, x):
        skips = []
        for enc in self.enc:
            x = enc(x)
            skips.append(x)
            x = F.max_pool2d(x, 2)
        x = self.bottleneck(x)
        for up, dec in zip(self.ups, self.dec):
            x = dec(torch.cat([up(x), skips.pop()], dim=1))
        return torch.sigmoid(self.head(x))


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

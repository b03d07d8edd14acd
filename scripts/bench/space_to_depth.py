"""A stride-2 convolution with a 4x4x4 kernel and padding 1 (the OpenKBP baseline's down-sampling
convolutions) rewritten as space-to-depth + a stride-1 convolution with a 2x2x2 kernel: the same
result and the same FLOPs, and no strided data gradient (issue 53's convolution path: measured by
conv_floor.py before anything of it is built into the trainer).

Per axis, with xp = x padded by 1 and kernel tap k = 2a + b (a, b in {0, 1}):

    y[o] = sum_k w[k] xp[2o + k] = sum_{a,b} w[2a + b] xs[b][o + a],   xs[b][j] = xp[2j + b]

so y is a stride-1 convolution (taps a) over 8 C channels (the phases b of the three axes, then the
channel), on the padded input folded into (N, 8 C, D/2 + 1, H/2 + 1, W/2 + 1). The fold is one copy,
written straight into channels-last memory (NDHWC: the 8 C channels fastest), so the convolution
after it reads channels-last as the network's own does; its backward is one copy back.

    x  (N, C, D, H, W), D, H, W even; weight (O, C, 4, 4, 4) -> S2dConv3d weight (O, 8 C, 2, 2, 2)
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def candidate(mod):
    """Whether `mod` is a convolution this rewrite takes: Conv3d, kernel 4, stride 2, padding 1, no
    dilation or groups (not transposed)."""
    return (isinstance(mod, nn.Conv3d) and tuple(mod.kernel_size) == (4, 4, 4) and tuple(mod.stride) == (2, 2, 2)
            and tuple(mod.padding) == (1, 1, 1) and tuple(mod.dilation) == (1, 1, 1) and mod.groups == 1)


def fold_weight(w):
    """(O, C, 4, 4, 4) -> (O, 8 C, 2, 2, 2): channel (b0, b1, b2, c), taps (a0, a1, a2), k = 2a + b."""
    o, c = w.shape[:2]
    return w.reshape(o, c, 2, 2, 2, 2, 2, 2).permute(0, 3, 5, 7, 1, 2, 4, 6).reshape(o, 8 * c, 2, 2, 2)


def space_to_depth(x):
    """(N, C, D, H, W) -> padded by 1, folded to (N, 8 C, D/2 + 1, H/2 + 1, W/2 + 1) in channels-last
    memory, channel (b0, b1, b2, c) as fold_weight's."""
    xp = F.pad(x, (1, 1, 1, 1, 1, 1))
    n, c, d, h, w = xp.shape
    folded = xp.reshape(n, c, d // 2, 2, h // 2, 2, w // 2, 2).permute(0, 2, 4, 6, 3, 5, 7, 1).contiguous()
    return folded.reshape(n, d // 2, h // 2, w // 2, 8 * c).permute(0, 4, 1, 2, 3)


class S2dConv3d(nn.Module):
    """`conv` (a candidate) as space-to-depth + a stride-1 2x2x2 convolution with the folded weight."""

    def __init__(self, conv):
        super().__init__()
        if not candidate(conv):
            raise ValueError("space_to_depth: not a Conv3d with kernel 4, stride 2, padding 1")
        self.conv = nn.Conv3d(8 * conv.in_channels, conv.out_channels, 2, bias=conv.bias is not None)
        with torch.no_grad():
            self.conv.weight.copy_(fold_weight(conv.weight))
            if conv.bias is not None:
                self.conv.bias.copy_(conv.bias)
        self.conv.to(device=conv.weight.device, memory_format=torch.channels_last_3d)

    def forward(self, x):
        return self.conv(space_to_depth(x))

"""The slice user's 2D U-Net as published (Buda et al., brain-segmentation-pytorch, unet.py), rebuilt
here from its layer list with torch.nn only (none of its code), to hold the trainer's model.preset
unet2d to its parameter count (tests/bundle/slices_mirror_test.sh).

  buda_reference.py     prints the parameter count for 1 channel in and out (7,762,465)
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


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


if __name__ == "__main__":
    print(sum(p.numel() for p in BudaUNet2d(1, 1).parameters()))

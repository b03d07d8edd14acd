"""The MLPerf Training 3D U-Net as its reference builds it (mlcommons/training,
image_segmentation/pytorch/model/unet3d.py and layers.py), rebuilt here from its layer list with
torch.nn only, and compared with the trainer's mlperf_unet3d (an export of a trained run) and with
scripts/python/u3d_model.py's MlperfUNet3d (tests/bundle/mlperf_mirror_test.sh).

The reference: filters [32, 64, 128, 256, 320]; every block is nn.Sequential(conv, norm, activation)
(conv 3^3 padding 1, bias only without a norm; InstanceNorm3d(affine=True); ReLU);
input_block (in -> 32, 32 -> 32); downsample[i] (f_i -> f_i+1 stride 2, then f_i+1 -> f_i+1) for
the pairs of [32, 64, 128, 256] and [64, 128, 256, 320]; bottleneck (320 -> 320 stride 2, 320 ->
320); upsample[0] (320 -> 320) then upsample for (320, 256), (256, 128), (128, 64), (64, 32), each
upsample_conv = Sequential(ConvTranspose3d 2^3 stride 2 with bias, Identity, Identity), cat with the
skip, conv1 (2 out -> out), conv2 (out -> out); output.conv = Sequential(Conv3d 1^3 with bias,
Identity, Identity).

  mlperf_reference.py EXPORT_DIR U3D_MODEL_DIR     exit 0 when everything matches
"""
import os
import sys

import torch
import torch.nn as nn


def block(cin, cout, kernel=3, stride=1, padding=1, transposed=False, plain=False):
    conv = (nn.ConvTranspose3d if transposed else nn.Conv3d)(cin, cout, kernel, stride=stride, padding=padding,
                                                              bias=plain)
    if plain:
        return nn.Sequential(conv, nn.Identity(), nn.Identity())
    return nn.Sequential(conv, nn.InstanceNorm3d(cout, affine=True), nn.ReLU())


class Pair(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = block(cin, cout, stride=stride)
        self.conv2 = block(cout, cout)

    def forward(self, x):
        return self.conv2(self.conv1(x))


class Up(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.upsample_conv = block(cin, cout, kernel=2, stride=2, padding=0, transposed=True, plain=True)
        self.conv1 = block(2 * cout, cout)
        self.conv2 = block(cout, cout)

    def forward(self, x, skip):
        return self.conv2(self.conv1(torch.cat((self.upsample_conv(x), skip), dim=1)))


class Out(nn.Module):
    def __init__(self, cin, n_class):
        super().__init__()
        self.conv = block(cin, n_class, kernel=1, padding=0, plain=True)

    def forward(self, x):
        return self.conv(x)


class Reference(nn.Module):
    def __init__(self, in_channels=1, n_class=3):
        super().__init__()
        f = [32, 64, 128, 256, 320]
        self.input_block = Pair(in_channels, f[0], 1)
        self.downsample = nn.ModuleList([Pair(i, o, 2) for i, o in zip(f[:-1], f[1:])])
        self.bottleneck = Pair(f[-1], f[-1], 2)
        self.upsample = nn.ModuleList([Up(f[-1], f[-1])] + [Up(i, o) for i, o in zip(reversed(f[1:]), reversed(f[:-1]))])
        self.output = Out(f[0], n_class)

    def forward(self, x):
        skips = [self.input_block(x)]
        for d in self.downsample:
            skips.append(d(skips[-1]))
        x = self.bottleneck(skips[-1])
        for u, s in zip(self.upsample, reversed(skips)):
            x = u(x, s)
        return self.output(x)


def shapes(named):
    return [(k, tuple(v.shape)) for k, v in named]


def main():
    export_dir, u3d_dir = sys.argv[1], sys.argv[2]
    sys.path.insert(0, u3d_dir)
    import u3d_model

    torch.manual_seed(0)
    ref = Reference().eval()
    ref_params = shapes(ref.named_parameters())
    count = sum(p.numel() for p in ref.parameters())
    print(f"reference: {len(ref_params)} parameter tensors, {count} parameters")
    ok = count == 31190243

    mirror = u3d_model.build({"architecture": "mlperf_unet3d", "levels": 6, "base_filters": 32, "max_filters": 320,
                              "norm": "instance", "activation": "relu"}, 1, 3)
    same = shapes(mirror.named_parameters()) == ref_params
    print(f"u3d_model.MlperfUNet3d: names, shapes and order {'equal' if same else 'DIFFER'}")
    ok &= same

    ts = torch.jit.load(os.path.join(export_dir, "model.ts")).eval()  # the C++ network, traced
    cpp_params = shapes(ts.named_parameters())
    same = cpp_params == ref_params
    print(f"trainer (model.ts): {len(cpp_params)} parameter tensors, "
          f"{sum(p.numel() for p in ts.parameters())} parameters; names, shapes and order {'equal' if same else 'DIFFER'}")
    if not same:
        for a, b in zip(cpp_params, ref_params):
            if a != b:
                print(f"  first difference: trainer {a} reference {b}")
                break
    ok &= same
    state, _ = u3d_model.read_safetensors(os.path.join(export_dir, "model.safetensors"))
    same = sorted((k, tuple(v.shape)) for k, v in state.items()) == sorted(ref_params)
    print(f"trainer (model.safetensors): tensors {'equal' if same else 'DIFFER'} to the reference's state_dict")
    ok &= same

    # The forward pass with the trained weights, float32 on the CPU.
    ref.load_state_dict(state, strict=True)
    x = torch.randn(1, 1, 64, 64, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = ref(x)
        for name, net in (("trainer model.ts", ts), ("u3d_model.load", u3d_model.load(os.path.join(export_dir, "model.safetensors")))):
            got = net(x)
            err = ((got - want).abs().max() / want.abs().max()).item()
            print(f"{name}: forward on 1x1x64^3, max |difference| / max |output| = {err:.2e}")
            ok &= got.shape == want.shape and err < 1e-4
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

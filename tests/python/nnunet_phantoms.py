#!/usr/bin/env python3
"""Seeded CT-like phantoms as nnU-Net v2 raw datasets, for golden experiment plans.

Usage:
    nnunet_phantoms.py OUT_DIR [--which thick,iso,varying[,large]] [--seed N] [--quiet]

Writes, for each dataset chosen by --which (default: thick,iso,varying), an nnU-Net v2 raw dataset folder

    OUT_DIR/Dataset901_Thick    12 cases, spacing (z, y, x) = 3.0 x 0.8 x 0.8 mm,
                                shape (z, y, x) about 39 x 164 x 163 voxels (+-2, +-3, +-3 per case)
    OUT_DIR/Dataset902_Iso       8 cases, spacing 2.0 x 0.8 x 0.8 mm,
                                shape about 100 x 300 x 300 voxels (+-3, +-4, +-4 per case)
    OUT_DIR/Dataset903_Varying  12 cases, slice spacing from 1.5 to 5.0 mm across the cases (in-plane 0.8 mm);
                                physical extent about 120 mm in z (+-6 mm) and 130 mm in-plane (+-2.4 mm),
                                so the slice count goes from about 80 down to about 24
    OUT_DIR/Dataset904_IsoLarge  8 cases, spacing 2.0 x 0.8 x 0.8 mm, shape about 128 x 384 x 384 voxels
                                (+-3, +-4, +-4); only with --which ...,large. The only one of the four
                                for which nnU-Net's default planner keeps a 3d_lowres configuration
                                (Dataset902_Iso's lowres search ends less than 2x smaller and is dropped).
    OUT_DIR/Dataset905_Tiny      6 cases, spacing 4.0 x 2.4 x 2.4 mm, shape about 24 x 48 x 48 voxels; only with
                                --which ...,tiny: small enough to train on a CPU in a test (the cascade's).

each holding imagesTr/<case>_0000.nii.gz (int16 Hounsfield units), labelsTr/<case>.nii.gz (uint8:
0 background, 1 organ, 2 tumour) and dataset.json (channel_names {"0": "CT"}, labels
{"background": 0, "organ": 1, "tumour": 2}, numTraining, file_ending ".nii.gz"). Cases are named
<dataset>_<index>, e.g. thick_000.

Phantom: a body ellipsoid of soft tissue (40 HU) in air (-1000 HU), longer in z than the field of
view so every slice holds some body; inside it an "organ" ellipsoid (label 1, 60 HU) and in the organ
a small "tumour" sphere (label 2, 100 HU). Each case draws its own offset, sizes, a global HU shift of
+-5 HU and Gaussian noise (sd 12 HU, everywhere, air included) from its own generator, seeded with
(seed, dataset id, case index): a case's output does not depend on which other datasets or cases are
written. Geometry is drawn in millimetres, independent of the voxel grid: the body scales with the
field of view, the organ (18-32 mm semi-axes) and tumour (radius 5-9 mm) have absolute sizes.

Conventions (the part that matters for nnU-Net):
  * Arrays are built in nnU-Net's order (z, y, x), then written with nibabel as
    array.transpose(2, 1, 0), i.e. an array of shape (X, Y, Z) with NIfTI's first index fastest.
  * The affine (qform and sform, code 1, units mm) is diag(0.8, 0.8, sz, 1) in (x, y, z) with the
    origin at 0, so pixdim[1:4] = (0.8, 0.8, sz).
  * nnU-Net reads .nii.gz with SimpleITK (its SimpleITKIO): ITK size and spacing come out as
    (X, Y, Z) and (0.8, 0.8, sz); sitk.GetArrayFromImage gives the array as (Z, Y, X), and nnU-Net
    reverses the spacing to (sz, 0.8, 0.8). So nnU-Net's spacing (z, y, x) and shape (z, y, x) are
    exactly the ones above. (ITK turns the RAS affine into LPS: direction diag(-1, -1, 1); nnU-Net
    only keeps it for writing predictions back.)
  * Air is -1000 +- noise, never exactly 0, so nnU-Net's crop_to_nonzero crops nothing: its
    shapes_after_crop are the written shapes and median_relative_size_after_cropping is 1.

Determinism: the .nii.gz bytes are identical run to run. Each file is serialised with
nibabel's to_bytes() and compressed with gzip.compress(..., mtime=0) (no time stamp, no file name
in the gzip header), so two runs with the same numpy, nibabel and zlib give byte-identical files.
A different zlib could compress differently; the decompressed NIfTI (header + voxels) only depends
on numpy's PCG64 streams and float rounding.

Needs numpy and nibabel only.
"""

import argparse
import gzip
import json
import os
import sys

import nibabel as nib
import numpy as np

DEFAULT_SEED = 901
IN_PLANE_MM = 0.8
AIR_HU, BODY_HU, ORGAN_HU, TUMOUR_HU = -1000.0, 40.0, 60.0, 100.0
NOISE_SD_HU = 12.0
GZIP_LEVEL = 1

# Slice spacings of Dataset903_Varying, case by case (deliberately not sorted).
VARYING_Z_MM = (3.0, 1.5, 4.5, 2.0, 5.0, 2.5, 3.5, 1.75, 4.0, 2.25, 3.25, 4.25)

DATASETS = {
    "thick": dict(id=901, name="Dataset901_Thick", cases=12),
    "iso": dict(id=902, name="Dataset902_Iso", cases=8),
    "varying": dict(id=903, name="Dataset903_Varying", cases=12),
    "large": dict(id=904, name="Dataset904_IsoLarge", cases=8),
    "tiny": dict(id=905, name="Dataset905_Tiny", cases=6),
}
DEFAULT_WHICH = "thick,iso,varying"


def case_grid(which, index, rng):
    """The case's spacing (z, y, x) in mm and shape (z, y, x) in voxels."""
    if which == "thick":
        base, jitter, sz = (39, 164, 163), (2, 3, 3), 3.0
        shape = tuple(int(b + rng.integers(-j, j + 1)) for b, j in zip(base, jitter))
    elif which == "iso":
        base, jitter, sz = (100, 300, 300), (3, 4, 4), 2.0
        shape = tuple(int(b + rng.integers(-j, j + 1)) for b, j in zip(base, jitter))
    elif which == "large":
        base, jitter, sz = (128, 384, 384), (3, 4, 4), 2.0
        shape = tuple(int(b + rng.integers(-j, j + 1)) for b, j in zip(base, jitter))
    elif which == "tiny":  # coarse voxels, for CPU training tests (the cascade's)
        base, jitter = (24, 48, 48), (1, 2, 2)
        shape = tuple(int(b + rng.integers(-j, j + 1)) for b, j in zip(base, jitter))
        return (4.0, 2.4, 2.4), shape
    elif which == "varying":
        sz = VARYING_Z_MM[index]
        extent = (120.0 + rng.uniform(-6.0, 6.0), 130.0 + rng.uniform(-2.4, 2.4), 130.0 + rng.uniform(-2.4, 2.4))
        shape = (int(round(extent[0] / sz)), int(round(extent[1] / IN_PLANE_MM)), int(round(extent[2] / IN_PLANE_MM)))
    else:
        raise ValueError(which)
    return (float(sz), IN_PLANE_MM, IN_PLANE_MM), shape


def ellipsoid(coords, centre, semi_axes):
    """Boolean mask of the voxels whose centres lie inside the axis-aligned ellipsoid (all in mm)."""
    z, y, x = coords
    return (((z - centre[0]) / semi_axes[0]) ** 2 + ((y - centre[1]) / semi_axes[1]) ** 2
            + ((x - centre[2]) / semi_axes[2]) ** 2) <= 1.0


def make_case(which, index, seed):
    """(image int16 (z, y, x), label uint8 (z, y, x), spacing (z, y, x))."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, DATASETS[which]["id"], index]))
    spacing, shape = case_grid(which, index, rng)
    extent = np.array(shape) * np.array(spacing)  # mm, (z, y, x)
    coords = tuple(np.arange(n, dtype=np.float64).reshape([-1 if a == i else 1 for a in range(3)]) * s
                   for i, (n, s) in enumerate(zip(shape, spacing)))
    mid = (np.array(shape) - 1) * np.array(spacing) / 2.0

    # Body: about 75-84 % (y) and 84-94 % (x) of the field of view wide; its z semi-axis is 1.1-1.5 x half
    # the field of view, so it is cut by the first and last slices. Centred within 3 mm of the volume's centre.
    body_c = mid + rng.uniform(-3.0, 3.0, 3)
    body_ax = extent * np.array([rng.uniform(0.55, 0.75), rng.uniform(0.375, 0.42), rng.uniform(0.42, 0.47)])
    body = ellipsoid(coords, body_c, body_ax)

    # Organ: 18-30 mm in z, 20-32 mm in-plane, within 10 / 15 mm of the body's centre; clipped to the body.
    organ_c = body_c + rng.uniform(-1.0, 1.0, 3) * np.array([10.0, 15.0, 15.0])
    organ_ax = np.array([rng.uniform(18.0, 30.0), rng.uniform(20.0, 32.0), rng.uniform(20.0, 32.0)])
    organ = ellipsoid(coords, organ_c, organ_ax) & body

    # Tumour: a sphere of radius 5-9 mm, centred within half the organ's semi-axes; clipped to the organ.
    tumour_r = rng.uniform(5.0, 9.0)
    direction = rng.standard_normal(3)
    direction /= np.linalg.norm(direction)
    tumour_c = organ_c + direction * rng.uniform(0.0, 0.5) * np.maximum(organ_ax - tumour_r, 0.0)
    tumour = ellipsoid(coords, tumour_c, (tumour_r,) * 3) & organ

    label = np.zeros(shape, np.uint8)
    label[organ] = 1
    label[tumour] = 2

    hu = np.full(shape, AIR_HU, np.float32)
    hu[body] = BODY_HU
    hu[organ] = ORGAN_HU
    hu[tumour] = TUMOUR_HU
    hu[body] += np.float32(rng.uniform(-5.0, 5.0))
    hu += rng.standard_normal(shape, dtype=np.float32) * np.float32(NOISE_SD_HU)
    image = np.clip(np.rint(hu), -1024, 3071).astype(np.int16)
    return image, label, spacing


def nifti_gz_bytes(array_zyx, spacing_zyx):
    """A .nii.gz of array (z, y, x): NIfTI array (X, Y, Z), affine diag(sx, sy, sz), deterministic gzip."""
    affine = np.diag([spacing_zyx[2], spacing_zyx[1], spacing_zyx[0], 1.0])
    img = nib.Nifti1Image(np.asarray(array_zyx).transpose(2, 1, 0), affine)
    img.header.set_data_dtype(array_zyx.dtype)
    img.header.set_xyzt_units("mm", "sec")
    img.set_qform(affine, code=1)
    img.set_sform(affine, code=1)
    return gzip.compress(img.to_bytes(), compresslevel=GZIP_LEVEL, mtime=0)


def write_dataset(out_dir, which, seed, log=print):
    spec = DATASETS[which]
    root = os.path.join(out_dir, spec["name"])
    os.makedirs(os.path.join(root, "imagesTr"), exist_ok=True)
    os.makedirs(os.path.join(root, "labelsTr"), exist_ok=True)
    for i in range(spec["cases"]):
        case = f"{which}_{i:03d}"
        image, label, spacing = make_case(which, i, seed)
        with open(os.path.join(root, "imagesTr", case + "_0000.nii.gz"), "wb") as f:
            f.write(nifti_gz_bytes(image, spacing))
        with open(os.path.join(root, "labelsTr", case + ".nii.gz"), "wb") as f:
            f.write(nifti_gz_bytes(label, spacing))
        counts = np.bincount(label.ravel(), minlength=3)
        log(f"{spec['name']}/{case}: shape (z,y,x) {image.shape}, spacing (z,y,x) {spacing}, "
            f"voxels organ {counts[1]} tumour {counts[2]}")
    dataset_json = {
        "channel_names": {"0": "CT"},
        "labels": {"background": 0, "organ": 1, "tumour": 2},
        "numTraining": spec["cases"],
        "file_ending": ".nii.gz",
        "name": spec["name"],
        "description": f"Seeded CT-like phantoms (tests/python/nnunet_phantoms.py, seed {seed})",
    }
    with open(os.path.join(root, "dataset.json"), "w") as f:
        json.dump(dataset_json, f, indent=4)
        f.write("\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", help="folder to write the Dataset9xx_* folders into (an nnUNet_raw)")
    parser.add_argument("--which", default=DEFAULT_WHICH,
                        help=f"comma-separated subset of {', '.join(DATASETS)} (default: {DEFAULT_WHICH})")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"base seed (default {DEFAULT_SEED})")
    parser.add_argument("--quiet", action="store_true", help="print nothing per case")
    args = parser.parse_args(argv)
    chosen = [w.strip() for w in args.which.split(",") if w.strip()]
    unknown = [w for w in chosen if w not in DATASETS]
    if unknown or not chosen:
        parser.error(f"--which: unknown {unknown}; choose from {', '.join(DATASETS)}")
    for which in chosen:
        write_dataset(args.out_dir, which, args.seed, log=(lambda *_: None) if args.quiet else print)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Writes folders of 2D slice phantoms for `trainer import images` tests, with Pillow (PNG) and
tifffile (TIFF), so the reader is tested on files that our own code did not write.

Each patient P<nnn> has --slices slices named TCGA_XX_<4900+p>_19960909_<k>.png (k = 1..S, so a
natural sort differs from a text sort) and masks <stem>_mask.png: a grey ellipse "brain" (intensity
~90 with noise) holding a bright ellipse "tumour" (~200) whose mask is 255 (0 elsewhere). The pixel
(0, 0) of image k holds k, so a test can read the slice order back.

  write_slices.py OUT --patients 12 --slices 8 --size 64 [--format png|tiff16|rgb] [--labels-dir]
                      [--classes 2] [--seed 0]

--format tiff16 writes 16-bit TIFF images (intensities x 100) with 8-bit TIFF masks; rgb writes RGB
PNG images; --labels-dir puts the masks, named as their images, in OUT/labels instead of beside the
images in OUT/images; --classes 3 writes masks with the values 0, 1 (brain) and 2 (tumour).
"""
import argparse
import os

import numpy as np
import tifffile
from PIL import Image


def ellipse(h, w, cy, cx, ry, rx):
    y, x = np.mgrid[0:h, 0:w]
    return ((y - cy) / ry) ** 2 + ((x - cx) / rx) ** 2 <= 1.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--patients", type=int, default=12)
    ap.add_argument("--slices", type=int, default=8)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--format", default="png", choices=["png", "tiff16", "rgb"])
    ap.add_argument("--labels-dir", action="store_true")
    ap.add_argument("--classes", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    images = os.path.join(a.out, "images")
    labels = os.path.join(a.out, "labels") if a.labels_dir else images
    os.makedirs(images, exist_ok=True)
    os.makedirs(labels, exist_ok=True)
    n = a.size
    for p in range(a.patients):
        cy, cx = n / 2 + rng.uniform(-3, 3), n / 2 + rng.uniform(-3, 3)
        for k in range(1, a.slices + 1):
            brain = ellipse(n, n, cy, cx, n * 0.38, n * 0.3)
            ty, tx = cy + rng.uniform(-6, 6), cx + rng.uniform(-5, 5)
            tumour = ellipse(n, n, ty, tx, rng.uniform(4, 9), rng.uniform(4, 9)) & brain
            img = np.zeros((n, n), np.float64)
            img[brain] = 90
            img[tumour] = 200
            img += rng.normal(0, 12, (n, n)) * brain
            img = np.clip(img, 1, 255)
            img[0, 0] = k
            if a.classes == 2:
                mask = (tumour * 255).astype(np.uint8)
            else:
                mask = brain.astype(np.uint8) + tumour.astype(np.uint8)
            stem = f"TCGA_XX_{4900 + p}_19960909_{k}"
            mask_name = stem + ("" if a.labels_dir else "_mask")
            if a.format == "tiff16":
                tifffile.imwrite(os.path.join(images, stem + ".tif"), (img * 100).astype(np.uint16))
                tifffile.imwrite(os.path.join(labels, mask_name + ".tif"), mask)
            else:
                im = Image.fromarray(img.astype(np.uint8))
                if a.format == "rgb":
                    im = im.convert("RGB")
                im.save(os.path.join(images, stem + ".png"))
                Image.fromarray(mask).save(os.path.join(labels, mask_name + ".png"))


if __name__ == "__main__":
    main()

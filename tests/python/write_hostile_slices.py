#!/usr/bin/env python3
"""Writes the hostile 2D slice folders of ImagesHostile.* (tests/integration/images_hostile_test.cpp)
with Pillow, numpy and zlib, so `trainer import images` reads files our own code did not write.

  write_hostile_slices.py OUT

Each folder below OUT is one import:
  sizes/      a 32x32 image whose mask is 16x32
  kinds/      grey, RGB and palette images; their masks: palette (colours red, green on indices 1, 2,
              stored as a 2-bit palette), RGB whose pixels are grey (0, 1, 2) and 16-bit grey (0, 1, 2);
              one more grey image whose mask is grey + alpha, the labels half transparent
  rgbmask/    an RGB mask with true colours (red, green)
  mask16/     a 16-bit mask holding the value 300
  tiny/       two patients of three 1x1 slices
  truncated/  a PNG cut after half its bytes
  huge/       a PNG whose header declares 100000 x 100000 8-bit grey pixels, 100 bytes of data
"""
import os
import struct
import sys
import zlib

import numpy as np
from PIL import Image


def folder(out, name):
    path = os.path.join(out, name)
    os.makedirs(path, exist_ok=True)
    return path


def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def main():
    out = sys.argv[1]
    rng = np.random.default_rng(0)
    grey = rng.integers(1, 255, (32, 32)).astype(np.uint8)
    labels = np.zeros((32, 32), np.uint8)
    labels[4:12, 4:20] = 1
    labels[16:28, 8:24] = 2

    d = folder(out, "sizes")
    Image.fromarray(grey).save(os.path.join(d, "p_1.png"))
    Image.fromarray(labels[:16]).save(os.path.join(d, "p_1_mask.png"))

    d = folder(out, "kinds")
    Image.fromarray(grey).save(os.path.join(d, "grey_1.png"))
    Image.fromarray(grey).convert("RGB").save(os.path.join(d, "rgb_1.png"))
    pal = Image.fromarray(grey // 64)  # a palette image of 4 grey levels
    pal = pal.convert("P")
    pal.putpalette([0, 0, 0, 80, 80, 80, 160, 160, 160, 240, 240, 240])
    pal.save(os.path.join(d, "pal_1.png"))
    mask = Image.fromarray(labels).convert("P")
    mask.putpalette([0, 0, 0, 255, 0, 0, 0, 255, 0])  # red 1, green 2: libpng's grey 126 and 219
    mask.save(os.path.join(d, "grey_1_mask.png"), bits=2)
    Image.fromarray(labels).convert("RGB").save(os.path.join(d, "rgb_1_mask.png"))
    Image.fromarray(labels.astype(np.uint16)).save(os.path.join(d, "pal_1_mask.png"))
    Image.fromarray(grey).save(os.path.join(d, "alpha_1.png"))
    la = np.stack([labels, np.where(labels > 0, 128, 0).astype(np.uint8)], axis=-1)  # half-transparent labels
    Image.fromarray(la).save(os.path.join(d, "alpha_1_mask.png"))

    d = folder(out, "rgbmask")
    Image.fromarray(grey).save(os.path.join(d, "p_1.png"))
    colours = np.zeros((32, 32, 3), np.uint8)
    colours[labels == 1] = (255, 0, 0)
    colours[labels == 2] = (0, 255, 0)
    Image.fromarray(colours).save(os.path.join(d, "p_1_mask.png"))

    d = folder(out, "mask16")
    Image.fromarray(grey).save(os.path.join(d, "p_1.png"))
    big = labels.astype(np.uint16)
    big[0, 0] = 300
    Image.fromarray(big).save(os.path.join(d, "p_1_mask.png"))

    d = folder(out, "tiny")
    for p in (1, 2):
        for k in (1, 2, 3):
            Image.fromarray(np.full((1, 1), 10 * k + p, np.uint8)).save(os.path.join(d, f"p{p}_{k}.png"))
            Image.fromarray(np.full((1, 1), k % 2, np.uint8)).save(os.path.join(d, f"p{p}_{k}_mask.png"))

    d = folder(out, "truncated")
    Image.fromarray(grey).save(os.path.join(d, "p_1.png"))
    Image.fromarray(labels).save(os.path.join(d, "whole.png"))
    data = open(os.path.join(d, "whole.png"), "rb").read()
    os.remove(os.path.join(d, "whole.png"))
    open(os.path.join(d, "p_1_mask.png"), "wb").write(data[: len(data) // 2])

    d = folder(out, "huge")
    Image.fromarray(grey).save(os.path.join(d, "p_1.png"))
    ihdr = struct.pack(">IIBBBBB", 100000, 100000, 8, 0, 0, 0, 0)
    forged = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(bytes(100)))
              + chunk(b"IEND", b""))
    open(os.path.join(d, "p_1_mask.png"), "wb").write(forged)


if __name__ == "__main__":
    main()

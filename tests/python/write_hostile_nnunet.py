#!/usr/bin/env python3
"""Writes the hostile nnU-Net raw folders of PlanHostile.* (tests/integration/plan_hostile_test.cpp)
with nibabel, so `trainer import nnunet` and `trainer plan` see files our own code did not write.

  write_hostile_nnunet.py OUT

Each folder OUT/<name> is an nnU-Net raw dataset of one channel "CT" and labels
{background, organ, tumour}; the cases are 12 x 24 x 24 voxels (x, y, z in the file) of noise around
100 with an organ block 200 brighter:
  one/         one training case
  background/  three training cases whose labels are all background
  testonly/    three training cases of labels 0 and 1 and two test cases; tumour (2) is in no
               training label (nnU-Net's test cases carry none)
  aniso/       three training cases of 0.5 x 0.5 x 10 mm voxels (x, y, z): 10 mm between slices
"""
import json
import os
import sys

import nibabel as nib
import numpy as np


def write_case(folder, name, image, labels, spacing):
    affine = np.diag(list(spacing) + [1.0])
    os.makedirs(os.path.join(folder, "imagesTr"), exist_ok=True)
    os.makedirs(os.path.join(folder, "labelsTr"), exist_ok=True)
    nib.save(nib.Nifti1Image(image.astype(np.float32), affine), os.path.join(folder, "imagesTr", name + "_0000.nii.gz"))
    if labels is not None:
        nib.save(nib.Nifti1Image(labels.astype(np.uint8), affine), os.path.join(folder, "labelsTr", name + ".nii.gz"))


def dataset(out, name, cases, labels_of, spacing=(1.0, 1.0, 1.0), test_cases=0):
    folder = os.path.join(out, name)
    rng = np.random.default_rng(len(name))
    shape = (12, 24, 24)
    for i in range(cases + test_cases):
        image = rng.normal(100, 10, shape)
        labels = labels_of(i, shape)
        image[labels > 0] += 200
        if i < cases:
            write_case(folder, f"h_{i:03d}", image, labels, spacing)
        else:
            os.makedirs(os.path.join(folder, "imagesTs"), exist_ok=True)
            affine = np.diag(list(spacing) + [1.0])
            nib.save(nib.Nifti1Image(image.astype(np.float32), affine),
                     os.path.join(folder, "imagesTs", f"h_{i:03d}_0000.nii.gz"))
    with open(os.path.join(folder, "dataset.json"), "w") as f:
        json.dump({"channel_names": {"0": "CT"}, "labels": {"background": 0, "organ": 1, "tumour": 2},
                   "numTraining": cases, "file_ending": ".nii.gz"}, f)


def organ_and_tumour(i, shape):
    labels = np.zeros(shape, np.uint8)
    labels[3:9, 6:18, 6:18] = 1
    labels[5:7, 10:14, 10:14] = 2
    return labels


def organ_only(i, shape):
    labels = np.zeros(shape, np.uint8)
    labels[3:9, 6:18, 6:18] = 1
    return labels


def main():
    out = sys.argv[1]
    dataset(out, "one", 1, organ_and_tumour)
    dataset(out, "background", 3, lambda i, shape: np.zeros(shape, np.uint8))
    dataset(out, "testonly", 3, organ_only, test_cases=2)
    dataset(out, "aniso", 3, organ_and_tumour, spacing=(0.5, 0.5, 10.0))


if __name__ == "__main__":
    main()

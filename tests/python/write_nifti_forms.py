#!/usr/bin/env python3
"""Rewrites NIfTI files with nibabel so their qform disagrees with their sform (issue 54's hostile
`predict -i` case, PredictFilesHostile.*): the sform kept, the qform shifted by 30 mm along x and
rotated 90 degrees in plane, both codes 1 (scanner), voxels unchanged.

  write_nifti_forms.py IN.nii.gz OUT.nii.gz [IN2 OUT2 ...]
"""
import sys

import nibabel as nib
import numpy as np


def main():
    args = sys.argv[1:]
    for src, dst in zip(args[0::2], args[1::2]):
        img = nib.load(src)
        sform = img.get_sform()
        turn = np.array([[0, -1, 0, 30], [1, 0, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]], float)
        out = nib.Nifti1Image(np.asanyarray(img.dataobj), sform, img.header)
        out.set_sform(sform, code=1)
        out.set_qform(turn @ sform, code=1)
        nib.save(out, dst)


if __name__ == "__main__":
    main()

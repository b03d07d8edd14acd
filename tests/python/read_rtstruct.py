"""Reads an RT Structure Set with rt-utils for the DICOM tests: each ROI's mask on its CT series.

  read_rtstruct.py CT_DIR RTSTRUCT.dcm OUT_PREFIX   -> JSON {"names": [...]} on stdout, and per ROI
                                                      OUT_PREFIX<k>.u8: (slices, rows, columns) uint8
                                                      in the order of the names, slices along the normal
"""
import json
import sys

import numpy as np
from rt_utils import RTStructBuilder, image_helper

# rt-utils 1.2.7 sizes its masks (Columns, Rows) but fills them at [row][column] (OpenCV's y, x), which
# clips the rows of a non-square image (the tests' CT is 48 x 40). Its two mask-shape helpers are
# replaced by (Rows, Columns) ones; the reading itself (polygon to pixels, fillPoly) stays rt-utils'.
image_helper.create_empty_slice_mask = lambda s: np.zeros((int(s.Rows), int(s.Columns)), dtype=bool)
image_helper.create_empty_series_mask = lambda d: np.zeros((int(d[0].Rows), int(d[0].Columns), len(d)), dtype=bool)


def main():
    rt = RTStructBuilder.create_from(dicom_series_path=sys.argv[1], rt_struct_path=sys.argv[2])
    names = rt.get_roi_names()
    for k, name in enumerate(names):
        mask = rt.get_roi_mask_by_name(name)  # rows, columns, slices
        np.ascontiguousarray(np.transpose(mask, (2, 0, 1))).astype(np.uint8).tofile(f"{sys.argv[3]}{k}.u8")
    print(json.dumps({"names": names}))


if __name__ == "__main__":
    main()

"""Reads an RT Dose with pydicom for the DICOM tests: the attributes a planning system places it by,
and the dose in Gy (pixels x DoseGridScaling) as raw little-endian float32 (frames, rows, columns).

  read_rtdose.py RTDOSE.dcm SOURCE_CT_SLICE.dcm DOSE_OUT.f32   -> one line of JSON on stdout
"""
import json
import sys

import numpy as np
import pydicom


def main():
    rd = pydicom.dcmread(sys.argv[1])
    ct = pydicom.dcmread(sys.argv[2], stop_before_pixels=True)
    scaling = float(rd.DoseGridScaling)
    (rd.pixel_array.astype(np.float64) * scaling).astype("<f4").tofile(sys.argv[3])
    print(json.dumps({
        "sop_class": str(rd.SOPClassUID),
        "modality": rd.Modality,
        "same_patient": rd.PatientID == ct.PatientID and str(rd.PatientName) == str(ct.PatientName),
        "same_study": rd.StudyInstanceUID == ct.StudyInstanceUID,
        "same_frame_of_reference": rd.FrameOfReferenceUID == ct.FrameOfReferenceUID,
        "new_series": rd.SeriesInstanceUID != ct.SeriesInstanceUID,
        "position": [float(v) for v in rd.ImagePositionPatient],
        "orientation": [float(v) for v in rd.ImageOrientationPatient],
        "pixel_spacing": [float(v) for v in rd.PixelSpacing],
        "offsets": [float(v) for v in rd.GridFrameOffsetVector],
        "frame_increment_pointer": str(rd.FrameIncrementPointer),
        "shape": [int(rd.NumberOfFrames), int(rd.Rows), int(rd.Columns)],
        "units": rd.DoseUnits,
        "scaling": scaling,
        "referenced_plan": (str(rd.ReferencedRTPlanSequence[0].ReferencedSOPInstanceUID)
                            if "ReferencedRTPlanSequence" in rd else ""),
    }))


if __name__ == "__main__":
    main()

"""Writes one patient's DICOM-RT export with independent writers (pydicom, rt-utils) for the DICOM tests.

  write_dicom.py OUT_DIR --patient P1 [--shuffle SEED] [--nested] [--no-rt] [--dose-descending]
                 [--extra-plan] [--seg binary|fractional] [--uids FILE.json]
                 [--bare] [--un-dose] [--struct-elsewhere] [--far-roi]

OUT_DIR receives a CT series (pydicom; int16 with RescaleIntercept -1024: HU = i + 2 j + 3 k - 1024 at
column i, row j, slice k counted along the slice normal; InstanceNumber deliberately reversed), an RT
Structure Set (rt-utils) holding the sphere mask "Sphere" (centre CENTRE mm, radius RADIUS mm; rt-utils'
mask axes are rows, columns, slices sorted along the normal) and an RT Dose (pydicom; a grid of its own
that covers the CT; dose(x, y, z) = DOSE_A + DOSE_B . (x, y, z) Gy with DoseGridScaling 1e-4) that
references an RT Plan (pydicom; target prescriptions 70 and 56 Gy, an organ at risk at 45 Gy, so the
prescription is PRESCRIPTION_GY). --extra-plan adds a second RT Plan (60 Gy) that no RT Dose references.
The constants are the tests' (tests/integration/dicom_cli_test.cpp repeats them). --shuffle gives the
files random names, --nested spreads them over nested folders, --dose-descending stacks the RT Dose's
frames against the normal (ImagePositionPatient at the top frame, GridFrameOffsetVector 0, -3, -6, ...).
--seg adds a DICOM SEG (highdicom) of two segments on the CT: "Sphere" (the sphere mask) and "Box"
(slices BOX[0], rows BOX[1], columns BOX[2], half-open ranges); empty slices are left out, as highdicom
does. Its FRACTIONAL variant holds 0.8 inside them and 0.3 on a one-voxel ring around the sphere.
--uids writes the UIDs the import records as JSON: study, series, frame_of_reference, rtstruct, rtdose
rtplan and seg (SOP Instance UIDs of the RT objects; the referenced plan).
Hardening modes (tests/integration/dicom_hardening_test.cpp): --bare rewrites every file as a bare data
set (no preamble, no file meta, implicit VR little endian); --un-dose stores the RT Dose's PatientID,
Modality, DoseUnits and DoseGridScaling with VR UN (their values in implicit VR encoding, as a converter
that kept unknown VRs does); --struct-elsewhere makes the RT Structure Set reference a series UID that
is not in the export (recorded as rtstruct_referenced_series in --uids); --far-roi adds an ROI "Far"
to the RT Structure Set: the sphere's contours moved 500 mm along x, entirely off the CT.
"""
import json
import argparse
import os
import random

import numpy as np
import pydicom
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.uid import ExplicitVRLittleEndian, generate_uid

ROWS, COLS, SLICES = 48, 40, 24
# Equal in-plane spacing: rt-utils 1.2.7 takes PixelSpacing as (x, y), the reverse of DICOM (row step, column step).
PIXEL_SPACING = (1.25, 1.25)  # mm between rows, between columns
SLICE_SPACING = 2.5
ORIGIN = (-30.0, -40.0, 100.0)
CENTRE = (-6.0, -6.0, 128.0)
RADIUS = 12.0
DOSE_ORIGIN = (-35.0, -45.0, 95.0)
DOSE_SPACING = (3.0, 2.5)  # rows, columns
DOSE_ROWS, DOSE_COLS, DOSE_FRAMES, DOSE_FRAME_STEP = 40, 40, 24, 3.0
DOSE_A, DOSE_B = 10.0, (0.1, 0.05, 0.2)
CT_IMAGE_STORAGE = "1.2.840.10008.5.1.4.1.1.2"
RT_DOSE_STORAGE = "1.2.840.10008.5.1.4.1.1.481.2"
RT_PLAN_STORAGE = "1.2.840.10008.5.1.4.1.1.481.5"
PRESCRIPTION_GY = 70.0
BOX = ((2, 6), (2, 10), (2, 10))


def base(patient, study_uid, modality, sop_class, series_uid):
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = sop_class
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = Dataset()
    ds.file_meta = meta
    ds.SOPClassUID = sop_class
    ds.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
    ds.PatientName = f"Test^{patient}"
    ds.PatientID = patient
    ds.StudyInstanceUID = study_uid
    ds.SeriesInstanceUID = series_uid
    ds.Modality = modality
    ds.StudyDate, ds.StudyTime = "20260101", "120000"
    ds.StudyID = "1"
    ds.SeriesNumber = 1
    ds.PatientBirthDate = ds.PatientSex = ds.ReferringPhysicianName = ds.AccessionNumber = ""
    return ds


def write_ct(folder, patient, study_uid, frame_uid):
    series_uid = generate_uid()
    os.makedirs(folder, exist_ok=True)
    paths = []
    write_ct.series_uid = series_uid
    for k in range(SLICES):
        ds = base(patient, study_uid, "CT", CT_IMAGE_STORAGE, series_uid)
        ds.FrameOfReferenceUID = frame_uid
        ds.InstanceNumber = SLICES - k  # reversed: slices are ordered by position, never by number
        ds.ImagePositionPatient = [ORIGIN[0], ORIGIN[1], ORIGIN[2] + k * SLICE_SPACING]
        ds.ImageOrientationPatient = [1, 0, 0, 0, 1, 0]
        ds.PixelSpacing = list(PIXEL_SPACING)
        ds.SliceThickness = SLICE_SPACING
        ds.Rows, ds.Columns = ROWS, COLS
        ds.SamplesPerPixel = 1
        ds.PhotometricInterpretation = "MONOCHROME2"
        ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 16, 15, 1
        ds.RescaleSlope, ds.RescaleIntercept = 1, -1024
        j, i = np.meshgrid(np.arange(ROWS), np.arange(COLS), indexing="ij")
        ds.PixelData = (i + 2 * j + 3 * k).astype("<i2").tobytes()
        path = os.path.join(folder, f"ct_{k:03d}.dcm")
        ds.save_as(path, enforce_file_format=True)
        paths.append(path)
    return paths


def sphere_mask():
    j, i, k = np.meshgrid(np.arange(ROWS), np.arange(COLS), np.arange(SLICES), indexing="ij")
    x = ORIGIN[0] + i * PIXEL_SPACING[1]
    y = ORIGIN[1] + j * PIXEL_SPACING[0]
    z = ORIGIN[2] + k * SLICE_SPACING
    return (x - CENTRE[0]) ** 2 + (y - CENTRE[1]) ** 2 + (z - CENTRE[2]) ** 2 <= RADIUS**2  # rows, cols, slices


def write_rtstruct(ct_folder, path):
    from rt_utils import RTStructBuilder

    rt = RTStructBuilder.create_new(dicom_series_path=ct_folder)
    rt.add_roi(mask=sphere_mask(), name="Sphere")
    rt.save(path)
    return pydicom.dcmread(path, stop_before_pixels=True).SOPInstanceUID


def write_seg(ct_paths, path, kind):
    import highdicom as hd
    from pydicom.sr.codedict import codes

    ct = sorted((pydicom.dcmread(p) for p in ct_paths), key=lambda d: float(d.ImagePositionPatient[2]))
    sphere = sphere_mask().transpose(2, 0, 1)  # slices, rows, columns
    box = np.zeros_like(sphere)
    box[slice(*BOX[0]), slice(*BOX[1]), slice(*BOX[2])] = True
    if kind == "binary":
        pixels = np.stack([sphere, box], axis=-1).astype(np.uint8)
        seg_type = hd.seg.SegmentationTypeValues.BINARY
    else:
        ring = sphere.copy()
        for axis in (1, 2):
            for shift in (1, -1):
                ring |= np.roll(sphere, shift, axis=axis)
        pixels = np.stack([np.where(sphere, 0.8, np.where(ring, 0.3, 0.0)), box * 0.8], axis=-1).astype(np.float32)
        seg_type = hd.seg.SegmentationTypeValues.FRACTIONAL
    descriptions = [
        hd.seg.SegmentDescription(segment_number=n + 1, segment_label=label,
                                  segmented_property_category=codes.SCT.Tissue,
                                  segmented_property_type=codes.SCT.Tissue,
                                  algorithm_type=hd.seg.SegmentAlgorithmTypeValues.MANUAL)
        for n, label in enumerate(["Sphere", "Box"])
    ]
    seg = hd.seg.Segmentation(source_images=ct, pixel_array=pixels, segmentation_type=seg_type,
                              segment_descriptions=descriptions, series_instance_uid=generate_uid(),
                              series_number=2, sop_instance_uid=generate_uid(), instance_number=1,
                              manufacturer="test", manufacturer_model_name="write_dicom.py",
                              software_versions="1", device_serial_number="1")
    seg.save_as(path)
    return str(seg.SOPInstanceUID)


def write_rtplan(path, patient, study_uid, frame_uid, targets):
    ds = base(patient, study_uid, "RTPLAN", RT_PLAN_STORAGE, generate_uid())
    ds.FrameOfReferenceUID = frame_uid
    ds.RTPlanLabel, ds.RTPlanGeometry = "test", "PATIENT"
    items = []
    for n, gy in enumerate(targets, start=1):
        item = Dataset()
        item.DoseReferenceNumber, item.DoseReferenceStructureType = n, "SITE"
        item.DoseReferenceType, item.TargetPrescriptionDose = "TARGET", gy
        items.append(item)
    oar = Dataset()
    oar.DoseReferenceNumber, oar.DoseReferenceStructureType = len(items) + 1, "SITE"
    oar.DoseReferenceType, oar.OrganAtRiskMaximumDose = "ORGAN_AT_RISK", 45.0
    ds.DoseReferenceSequence = items + [oar]
    group = Dataset()
    group.FractionGroupNumber, group.NumberOfFractionsPlanned = 1, 35
    ds.FractionGroupSequence = [group]
    ds.save_as(path, enforce_file_format=True)
    return ds.SOPInstanceUID


def write_rtdose(path, patient, study_uid, frame_uid, plan_uid, descending=False):
    ds = base(patient, study_uid, "RTDOSE", RT_DOSE_STORAGE, generate_uid())
    ds.FrameOfReferenceUID = frame_uid
    plan = Dataset()
    plan.ReferencedSOPClassUID, plan.ReferencedSOPInstanceUID = RT_PLAN_STORAGE, plan_uid
    ds.ReferencedRTPlanSequence = [plan]
    step = -DOSE_FRAME_STEP if descending else DOSE_FRAME_STEP
    top = DOSE_ORIGIN[2] + (DOSE_FRAMES - 1) * DOSE_FRAME_STEP if descending else DOSE_ORIGIN[2]
    ds.ImagePositionPatient = [DOSE_ORIGIN[0], DOSE_ORIGIN[1], top]
    ds.ImageOrientationPatient = [1, 0, 0, 0, 1, 0]
    ds.PixelSpacing = list(DOSE_SPACING)
    ds.Rows, ds.Columns, ds.NumberOfFrames = DOSE_ROWS, DOSE_COLS, DOSE_FRAMES
    ds.GridFrameOffsetVector = [f * step for f in range(DOSE_FRAMES)]
    ds.FrameIncrementPointer = pydicom.tag.Tag(0x3004, 0x000C)
    ds.SamplesPerPixel = 1
    ds.PhotometricInterpretation = "MONOCHROME2"
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 32, 32, 31, 0
    ds.DoseUnits, ds.DoseType, ds.DoseSummationType = "GY", "PHYSICAL", "PLAN"
    ds.DoseGridScaling = 1e-4
    f, j, i = np.meshgrid(np.arange(DOSE_FRAMES), np.arange(DOSE_ROWS), np.arange(DOSE_COLS), indexing="ij")
    x = DOSE_ORIGIN[0] + i * DOSE_SPACING[1]
    y = DOSE_ORIGIN[1] + j * DOSE_SPACING[0]
    z = top + f * step
    gy = DOSE_A + DOSE_B[0] * x + DOSE_B[1] * y + DOSE_B[2] * z
    ds.PixelData = np.round(gy / 1e-4).astype("<u4").tobytes()
    ds.save_as(path, enforce_file_format=True)
    return ds.SOPInstanceUID


def make_bare(path):
    ds = pydicom.dcmread(path)
    ds.preamble = None
    ds.file_meta = FileMetaDataset()
    pydicom.dcmwrite(path, ds, implicit_vr=True, little_endian=True, enforce_file_format=False)


def make_un(path, keywords):
    from pydicom.dataelem import DataElement

    pydicom.config.replace_un_with_known_vr = False  # else pydicom gives them their VR back
    ds = pydicom.dcmread(path)
    for keyword in keywords:
        tag = pydicom.datadict.tag_for_keyword(keyword)
        raw = pydicom.filebase.DicomBytesIO()
        raw.is_little_endian, raw.is_implicit_VR = True, True
        pydicom.filewriter.write_data_element(raw, ds[tag])
        value = raw.getvalue()[8:]  # the value without tag and length (implicit VR)
        del ds[tag]
        ds.add(DataElement(tag, "UN", value))
    ds.save_as(path, enforce_file_format=True)


def edit_rtstruct(path, elsewhere, far):
    import copy

    ds = pydicom.dcmread(path)
    if elsewhere:
        uid = generate_uid()
        for frame in ds.ReferencedFrameOfReferenceSequence:
            for study in frame.RTReferencedStudySequence:
                for series in study.RTReferencedSeriesSequence:
                    series.SeriesInstanceUID = uid
        edit_rtstruct.series_uid = uid
    if far:
        roi = copy.deepcopy(ds.StructureSetROISequence[0])
        roi.ROINumber, roi.ROIName = 99, "Far"
        ds.StructureSetROISequence.append(roi)
        contour = copy.deepcopy(ds.ROIContourSequence[0])
        contour.ReferencedROINumber = 99
        for c in contour.ContourSequence:
            data = [float(v) for v in c.ContourData]
            c.ContourData = [v + 500.0 if n % 3 == 0 else v for n, v in enumerate(data)]
        ds.ROIContourSequence.append(contour)
    ds.save_as(path)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--patient", required=True)
    p.add_argument("--shuffle", type=int, default=None)
    p.add_argument("--nested", action="store_true")
    p.add_argument("--no-rt", action="store_true")
    p.add_argument("--dose-descending", action="store_true")
    p.add_argument("--extra-plan", action="store_true")
    p.add_argument("--seg", choices=["binary", "fractional"], default=None)
    p.add_argument("--uids", default=None)
    p.add_argument("--bare", action="store_true")
    p.add_argument("--un-dose", action="store_true")
    p.add_argument("--struct-elsewhere", action="store_true")
    p.add_argument("--far-roi", action="store_true")
    a = p.parse_args()
    study_uid, frame_uid = generate_uid(), generate_uid()
    work = os.path.join(a.out, a.patient)
    ct_folder = os.path.join(work, "ct")
    paths = write_ct(ct_folder, a.patient, study_uid, frame_uid)
    uids = {"study": study_uid, "series": write_ct.series_uid, "frame_of_reference": frame_uid}
    if not a.no_rt:
        paths.append(os.path.join(work, "rtstruct.dcm"))
        uids["rtstruct"] = write_rtstruct(ct_folder, paths[-1])
        if a.extra_plan:  # first in file order: the one the RT Dose references must still win
            paths.append(os.path.join(work, "aplan.dcm"))
            write_rtplan(paths[-1], a.patient, study_uid, frame_uid, [60.0])
        paths.append(os.path.join(work, "rtplan.dcm"))
        uids["rtplan"] = write_rtplan(paths[-1], a.patient, study_uid, frame_uid, [PRESCRIPTION_GY, 56.0])
        paths.append(os.path.join(work, "rtdose.dcm"))
        uids["rtdose"] = write_rtdose(paths[-1], a.patient, study_uid, frame_uid, uids["rtplan"], a.dose_descending)
        if a.un_dose:
            make_un(paths[-1], ["PatientID", "Modality", "DoseUnits", "DoseGridScaling"])
        if a.struct_elsewhere or a.far_roi:
            edit_rtstruct(os.path.join(work, "rtstruct.dcm"), a.struct_elsewhere, a.far_roi)
            if a.struct_elsewhere:
                uids["rtstruct_referenced_series"] = edit_rtstruct.series_uid
    if a.seg:
        ct_paths = list(paths[:SLICES])
        paths.append(os.path.join(work, "seg.dcm"))
        uids["seg"] = write_seg(ct_paths, paths[-1], a.seg)
    if a.bare:
        for path in paths:
            make_bare(path)
    if a.uids:
        with open(a.uids, "w") as f:
            json.dump(uids, f)
    if a.shuffle is not None or a.nested:
        rng = random.Random(a.shuffle or 0)
        rng.shuffle(paths)
        for n, old in enumerate(paths):
            sub = os.path.join(*[f"d{rng.randrange(3)}" for _ in range(1 + n % 3)]) if a.nested else ""
            name = f"{rng.getrandbits(48):012x}" if a.shuffle is not None else os.path.basename(old)
            new = os.path.join(a.out, sub, f"{a.patient}_{name}")
            os.makedirs(os.path.dirname(new), exist_ok=True)
            os.replace(old, new)


if __name__ == "__main__":
    main()

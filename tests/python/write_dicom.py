"""Writes one patient's DICOM-RT export with independent writers (pydicom, rt-utils) for the DICOM tests.

  write_dicom.py OUT_DIR --patient P1 [--shuffle SEED] [--nested] [--no-rt] [--dose-descending]
                 [--extra-plan] [--seg binary|fractional] [--uids FILE.json]
                 [--bare] [--un-dose] [--struct-elsewhere] [--far-roi]
                 [--folder NAME] [--ct VARIANT] [--name TEXT --charset CHARSET] [--empty-roi]
                 [--dose-grid larger|smaller|shifted|disjoint] [--dicomdir]
  write_dicom.py JOB + JOB + ...   (several patients in one run; each JOB is the arguments above)

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
Series hardening (tests/integration/dicom_series_test.cpp): --folder puts the patient under OUT/NAME
instead of OUT/PATIENT (a PatientID with '/' or '..'); --ct VARIANT changes the CT series: `uneven`
(slices from the 13th on 3.0 mm apart), `duplicate` (slice 10 twice, another SOP instance), `tilt`
(15 degree gantry tilt: positions move along y by step * tan 15), `oblique` (ImageOrientationPatient
turned 20 degrees about x, OBLIQUE_ROW/OBLIQUE_COL; slices along its normal), `rescale` (slope 0.5,
intercept -1000.5: HU = 0.5 (i + 2 j + 3 k) - 1000.5), `u8` (8-bit unsigned pixels), `s16` (signed
16-bit stored values i + 2 j + 3 k - 1024, intercept 0), `s12` (signed 12 bits in 16, BitsStored 12,
HighBit 11, the upper 4 bits 0: a negative value is not sign-extended); every variant but rescale keeps
HU = i + 2 j + 3 k - 1024. --name and --charset write PatientName (and SpecificCharacterSet, e.g.
'ISO_IR 100' or 'ISO_IR 192') in every file. --empty-roi adds two ROIs without contours to the RT
Structure Set: "Empty" (a ROIContourSequence item without ContourSequence, as planning systems export
an empty structure) and "Unlisted" (no ROIContourSequence item). --dose-grid writes the RT Dose on
another grid (DOSE_GRIDS: larger and coarser, smaller than the CT, shifted to cover part of it, or
1000 mm away). --dicomdir rewrites the patient's files as a File-set (pydicom's FileSet: a DICOMDIR
and PT*/ST*/SE*/IM* files).
"""
import json
import argparse
import math
import os
import random
import shutil
import sys

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
OBLIQUE_DEGREES = 20.0
OBLIQUE_ROW = (1.0, 0.0, 0.0)
OBLIQUE_COL = (0.0, math.cos(math.radians(OBLIQUE_DEGREES)), math.sin(math.radians(OBLIQUE_DEGREES)))
TILT_DEGREES = 15.0
# --dose-grid: origin (x, y, z), spacing (rows, columns), rows, columns, frames, frame step.
DOSE_GRIDS = {
    "larger": ((-80.0, -90.0, 60.0), (4.0, 4.0), 50, 50, 40, 4.0),
    "smaller": ((-10.0, -20.0, 110.0), (2.0, 2.0), 16, 16, 11, 3.0),
    "shifted": ((-9.7, -45.7, 96.1), (3.0, 2.5), 40, 40, 24, 3.0),
    "disjoint": ((965.0, -45.0, 95.0), (3.0, 2.5), 40, 40, 24, 3.0),
}


NAME = {"text": None, "charset": None}  # --name, --charset


def base(patient, study_uid, modality, sop_class, series_uid):
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = sop_class
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = Dataset()
    ds.file_meta = meta
    ds.SOPClassUID = sop_class
    ds.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
    if NAME["charset"]:
        ds.SpecificCharacterSet = NAME["charset"]
    ds.PatientName = NAME["text"] if NAME["text"] is not None else f"Test^{patient}"
    ds.PatientID = patient
    ds.StudyInstanceUID = study_uid
    ds.SeriesInstanceUID = series_uid
    ds.Modality = modality
    ds.StudyDate, ds.StudyTime = "20260101", "120000"
    ds.StudyID = "1"
    ds.SeriesNumber = 1
    ds.PatientBirthDate = ds.PatientSex = ds.ReferringPhysicianName = ds.AccessionNumber = ""
    return ds


def ct_geometry(variant):
    """Row direction, column direction, and the position of slice k (tilt and unevenness included)."""
    row, col = ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0)) if variant != "oblique" else (OBLIQUE_ROW, OBLIQUE_COL)
    normal = np.cross(row, col)

    def position(k):
        along = k * SLICE_SPACING + (0.5 * (k - 12) if variant == "uneven" and k > 12 else 0.0)
        p = np.array(ORIGIN) + along * normal
        if variant == "tilt":
            p[1] += k * SLICE_SPACING * math.tan(math.radians(TILT_DEGREES))
        return [float(v) for v in p]

    return row, col, position


def write_ct(folder, patient, study_uid, frame_uid, variant="plain"):
    series_uid = generate_uid()
    os.makedirs(folder, exist_ok=True)
    paths = []
    write_ct.series_uid = series_uid
    row, col, position = ct_geometry(variant)
    for k in range(SLICES):
        ds = base(patient, study_uid, "CT", CT_IMAGE_STORAGE, series_uid)
        ds.FrameOfReferenceUID = frame_uid
        ds.InstanceNumber = SLICES - k  # reversed: slices are ordered by position, never by number
        ds.ImagePositionPatient = position(k)
        ds.ImageOrientationPatient = list(row) + list(col)
        if variant == "tilt":
            ds.GantryDetectorTilt = TILT_DEGREES
        ds.PixelSpacing = list(PIXEL_SPACING)
        ds.SliceThickness = SLICE_SPACING
        ds.Rows, ds.Columns = ROWS, COLS
        ds.SamplesPerPixel = 1
        ds.PhotometricInterpretation = "MONOCHROME2"
        ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 16, 15, 1
        ds.RescaleSlope, ds.RescaleIntercept = 1, -1024
        j, i = np.meshgrid(np.arange(ROWS), np.arange(COLS), indexing="ij")
        value = i + 2 * j + 3 * k
        if variant == "rescale":
            ds.RescaleSlope, ds.RescaleIntercept = 0.5, -1000.5
        if variant == "u8":
            ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 8, 8, 7, 0
            ds.PixelData = value.astype("u1").tobytes()
        elif variant == "s16":
            ds.RescaleIntercept = 0
            ds.PixelData = (value - 1024).astype("<i2").tobytes()
        elif variant == "s12":
            ds.BitsStored, ds.HighBit, ds.RescaleIntercept = 12, 11, 0
            ds.PixelData = ((value - 1024) & 0x0FFF).astype("<u2").tobytes()
        else:
            ds.PixelData = value.astype("<i2").tobytes()
        path = os.path.join(folder, f"ct_{k:03d}.dcm")
        ds.save_as(path, enforce_file_format=True)
        paths.append(path)
        if variant == "duplicate" and k == 10:  # the same position again, another SOP instance
            ds.SOPInstanceUID = ds.file_meta.MediaStorageSOPInstanceUID = generate_uid()
            ds.save_as(os.path.join(folder, "ct_010b.dcm"), enforce_file_format=True)
            paths.append(os.path.join(folder, "ct_010b.dcm"))
    return paths


def sphere_mask(variant="plain"):
    j, i, k = np.meshgrid(np.arange(ROWS), np.arange(COLS), np.arange(SLICES), indexing="ij")
    row, col, _ = ct_geometry(variant if variant == "oblique" else "plain")
    normal = np.cross(row, col)
    x, y, z = (ORIGIN[a] + i * PIXEL_SPACING[1] * row[a] + j * PIXEL_SPACING[0] * col[a] + k * SLICE_SPACING * normal[a]
               for a in range(3))
    return (x - CENTRE[0]) ** 2 + (y - CENTRE[1]) ** 2 + (z - CENTRE[2]) ** 2 <= RADIUS**2  # rows, cols, slices


def write_rtstruct(ct_folder, path, variant="plain"):
    from rt_utils import RTStructBuilder

    rt = RTStructBuilder.create_new(dicom_series_path=ct_folder)
    rt.add_roi(mask=sphere_mask(variant), name="Sphere")
    rt.save(path)
    if NAME["charset"]:  # rt-utils copies the name but not its character set
        ds = pydicom.dcmread(path)
        ds.SpecificCharacterSet, ds.PatientName = NAME["charset"], NAME["text"]
        ds.save_as(path)
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


def write_rtdose(path, patient, study_uid, frame_uid, plan_uid, descending=False, grid=None):
    ds = base(patient, study_uid, "RTDOSE", RT_DOSE_STORAGE, generate_uid())
    ds.FrameOfReferenceUID = frame_uid
    plan = Dataset()
    plan.ReferencedSOPClassUID, plan.ReferencedSOPInstanceUID = RT_PLAN_STORAGE, plan_uid
    ds.ReferencedRTPlanSequence = [plan]
    origin, spacing, rows, cols, frames, frame_step = DOSE_GRIDS[grid] if grid else (
        DOSE_ORIGIN, DOSE_SPACING, DOSE_ROWS, DOSE_COLS, DOSE_FRAMES, DOSE_FRAME_STEP)
    step = -frame_step if descending else frame_step
    top = origin[2] + (frames - 1) * frame_step if descending else origin[2]
    ds.ImagePositionPatient = [origin[0], origin[1], top]
    ds.ImageOrientationPatient = [1, 0, 0, 0, 1, 0]
    ds.PixelSpacing = list(spacing)
    ds.Rows, ds.Columns, ds.NumberOfFrames = rows, cols, frames
    ds.GridFrameOffsetVector = [f * step for f in range(frames)]
    ds.FrameIncrementPointer = pydicom.tag.Tag(0x3004, 0x000C)
    ds.SamplesPerPixel = 1
    ds.PhotometricInterpretation = "MONOCHROME2"
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 32, 32, 31, 0
    ds.DoseUnits, ds.DoseType, ds.DoseSummationType = "GY", "PHYSICAL", "PLAN"
    ds.DoseGridScaling = 1e-4
    f, j, i = np.meshgrid(np.arange(frames), np.arange(rows), np.arange(cols), indexing="ij")
    x = origin[0] + i * spacing[1]
    y = origin[1] + j * spacing[0]
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


def edit_rtstruct(path, elsewhere, far, empty=False):
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
    if empty:
        for number, name in ((97, "Empty"), (98, "Unlisted")):
            roi = copy.deepcopy(ds.StructureSetROISequence[0])
            roi.ROINumber, roi.ROIName = number, name
            ds.StructureSetROISequence.append(roi)
        contour = copy.deepcopy(ds.ROIContourSequence[0])
        contour.ReferencedROINumber = 97
        del contour.ContourSequence
        ds.ROIContourSequence.append(contour)
    ds.save_as(path)


def make_dicomdir(work):
    """The patient's files as a File-set: OUT/P/DICOMDIR and pydicom's PT*/ST*/SE*/IM* files."""
    from pydicom.fileset import FileSet

    files = [os.path.join(d, f) for d, _, names in os.walk(work) for f in names]
    fileset = FileSet()
    for f in files:
        ds = pydicom.dcmread(f)
        if "InstanceNumber" not in ds:  # what the RT objects' directory records require
            ds.InstanceNumber = 1
        if ds.Modality == "RTSTRUCT" and "StructureSetLabel" not in ds:
            ds.StructureSetLabel = "test"
        fileset.add(ds)
    staged = work + ".fileset"
    fileset.write(staged)
    shutil.rmtree(work)
    os.replace(staged, work)


def main(argv):
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
    p.add_argument("--folder", default=None)
    p.add_argument("--ct", choices=["plain", "uneven", "duplicate", "tilt", "oblique", "rescale", "u8", "s16", "s12"],
                   default="plain")
    p.add_argument("--name", default=None)
    p.add_argument("--charset", default=None)
    p.add_argument("--empty-roi", action="store_true")
    p.add_argument("--dose-grid", choices=sorted(DOSE_GRIDS), default=None)
    p.add_argument("--dicomdir", action="store_true")
    a = p.parse_args(argv)
    pydicom.config.replace_un_with_known_vr = True  # --un-dose of an earlier job turns it off
    NAME["text"], NAME["charset"] = a.name, a.charset
    study_uid, frame_uid = generate_uid(), generate_uid()
    work = os.path.join(a.out, a.folder or a.patient)
    ct_folder = os.path.join(work, "ct")
    paths = write_ct(ct_folder, a.patient, study_uid, frame_uid, a.ct)
    uids = {"study": study_uid, "series": write_ct.series_uid, "frame_of_reference": frame_uid}
    if not a.no_rt:
        paths.append(os.path.join(work, "rtstruct.dcm"))
        uids["rtstruct"] = write_rtstruct(ct_folder, paths[-1], a.ct)
        if a.extra_plan:  # first in file order: the one the RT Dose references must still win
            paths.append(os.path.join(work, "aplan.dcm"))
            write_rtplan(paths[-1], a.patient, study_uid, frame_uid, [60.0])
        paths.append(os.path.join(work, "rtplan.dcm"))
        uids["rtplan"] = write_rtplan(paths[-1], a.patient, study_uid, frame_uid, [PRESCRIPTION_GY, 56.0])
        paths.append(os.path.join(work, "rtdose.dcm"))
        uids["rtdose"] = write_rtdose(paths[-1], a.patient, study_uid, frame_uid, uids["rtplan"], a.dose_descending,
                                      a.dose_grid)
        if a.un_dose:
            make_un(paths[-1], ["PatientID", "Modality", "DoseUnits", "DoseGridScaling"])
        if a.struct_elsewhere or a.far_roi or a.empty_roi:
            edit_rtstruct(os.path.join(work, "rtstruct.dcm"), a.struct_elsewhere, a.far_roi, a.empty_roi)
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
    if a.dicomdir:
        make_dicomdir(work)


if __name__ == "__main__":
    args, jobs = sys.argv[1:], [[]]
    for arg in args:  # JOB + JOB + ...: several patients in one Python start
        if arg == "+":
            jobs.append([])
        else:
            jobs[-1].append(arg)
    for job in jobs:
        main(job)

"""DICOM image series in every transfer syntax at hand, each with pydicom's decode as the reference, for
tests/integration/dicom_syntax_test.cpp.

  write_dicom_syntaxes.py OUT_DIR [--forged-only]

OUT_DIR/written/ holds one small CT patient per transfer syntax (PatientID the syntax's short name, 3
slices of ROWS x COLS): explicit and implicit VR little endian, explicit VR big endian and RLE lossless
(pydicom), JPEG-LS lossless (pydicom through pyjpegls), JPEG baseline 8-bit and JPEG 2000 lossless and
lossy (raw codestreams written by Pillow's OpenJPEG, encapsulated with pydicom.encaps.encapsulate;
16-bit unsigned with RescaleIntercept -1024, as Pillow writes no signed 16-bit), and HTJ2K's UID
(.4.203, which DCMTK 3.6.7 does not know) over a Part 1 lossless codestream: the path to OpenJPEG is
covered, HT code-blocks are not (nothing here writes them); and a JPEG 2000 frame wrapped as a JP2 file. OUT_DIR/samples/<file>/
holds each of pydicom's own test files (pydicom.data, the ones shipped in the wheel; nothing fetched)
that a CT/MR series import can take: one sample per pixel, one frame, ImagePositionPatient,
ImageOrientationPatient and PixelSpacing, and pixel data pydicom decodes. OUT_DIR/forged/ holds one CT
slice whose JPEG 2000 frame is 16 x 16 while Rows x Columns say ROWS x COLS (patient ct_16x16) and one whose
codestream lacks its last 300 bytes (patient ct_truncated); --forged-only writes these alone.

Each series' reference, OUT_DIR/<name>.f32, is pydicom's pixel_array times RescaleSlope plus
RescaleIntercept in float32 (as the importer computes it), slices along the normal, (D, H, W)
row-major little endian. OUT_DIR/manifest.json lists them: {"series": [{"name", "folder", "case"
(the case id; "" for a sample: the folder's only case), "syntax" (UID), "lossless", "shape"}],
"forged": {patient: path} of the forged files}.
"""
import argparse
import io
import json
import os
import shutil
import warnings

import numpy as np
import pydicom
import pydicom.data
from PIL import Image
from pydicom.encaps import encapsulate
from pydicom.uid import (ExplicitVRBigEndian, ExplicitVRLittleEndian, ImplicitVRLittleEndian, JPEG2000,
                         JPEG2000Lossless, JPEGBaseline8Bit, JPEGLSLossless, RLELossless, generate_uid)

from write_dicom import base  # beside this file

HTJ2K = "1.2.840.10008.1.2.4.203"

ROWS, COLS, SLICES = 32, 24, 3
CT_IMAGE_STORAGE = "1.2.840.10008.5.1.4.1.1.2"


def slice_values(k, bits, signed):
    """Stored values of slice k: a ramp plus seeded noise, so that lossy coding changes them."""
    rng = np.random.default_rng(k)
    j, i = np.meshgrid(np.arange(ROWS), np.arange(COLS), indexing="ij")
    if bits == 8:
        return (4 * i + 3 * j + 20 * k + rng.integers(0, 40, (ROWS, COLS))).astype(np.uint8)
    v = 37 * i + 53 * j + 301 * k + rng.integers(0, 400, (ROWS, COLS))
    return (v - 1200).astype(np.int16) if signed else v.astype(np.uint16)


def ct_slice(patient, study, series, frame, k, bits, signed):
    ds = base(patient, study, "CT", CT_IMAGE_STORAGE, series)  # file meta, patient, study and series
    ds.PatientName = f"Syntax^{patient}"
    ds.FrameOfReferenceUID = frame
    ds.InstanceNumber = k + 1
    ds.ImagePositionPatient = [-15.0, -20.0, 50.0 + 2.0 * k]
    ds.ImageOrientationPatient = [1, 0, 0, 0, 1, 0]
    ds.PixelSpacing = [1.0, 1.0]
    ds.SliceThickness = 2.0
    ds.Rows, ds.Columns = ROWS, COLS
    ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
    ds.BitsAllocated, ds.BitsStored, ds.HighBit = bits, bits, bits - 1
    ds.PixelRepresentation = 1 if signed else 0
    ds.RescaleSlope, ds.RescaleIntercept = 1, (0 if signed or bits == 8 else -1024)
    return ds


def pillow_frame(values, **options):
    buf = io.BytesIO()
    Image.fromarray(values).save(buf, **options)
    return buf.getvalue()


# name: (transfer syntax, bits, signed, lossless, how the pixel data is stored)
WRITTEN = {
    "explicit_le": (ExplicitVRLittleEndian, 16, True, True, "native"),
    "implicit_le": (ImplicitVRLittleEndian, 16, True, True, "native"),
    "explicit_be": (ExplicitVRBigEndian, 16, True, True, "native"),
    "rle": (RLELossless, 16, True, True, "compress"),
    "jpeg_ls": (JPEGLSLossless, 16, True, True, "compress"),
    "jpeg_baseline": (JPEGBaseline8Bit, 8, False, False, "JPEG"),
    "j2k_lossless": (JPEG2000Lossless, 16, False, True, "JPEG2000"),
    "j2k_lossy": (JPEG2000, 16, False, False, "JPEG2000"),
    "htj2k_uid": (HTJ2K, 16, False, True, "JPEG2000"),
    "j2k_jp2_file": (JPEG2000Lossless, 16, False, True, "JP2"),
}


def write_series(folder, name):
    syntax, bits, signed, _, how = WRITTEN[name]
    study, series, frame = generate_uid(), generate_uid(), generate_uid()
    os.makedirs(folder, exist_ok=True)
    paths = []
    for k in range(SLICES):
        ds = ct_slice(name, study, series, frame, k, bits, signed)
        values = slice_values(k, bits, signed)
        if how == "native":
            ds.PixelData = values.astype(values.dtype.newbyteorder(">" if syntax == ExplicitVRBigEndian else "<")).tobytes()
            ds.file_meta.TransferSyntaxUID = syntax
        elif how == "compress":
            ds.PixelData = values.tobytes()
            ds.compress(syntax, values)
        else:
            if how == "JPEG":
                frame_bytes = pillow_frame(values, format="JPEG", quality=85)
            elif syntax != JPEG2000:  # a JP2 file instead of a raw codestream, as some writers wrap it
                frame_bytes = pillow_frame(values, format="JPEG2000", irreversible=False, no_jp2=how != "JP2")
            else:
                frame_bytes = pillow_frame(values, format="JPEG2000", irreversible=True, no_jp2=True,
                                           quality_mode="rates", quality_layers=[6])
            ds.PixelData = encapsulate([frame_bytes])
            ds["PixelData"].VR = "OB"
            ds.file_meta.TransferSyntaxUID = syntax
            if how == "JPEG" or syntax == JPEG2000:
                ds.LossyImageCompression = "01"
        path = os.path.join(folder, f"{name}_{k:02d}.dcm")
        if syntax == ExplicitVRBigEndian:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                pydicom.dcmwrite(path, ds, implicit_vr=False, little_endian=False, enforce_file_format=True)
        else:
            ds.save_as(path, enforce_file_format=True)
        paths.append(path)
    return paths


def reference(paths):
    """pydicom's decode of the files, rescaled in float32, slices along the normal: (D, H, W). pydicom
    decodes HTJ2K through pylibjpeg only: an HTJ2K file's Part 1 codestream is decoded as JPEG 2000."""
    slices = []
    for path in paths:
        ds = pydicom.dcmread(path)
        if ds.file_meta.TransferSyntaxUID == HTJ2K:
            ds.file_meta.TransferSyntaxUID = JPEG2000
        normal = np.cross(np.array(ds.ImageOrientationPatient[:3], float), np.array(ds.ImageOrientationPatient[3:], float))
        position = float(np.dot(normal, np.array(ds.ImagePositionPatient, float)))
        slope = np.float32(ds.get("RescaleSlope", 1) or 1)
        intercept = np.float32(ds.get("RescaleIntercept", 0) or 0)
        slices.append((position, ds.pixel_array.astype(np.float32) * slope + intercept))
    slices.sort(key=lambda s: s[0])
    return np.stack([s[1] for s in slices]).astype("<f4")


def usable_sample(path):
    """A pydicom test file a CT/MR series import takes, and pydicom decodes."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds = pydicom.dcmread(path)
            if ds.get("Modality") not in ("CT", "MR") or ds.get("SamplesPerPixel") != 1:
                return False
            if int(ds.get("NumberOfFrames", 1) or 1) != 1:
                return False
            if not all(k in ds for k in ("ImagePositionPatient", "ImageOrientationPatient", "PixelSpacing")):
                return False
            ds.pixel_array
            return True
    except Exception:
        return False


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--forged-only", action="store_true")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    series = []
    for name, (syntax, _, _, lossless, _) in ({} if a.forged_only else WRITTEN).items():
        paths = write_series(os.path.join(a.out, "written"), name)
        ref = reference(paths)
        ref.tofile(os.path.join(a.out, f"{name}.f32"))
        series.append({"name": name, "folder": "written", "case": name, "syntax": str(syntax),
                       "lossless": lossless, "shape": list(ref.shape)})
    lossy = ("1.2.840.10008.1.2.4.50", "1.2.840.10008.1.2.4.51", "1.2.840.10008.1.2.4.81", "1.2.840.10008.1.2.4.91")
    here = os.path.dirname(pydicom.data.get_testdata_file("CT_small.dcm"))  # the wheel's files; nothing fetched
    for path in [] if a.forged_only else sorted(os.path.join(here, f) for f in os.listdir(here) if f.endswith(".dcm")):
        if not usable_sample(path):
            continue
        name = os.path.basename(path)
        folder = os.path.join("samples", name)
        os.makedirs(os.path.join(a.out, folder), exist_ok=True)
        shutil.copyfile(path, os.path.join(a.out, folder, name))
        ref = reference([path])
        ref.tofile(os.path.join(a.out, f"{name}.f32"))
        syntax = str(pydicom.dcmread(path, stop_before_pixels=True).file_meta.TransferSyntaxUID)
        series.append({"name": name, "folder": folder, "case": "", "syntax": syntax,
                       "lossless": syntax not in lossy, "shape": list(ref.shape)})
    os.makedirs(os.path.join(a.out, "forged"), exist_ok=True)
    forged = {}
    for name, frame in (("ct_16x16", pillow_frame(np.zeros((16, 16), np.uint16), format="JPEG2000", no_jp2=True)),
                        ("ct_truncated", pillow_frame(slice_values(0, 16, False), format="JPEG2000",
                                                      no_jp2=True)[:-300])):
        ds = ct_slice(name, generate_uid(), generate_uid(), generate_uid(), 0, 16, False)
        ds.PixelData = encapsulate([frame])
        ds["PixelData"].VR = "OB"
        ds.file_meta.TransferSyntaxUID = JPEG2000Lossless
        forged[name] = os.path.join(a.out, "forged", name + ".dcm")
        ds.save_as(forged[name], enforce_file_format=True)
    with open(os.path.join(a.out, "manifest.json"), "w") as f:
        json.dump({"series": series, "forged": forged}, f, indent=1)


if __name__ == "__main__":
    main()

// 3D TIFF volumes through libtiff (Debian libtiff-dev): a multi-page TIFF file holds one volume,
// page k = slice k along D; each page is an H x W grey image (one sample per pixel).
//
//   read_tiff_volume("vol.tif")  -> (D, H, W): uint8 pages -> uint8, int16 -> int16,
//                                   uint16 -> int32 (LibTorch has no uint16 arithmetic), float32 -> float32
//   write_tiff_volume("vol.tif", t)  (D, H, W) uint8 | int16 | float32 | int32 written as uint16
//
// libtiff's own error and warning messages never reach stderr: its handlers are replaced (once, for
// the process) and an error message becomes the text of the exception, which names the file.
#pragma once
#include <torch/torch.h>

#include <filesystem>

#include "u3d/io/synth.h"

namespace u3d {

// Reads every page of `path` into one (D, H, W) tensor in the file's sample type (above). Pages may
// be stored in strips or tiles, compressed with any codec libtiff was built with. IoError when the
// file is missing or unreadable; DataError naming the file (and the page) when it is not a TIFF file,
// a page holds more than one sample per pixel or a sample type other than those above, or a page's
// width, height, bits or sample format differ from the first page's.
torch::Tensor read_tiff_volume(const std::filesystem::path& path);

// Writes (D, H, W) `volume` as D pages (deflate-compressed strips, BigTIFF above 3.5 GiB) under a
// temporary name beside `path`, renamed into place when complete (commit_staged_file), so `path`
// never holds a partial file. uint8, int16 and float32 are written as they are; int32 as uint16 and
// only when every value is in 0..65535 (what read_tiff_volume makes of a uint16 file). DataError for
// another dtype or shape, or int32 values out of range; IoError naming `path` when writing fails.
void write_tiff_volume(const std::filesystem::path& path, const torch::Tensor& volume);

// Writes segmentation phantoms (make_phantom_case, options.task must be kSegmentation) as two
// folders of TIFF volumes, for trying `trainer import tiff` without real data:
// `dir`/images/<id>.tif (float32) and `dir`/labels/<id>.tif (uint8: 0 background, 1 liver,
// 2 kidney, 3 tumour). The phantom's voxel size is not stored (TIFF has none; import with
// --spacing). UsageError for the dose task or fewer than 2 cases.
void write_phantom_tiff(const PhantomOptions& options, const std::filesystem::path& dir);

}  // namespace u3d

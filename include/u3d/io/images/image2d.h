// 2D images (one slice each) for `trainer import images`: PNG through libpng (Debian libpng-dev) and
// single-page TIFF through io/tiff/tiff.h's reader.
//
//   read_image2d("TCGA_CS_4941_19960909_12.png") -> {pixels (H, W), color = false, bits = 8}
//     PNG: 8-bit grey -> uint8; 16-bit grey -> int32 (LibTorch has no uint16 arithmetic); 1/2/4-bit
//     and palette images are expanded; colour (RGB, RGBA, palette) is converted to grey with libpng's
//     sRGB luminance (color = true says so; the alpha channel is dropped, composited on black).
//     The pixels the header declares must fit the file at deflate's largest expansion (1032-fold) and
//     the memory available, checked before anything is allocated (a forged 100000 x 100000 header).
//     TIFF: one page of one sample per pixel (read_tiff_volume's types: uint8, uint16 -> int32, int16,
//     float32); RGB TIFF is refused by that reader, naming the file.
//   read_mask2d("x_mask.png") -> class numbers: a palette PNG's indices (its colours ignored), grey
//     values, or an RGB(A) PNG whose pixels all have R = G = B read as that grey; other colours refused;
//     an 8-bit alpha channel is dropped, never composited (a half-transparent label keeps its number).
//     TIFF as read_image2d.
//   write_png_gray8("x_mask.png", labels)  (H, W) uint8 as an 8-bit grey PNG, written atomically.
#pragma once
#include <torch/torch.h>

#include <filesystem>

namespace u3d {

struct Image2d {
  torch::Tensor pixels;  // (H, W): uint8, int16, int32 (16-bit unsigned) or float32
  bool color = false;    // the file held colour, converted to grey
  bool indexed = false;  // read_mask2d: a palette PNG read as its indices
  int bits = 8;          // bits per sample in the file
};

// Whether `path` names a file read_image2d reads: .png, .tif, .tiff (any case).
bool is_image2d_path(const std::filesystem::path& path);

// The image of `path` (above). IoError for a missing or unreadable file; DataError naming the file
// when it is not a PNG/TIFF image of a supported kind, or a TIFF file with more than one page.
Image2d read_image2d(const std::filesystem::path& path);
// A mask of `path` (above): class numbers, never luminance. DataError as read_image2d, and naming the
// file and a pixel for a colour PNG whose pixels are not grey.
Image2d read_mask2d(const std::filesystem::path& path);

// Writes (H, W) uint8 `pixels` as an 8-bit grey PNG under a temporary name beside `path`, renamed into
// place when complete (write_file_atomic). DataError for another dtype or shape; IoError naming
// `path` when writing fails.
void write_png_gray8(const std::filesystem::path& path, const torch::Tensor& pixels);

}  // namespace u3d

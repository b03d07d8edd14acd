// 2D images: PNG through libpng's simplified API (png_image: no setjmp, errors as a message), TIFF
// through io/tiff/tiff.h.
#include "u3d/io/images/image2d.h"

#include <fmt/format.h>
#include <png.h>

#include <cstring>
#include <string>
#include <vector>

#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/input_limits.h"
#include "u3d/core/text.h"
#include "u3d/io/tiff/tiff.h"

namespace u3d {
namespace {

namespace fs = std::filesystem;

// png_image with its resources freed on every path.
struct PngImage {
  png_image image;
  PngImage() {
    std::memset(&image, 0, sizeof image);
    image.version = PNG_IMAGE_VERSION;
  }
  ~PngImage() { png_image_free(&image); }
  PngImage(const PngImage&) = delete;
  PngImage& operator=(const PngImage&) = delete;
};

Image2d read_png(const fs::path& path) {
  const std::string file = path.string();
  const int64_t bytes = check_input_file(path, /*max_bytes=*/-1, "a PNG file");
  std::string data = read_file(path);
  if (static_cast<int64_t>(data.size()) != bytes) throw IoError(fmt::format("{}: cannot read the file", file));
  PngImage png;
  if (!png_image_begin_read_from_memory(&png.image, data.data(), data.size())) {
    throw DataError(fmt::format("{}: not a readable PNG file (libpng: {})", file, png.image.message));
  }
  Image2d out;
  out.color = (png.image.format & PNG_FORMAT_FLAG_COLOR) != 0;
  const bool linear = (png.image.format & PNG_FORMAT_FLAG_LINEAR) != 0;  // 16 bits per sample
  out.bits = linear ? 16 : 8;
  const int64_t h = png.image.height, w = png.image.width;
  check_declared_size(file + ":", {h, w}, linear ? 2 : 1, linear ? "uint16" : "uint8");
  png.image.format = linear ? PNG_FORMAT_LINEAR_Y : PNG_FORMAT_GRAY;
  std::vector<uint8_t> buffer(PNG_IMAGE_SIZE(png.image));
  if (!png_image_finish_read(&png.image, /*background=*/nullptr, buffer.data(), /*row_stride=*/0,
                             /*colormap=*/nullptr)) {
    throw DataError(fmt::format("{}: cannot read the image (libpng: {})", file, png.image.message));
  }
  if (linear) {
    std::vector<uint16_t> samples(static_cast<size_t>(h * w));
    std::memcpy(samples.data(), buffer.data(), samples.size() * sizeof(uint16_t));
    out.pixels = torch::empty({h, w}, torch::kInt32);
    std::copy(samples.begin(), samples.end(), out.pixels.data_ptr<int32_t>());
  } else {
    out.pixels = torch::empty({h, w}, torch::kUInt8);
    std::memcpy(out.pixels.data_ptr<uint8_t>(), buffer.data(), static_cast<size_t>(h * w));
  }
  return out;
}

Image2d read_tiff_slice(const fs::path& path) {
  torch::Tensor v = read_tiff_volume(path);  // (pages, H, W)
  if (v.size(0) != 1) {
    throw DataError(fmt::format("{}: holds {} pages; expected one 2D image (a 3D volume is `trainer import tiff`'s)",
                                path.string(), v.size(0)));
  }
  Image2d out;
  out.pixels = v[0].contiguous();
  out.bits = static_cast<int>(c10::elementSize(v.scalar_type()) * 8);
  if (v.scalar_type() == torch::kInt32) out.bits = 16;  // uint16 samples, widened
  return out;
}

}  // namespace

bool is_image2d_path(const fs::path& path) {
  const std::string ext = to_lower(path.extension().string());
  return ext == ".png" || ext == ".tif" || ext == ".tiff";
}

Image2d read_image2d(const fs::path& path) {
  if (to_lower(path.extension().string()) == ".png") return read_png(path);
  if (is_image2d_path(path)) return read_tiff_slice(path);
  throw DataError(fmt::format("{}: expected a .png, .tif or .tiff image", path.string()));
}

void write_png_gray8(const fs::path& path, const torch::Tensor& pixels) {
  if (pixels.dim() != 2 || pixels.scalar_type() != torch::kUInt8) {
    throw DataError(fmt::format("{}: a PNG mask is (H, W) uint8; got {} {}", path.string(),
                                fmt::join(pixels.sizes(), "x"), c10::toString(pixels.scalar_type())));
  }
  const torch::Tensor p = pixels.cpu().contiguous();
  PngImage png;
  png.image.width = static_cast<png_uint_32>(p.size(1));
  png.image.height = static_cast<png_uint_32>(p.size(0));
  png.image.format = PNG_FORMAT_GRAY;
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&png.image, nullptr, &size, /*convert_to_8bit=*/0, p.data_ptr<uint8_t>(),
                                 /*row_stride=*/0, nullptr)) {
    throw IoError(fmt::format("{}: cannot encode the PNG (libpng: {})", path.string(), png.image.message));
  }
  std::string encoded(size, '\0');
  if (!png_image_write_to_memory(&png.image, encoded.data(), &size, 0, p.data_ptr<uint8_t>(), 0, nullptr)) {
    throw IoError(fmt::format("{}: cannot encode the PNG (libpng: {})", path.string(), png.image.message));
  }
  encoded.resize(size);
  write_file_atomic(path, encoded);
}

}  // namespace u3d

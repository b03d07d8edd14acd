// 2D images: PNG through libpng's simplified API (png_image: no setjmp, errors as a message), TIFF
// through io/tiff/tiff.h.
#include "u3d/io/images/image2d.h"

#include <fmt/format.h>
#include <png.h>

#include <cmath>
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

// What a PNG reader may allocate for its pixels: the header's image data (rows of a filter byte and
// packed samples; IHDR at bytes 16..25: width, height, bit depth, colour type) must fit into the file
// at deflate's largest expansion, 1032-fold, so a forged 100000 x 100000 header in a few bytes is
// refused before its 10 GB are allocated; then the declared pixels must fit the memory available.
void check_png_size(const std::string& file, const std::string& data, int64_t h, int64_t w, bool linear) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(data[i]); };
  const int depth = byte(24), colour_type = byte(25);
  const int channels = colour_type == 2 ? 3 : colour_type == 4 ? 2 : colour_type == 6 ? 4 : 1;
  const double row_bytes = 1 + std::ceil(static_cast<double>(w) * channels * depth / 8);
  const double declared = static_cast<double>(h) * row_bytes;
  constexpr double kMaxDeflateRatio = 1032;
  if (declared > kMaxDeflateRatio * static_cast<double>(data.size())) {
    throw DataError(fmt::format(
        "{}: its header declares {} x {} pixels ({} of image data), more than its {} bytes can hold (deflate "
        "expands at most {:g}-fold); the file is damaged or forged",
        file, w, h, human_bytes(declared), data.size(), kMaxDeflateRatio));
  }
  check_declared_size(file + ":", {h, w}, linear ? 2 : 1, linear ? "uint16" : "uint8");
}

// The PNG of `path` begun: its bytes and libpng's header. IoError/DataError naming the file.
struct PngFile {
  std::string file, data;
  PngImage png;
  int64_t h = 0, w = 0;
  bool linear = false;  // 16 bits per sample
};

void begin_png(const fs::path& path, PngFile& f) {
  f.file = path.string();
  const int64_t bytes = check_input_file(path, /*max_bytes=*/-1, "a PNG file");
  f.data = read_file(path);
  if (static_cast<int64_t>(f.data.size()) != bytes) throw IoError(fmt::format("{}: cannot read the file", f.file));
  if (!png_image_begin_read_from_memory(&f.png.image, f.data.data(), f.data.size())) {
    throw DataError(fmt::format("{}: not a readable PNG file (libpng: {})", f.file, f.png.image.message));
  }
  f.linear = (f.png.image.format & PNG_FORMAT_FLAG_LINEAR) != 0;
  f.h = f.png.image.height;
  f.w = f.png.image.width;
  check_png_size(f.file, f.data, f.h, f.w, f.linear);
}

// The pixels of a begun PNG in `format` (bytes or 16-bit samples); `colormap` for colour-mapped formats.
std::vector<uint8_t> finish_png(PngFile& f, uint32_t format, std::vector<uint8_t>* colormap = nullptr) {
  f.png.image.format = format;
  std::vector<uint8_t> buffer(PNG_IMAGE_SIZE(f.png.image));
  if (colormap) colormap->resize(PNG_IMAGE_COLORMAP_SIZE(f.png.image));
  if (!png_image_finish_read(&f.png.image, /*background=*/nullptr, buffer.data(), /*row_stride=*/0,
                             colormap ? colormap->data() : nullptr)) {
    throw DataError(fmt::format("{}: cannot read the image (libpng: {})", f.file, f.png.image.message));
  }
  return buffer;
}

// (H, W) of one sample per pixel: uint8, or int32 holding 16-bit samples.
torch::Tensor grey_pixels(const std::vector<uint8_t>& buffer, int64_t h, int64_t w, bool linear) {
  if (linear) {
    std::vector<uint16_t> samples(static_cast<size_t>(h * w));
    std::memcpy(samples.data(), buffer.data(), samples.size() * sizeof(uint16_t));
    torch::Tensor out = torch::empty({h, w}, torch::kInt32);
    std::copy(samples.begin(), samples.end(), out.data_ptr<int32_t>());
    return out;
  }
  torch::Tensor out = torch::empty({h, w}, torch::kUInt8);
  std::memcpy(out.data_ptr<uint8_t>(), buffer.data(), static_cast<size_t>(h * w));
  return out;
}

Image2d read_png(const fs::path& path) {
  PngFile f;
  begin_png(path, f);
  Image2d out;
  out.color = (f.png.image.format & PNG_FORMAT_FLAG_COLOR) != 0;
  out.bits = f.linear ? 16 : 8;
  out.pixels = grey_pixels(finish_png(f, f.linear ? PNG_FORMAT_LINEAR_Y : PNG_FORMAT_GRAY), f.h, f.w, f.linear);
  return out;
}

// A PNG mask's class numbers: palette indices, grey values, or the grey of colour pixels with R = G = B.
Image2d read_png_mask(const fs::path& path) {
  PngFile f;
  begin_png(path, f);
  Image2d out;
  out.bits = f.linear ? 16 : 8;
  const uint32_t format = f.png.image.format;
  if ((format & PNG_FORMAT_FLAG_COLORMAP) != 0) {  // a palette PNG: libpng passes its indices through
    std::vector<uint8_t> colormap;
    out.pixels = grey_pixels(finish_png(f, PNG_FORMAT_RGBA_COLORMAP, &colormap), f.h, f.w, /*linear=*/false);
    out.indexed = true;
    return out;
  }
  // An 8-bit alpha channel is read and dropped (8-bit output is not premultiplied), so a transparent
  // label keeps its number; 16-bit output would be premultiplied, so there libpng composites on black.
  const bool colour = (format & PNG_FORMAT_FLAG_COLOR) != 0;
  const bool alpha = (format & PNG_FORMAT_FLAG_ALPHA) != 0 && !f.linear;
  const int64_t channels = (colour ? 3 : 1) + (alpha ? 1 : 0);
  const uint32_t want =
      f.linear ? (colour ? PNG_FORMAT_LINEAR_RGB : PNG_FORMAT_LINEAR_Y)
               : (colour ? (alpha ? PNG_FORMAT_RGBA : PNG_FORMAT_RGB) : (alpha ? PNG_FORMAT_GA : PNG_FORMAT_GRAY));
  const std::vector<uint8_t> buffer = finish_png(f, want);
  torch::Tensor px;  // (H, W, channels)
  if (f.linear) {
    std::vector<uint16_t> samples(static_cast<size_t>(f.h * f.w * channels));
    std::memcpy(samples.data(), buffer.data(), samples.size() * sizeof(uint16_t));
    px = torch::empty({f.h, f.w, channels}, torch::kInt32);
    std::copy(samples.begin(), samples.end(), px.data_ptr<int32_t>());
  } else {
    px = torch::empty({f.h, f.w, channels}, torch::kUInt8);
    std::memcpy(px.data_ptr<uint8_t>(), buffer.data(), buffer.size());
  }
  if (colour) {
    const torch::Tensor coloured = (px.select(2, 0) != px.select(2, 1)) | (px.select(2, 0) != px.select(2, 2));
    if (coloured.any().item<bool>()) {
      const torch::Tensor at = coloured.nonzero()[0];
      const int64_t y = at[0].item<int64_t>(), x = at[1].item<int64_t>();
      const torch::Tensor rgb = px[y][x].to(torch::kInt64);
      throw DataError(fmt::format(
          "{}: a colour mask, pixel (row {}, column {}) is RGB ({}, {}, {}); a mask holds class numbers: expected "
          "grey, palette (indexed) or RGB with R = G = B",
          f.file, y, x, rgb[0].item<int64_t>(), rgb[1].item<int64_t>(), rgb[2].item<int64_t>()));
    }
  }
  out.pixels = px.select(2, 0).contiguous();
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

Image2d read_mask2d(const fs::path& path) {
  if (to_lower(path.extension().string()) == ".png") return read_png_mask(path);
  return read_image2d(path);
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

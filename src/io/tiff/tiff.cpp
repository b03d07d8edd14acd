#include "u3d/io/tiff/tiff.h"

#include <fmt/format.h>
#include <tiffio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/input_limits.h"
#include "u3d/core/staged_folder.h"

namespace u3d {
namespace {

namespace fs = std::filesystem;

// libtiff reports through process-wide handlers, called on the thread that made the failing call:
// each thread keeps the first error of its current file, which becomes the exception's text.
thread_local std::string t_file;
thread_local std::string t_error;

void on_tiff_error(const char* module, const char* format, va_list args) {
  if (!t_error.empty()) return;
  char text[512];
  std::vsnprintf(text, sizeof(text), format, args);
  // libtiff names the file as the module of many messages: the exception names it already.
  t_error = module && *module && t_file != module ? fmt::format("{}: {}", module, text) : std::string(text);
}

void on_tiff_warning(const char*, const char*, va_list) {}  // unknown tags and the like: not the user's problem

// While alive: libtiff's handlers are ours (installed once) and this thread's message is empty.
class TiffMessages {
 public:
  explicit TiffMessages(const fs::path& file) {
    static std::once_flag once;
    std::call_once(once, [] {
      TIFFSetErrorHandler(on_tiff_error);
      TIFFSetWarningHandler(on_tiff_warning);
    });
    t_file = file.string();
    t_error.clear();
  }
  ~TiffMessages() {
    t_file.clear();
    t_error.clear();
  }
  TiffMessages(const TiffMessages&) = delete;
  TiffMessages& operator=(const TiffMessages&) = delete;
  bool failed() const { return !t_error.empty(); }
  // "; libtiff: <message>" or nothing, to end an exception's text.
  std::string why() const { return t_error.empty() ? std::string() : "; libtiff: " + t_error; }
};

struct CloseTiff {
  void operator()(TIFF* t) const { TIFFClose(t); }
};
using TiffHandle = std::unique_ptr<TIFF, CloseTiff>;

struct PageFormat {
  uint32_t width = 0, height = 0;
  uint16_t bits = 0, sample_format = SAMPLEFORMAT_UINT, samples = 1;
  bool operator==(const PageFormat& o) const {
    return width == o.width && height == o.height && bits == o.bits && sample_format == o.sample_format &&
           samples == o.samples;
  }
};

PageFormat page_format(TIFF* tif) {
  PageFormat f;
  TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &f.width);
  TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &f.height);
  TIFFGetFieldDefaulted(tif, TIFFTAG_BITSPERSAMPLE, &f.bits);
  TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLEFORMAT, &f.sample_format);
  TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLESPERPIXEL, &f.samples);
  return f;
}

std::string sample_text(const PageFormat& f) {
  const char* kind = f.sample_format == SAMPLEFORMAT_UINT     ? "uint"
                     : f.sample_format == SAMPLEFORMAT_INT    ? "int"
                     : f.sample_format == SAMPLEFORMAT_IEEEFP ? "float"
                                                              : nullptr;
  return kind ? fmt::format("{}{}", kind, f.bits) : fmt::format("sample format {} of {} bits", f.sample_format, f.bits);
}

std::string format_text(const PageFormat& f) {
  return fmt::format("{}x{} {}{}", f.width, f.height, sample_text(f),
                     f.samples == 1 ? std::string() : fmt::format(", {} samples per pixel", f.samples));
}

// The tensor dtype of a page's samples; nullopt for one the reader does not take.
std::optional<torch::ScalarType> dtype_of(const PageFormat& f) {
  if (f.sample_format == SAMPLEFORMAT_UINT && f.bits == 8) return torch::kUInt8;
  if (f.sample_format == SAMPLEFORMAT_UINT && f.bits == 16) return torch::kInt32;  // widened
  if (f.sample_format == SAMPLEFORMAT_INT && f.bits == 16) return torch::kInt16;
  if (f.sample_format == SAMPLEFORMAT_IEEEFP && f.bits == 32) return torch::kFloat;
  return std::nullopt;
}

// The current page's samples into `out` (height rows of width samples, bits / 8 bytes each), from
// strips or tiles, decoded and in this machine's byte order.
void read_page(TIFF* tif, const PageFormat& f, uint8_t* out, const std::string& where, const TiffMessages& msg) {
  const size_t bpp = f.bits / 8;
  const size_t row = static_cast<size_t>(f.width) * bpp;
  if (TIFFIsTiled(tif)) {
    uint32_t tw = 0, th = 0;
    TIFFGetField(tif, TIFFTAG_TILEWIDTH, &tw);
    TIFFGetField(tif, TIFFTAG_TILELENGTH, &th);
    const tmsize_t tile_bytes = TIFFTileSize(tif);
    if (tw == 0 || th == 0 || tile_bytes <= 0) throw DataError(fmt::format("{}: bad tile size{}", where, msg.why()));
    std::vector<uint8_t> tile(static_cast<size_t>(tile_bytes));
    for (uint32_t y = 0; y < f.height; y += th) {
      for (uint32_t x = 0; x < f.width; x += tw) {
        if (TIFFReadTile(tif, tile.data(), x, y, 0, 0) < 0) {
          throw DataError(fmt::format("{}: cannot read the tile at x {}, y {}{}", where, x, y, msg.why()));
        }
        const uint32_t rows = std::min(th, f.height - y), cols = std::min(tw, f.width - x);
        for (uint32_t r = 0; r < rows; ++r) {
          std::memcpy(out + (y + r) * row + x * bpp, tile.data() + static_cast<size_t>(r) * tw * bpp, cols * bpp);
        }
      }
    }
    return;
  }
  uint32_t rows_per_strip = 0;
  TIFFGetFieldDefaulted(tif, TIFFTAG_ROWSPERSTRIP, &rows_per_strip);
  rows_per_strip = std::max<uint32_t>(1, std::min(rows_per_strip, f.height));
  for (uint32_t y = 0, s = 0; y < f.height; y += rows_per_strip, ++s) {
    const uint32_t rows = std::min(rows_per_strip, f.height - y);
    const auto want = static_cast<tmsize_t>(rows * row);
    const tmsize_t got = TIFFReadEncodedStrip(tif, s, out + y * row, want);
    if (got < want) {
      throw DataError(fmt::format("{}: cannot read rows {}..{} (strip {}){}", where, y, y + rows - 1, s,
                                  msg.failed() ? msg.why() : "; libtiff: the strip is truncated"));
    }
  }
}

}  // namespace

torch::Tensor read_tiff_volume(const fs::path& path) {
  const std::string file = path.string();
  check_input_file(path, /*max_bytes=*/-1, "a TIFF file");
  TiffMessages msg(path);
  TiffHandle tif(TIFFOpen(file.c_str(), "r"));
  if (!tif) {
    FILE* probe = std::fopen(file.c_str(), "rb");
    if (!probe) throw IoError(fmt::format("{}: cannot open for reading{}", file, msg.why()));
    std::fclose(probe);
    throw DataError(fmt::format("{}: not a readable TIFF file{}", file, msg.why()));
  }
  const int64_t pages = TIFFNumberOfDirectories(tif.get());
  if (msg.failed()) throw DataError(fmt::format("{}: cannot read the list of pages{}", file, msg.why()));
  const PageFormat first = page_format(tif.get());
  const auto dtype = dtype_of(first);
  if (first.samples != 1 || !dtype) {
    throw DataError(fmt::format("{}: page 0 is {}; expected one sample per pixel of uint8, uint16, int16 or float32",
                                file, format_text(first)));
  }
  if (first.width == 0 || first.height == 0 || pages < 1) {
    throw DataError(fmt::format("{}: page 0 is empty ({}x{}, {} pages)", file, first.width, first.height, pages));
  }
  const int64_t h = first.height, w = first.width;
  check_declared_size(file + ":", {pages, h, w}, static_cast<int64_t>(c10::elementSize(*dtype)),
                      sample_text(first));  // a forged header may declare terabytes
  torch::Tensor volume = torch::empty({pages, h, w}, torch::TensorOptions().dtype(*dtype));
  const bool widen = *dtype == torch::kInt32;  // uint16 samples
  std::vector<uint16_t> staging(widen ? static_cast<size_t>(h * w) : 0);
  for (int64_t k = 0; k < pages; ++k) {
    const std::string where = fmt::format("{}: page {}", file, k);
    if (k > 0 && !TIFFReadDirectory(tif.get())) {
      throw DataError(fmt::format("{}: cannot read the page's header{}", where, msg.why()));
    }
    const PageFormat f = page_format(tif.get());
    if (!(f == first)) {
      throw DataError(fmt::format("{} is {}; expected {} like page 0 (every page one slice of the same size and type)",
                                  where, format_text(f), format_text(first)));
    }
    if (widen) {
      read_page(tif.get(), f, reinterpret_cast<uint8_t*>(staging.data()), where, msg);
      int32_t* dst = volume[k].data_ptr<int32_t>();
      std::copy(staging.begin(), staging.end(), dst);
    } else {
      read_page(tif.get(), f, static_cast<uint8_t*>(volume[k].data_ptr()), where, msg);
    }
  }
  // Anything libtiff reported on the way (a damaged page it worked around) fails the file too.
  if (msg.failed()) throw DataError(fmt::format("{}: damaged{}", file, msg.why()));
  return volume;
}

void write_tiff_volume(const fs::path& path, const torch::Tensor& volume) {
  const std::string file = path.string();
  if (!volume.defined() || volume.dim() != 3 || volume.numel() == 0) {
    throw DataError(fmt::format("{}: a TIFF volume is a non-empty (D, H, W) tensor, got ({})", file,
                                volume.defined() ? fmt::format("{}", fmt::join(volume.sizes(), ", ")) : "none"));
  }
  if (volume.size(1) > UINT32_MAX || volume.size(2) > UINT32_MAX) {
    throw DataError(fmt::format("{}: slices of {}x{} are too large for TIFF", file, volume.size(1), volume.size(2)));
  }
  torch::Tensor v = volume.to(torch::kCPU).contiguous();
  uint16_t bits = 0, format = 0;
  switch (v.scalar_type()) {
    case torch::kUInt8:
      bits = 8;
      format = SAMPLEFORMAT_UINT;
      break;
    case torch::kInt16:
      bits = 16;
      format = SAMPLEFORMAT_INT;
      break;
    case torch::kFloat:
      bits = 32;
      format = SAMPLEFORMAT_IEEEFP;
      break;
    case torch::kInt32: {
      const int64_t lo = v.min().item<int64_t>(), hi = v.max().item<int64_t>();
      if (lo < 0 || hi > 65535) {
        throw DataError(fmt::format("{}: int32 values in [{}, {}] do not fit the uint16 samples int32 is written as",
                                    file, lo, hi));
      }
      bits = 16;
      format = SAMPLEFORMAT_UINT;
      break;
    }
    default:
      throw DataError(
          fmt::format("{}: cannot write {} voxels as TIFF; expected uint8, int16, float32 or int32 (uint16)", file,
                      c10::toString(v.scalar_type())));
  }
  const int64_t d = v.size(0), h = v.size(1), w = v.size(2);
  const size_t row = static_cast<size_t>(w) * bits / 8;
  const double bytes = static_cast<double>(row) * static_cast<double>(h * d);
  const fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  ensure_writable_directory(dir);
  const fs::path tmp =
      dir / fmt::format(".{}.partial.{}{}", path.filename().string(), ::getpid(), path.extension().string());
  struct RemoveUnlessCommitted {
    const fs::path& tmp;
    bool committed = false;
    ~RemoveUnlessCommitted() {
      std::error_code ec;
      if (!committed) fs::remove(tmp, ec);
    }
  } cleanup{tmp};

  TiffMessages msg(tmp);
  auto fail = [&](const std::string& what) {
    return IoError(fmt::format("{}: {} (disk full? {} free){}", file, what,
                               human_bytes(static_cast<double>(free_bytes(dir))), msg.why()));
  };
  {
    // BigTIFF when the pixels alone come near the 4 GiB offsets of classic TIFF.
    TiffHandle tif(TIFFOpen(tmp.c_str(), bytes > 3.5 * 1024 * 1024 * 1024 ? "w8" : "w"));
    if (!tif) throw fail(fmt::format("cannot create {}", tmp.string()));
    const bool deflate = TIFFIsCODECConfigured(COMPRESSION_ADOBE_DEFLATE) != 0;
    const auto rows_per_strip = static_cast<uint32_t>(std::clamp<int64_t>(65536 / static_cast<int64_t>(row), 1, h));
    std::vector<uint8_t> strip;  // libtiff may encode in place: it gets a copy
    std::vector<uint16_t> narrowed(format == SAMPLEFORMAT_UINT && bits == 16 ? static_cast<size_t>(h * w) : 0);
    for (int64_t k = 0; k < d; ++k) {
      TIFF* t = tif.get();
      TIFFSetField(t, TIFFTAG_SUBFILETYPE, FILETYPE_PAGE);
      TIFFSetField(t, TIFFTAG_IMAGEWIDTH, static_cast<uint32_t>(w));
      TIFFSetField(t, TIFFTAG_IMAGELENGTH, static_cast<uint32_t>(h));
      TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, bits);
      TIFFSetField(t, TIFFTAG_SAMPLEFORMAT, format);
      TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, static_cast<uint16_t>(1));
      TIFFSetField(t, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK);
      TIFFSetField(t, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
      TIFFSetField(t, TIFFTAG_COMPRESSION, deflate ? COMPRESSION_ADOBE_DEFLATE : COMPRESSION_NONE);
      TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, rows_per_strip);
      if (d <= 65535) TIFFSetField(t, TIFFTAG_PAGENUMBER, static_cast<uint16_t>(k), static_cast<uint16_t>(d));
      const uint8_t* page = nullptr;
      if (!narrowed.empty()) {
        const int32_t* src = v[k].data_ptr<int32_t>();
        std::transform(src, src + h * w, narrowed.begin(), [](int32_t x) { return static_cast<uint16_t>(x); });
        page = reinterpret_cast<const uint8_t*>(narrowed.data());
      } else {
        page = static_cast<const uint8_t*>(v[k].data_ptr());
      }
      for (uint32_t y = 0, s = 0; y < h; y += rows_per_strip, ++s) {
        const uint32_t rows = std::min<uint32_t>(rows_per_strip, static_cast<uint32_t>(h) - y);
        strip.assign(page + y * row, page + (y + rows) * row);
        if (TIFFWriteEncodedStrip(t, s, strip.data(), static_cast<tmsize_t>(strip.size())) < 0) {
          throw fail(fmt::format("cannot write page {} to {}", k, tmp.string()));
        }
      }
      if (!TIFFWriteDirectory(t)) throw fail(fmt::format("cannot write page {} to {}", k, tmp.string()));
    }
  }  // TIFFClose: flushes
  if (msg.failed()) throw fail(fmt::format("closing {} failed", tmp.string()));
  commit_staged_file(tmp, path);
  cleanup.committed = true;
}

void write_phantom_tiff(const PhantomOptions& o, const fs::path& dir) {
  if (o.task != Task::kSegmentation) throw UsageError("synth: --format tiff writes segmentation phantoms only");
  if (o.cases < 2) throw UsageError(fmt::format("synth: --cases {} is too few; need at least 2", o.cases));
  StagedFolder out(dir);  // a failure (full disk, stop signal) leaves no folder, not empty ones
  ensure_writable_directory(out.path() / "images");
  ensure_writable_directory(out.path() / "labels");
  for (int64_t i = 0; i < o.cases; ++i) {
    const CaseData c = make_phantom_case(Task::kSegmentation, o.size, o.seed, i, o.kind);
    write_tiff_volume(out.path() / "images" / (c.id + ".tif"), c.image[0].to(torch::kFloat));
    write_tiff_volume(out.path() / "labels" / (c.id + ".tif"), c.target.to(torch::kUInt8));
  }
  out.commit();
}

}  // namespace u3d

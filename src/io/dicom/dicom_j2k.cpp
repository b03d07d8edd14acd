// JPEG 2000 frames of DICOM pixel data through OpenJPEG (dicom_j2k.h).
#include "dicom_j2k.h"

#include <fmt/format.h>
#include <openjpeg.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <vector>

#include "u3d/core/errors.h"

namespace u3d::dicom_j2k_detail {
namespace {

// One frame's bytes as OpenJPEG's input stream.
struct MemorySource {
  const Uint8* data;
  OPJ_SIZE_T size, pos;
};

OPJ_SIZE_T read_bytes(void* buffer, OPJ_SIZE_T n, void* user) {
  auto* s = static_cast<MemorySource*>(user);
  if (s->pos >= s->size) return static_cast<OPJ_SIZE_T>(-1);  // end of stream
  n = std::min(n, s->size - s->pos);
  std::memcpy(buffer, s->data + s->pos, n);
  s->pos += n;
  return n;
}

OPJ_OFF_T skip_bytes(OPJ_OFF_T n, void* user) {
  auto* s = static_cast<MemorySource*>(user);
  const OPJ_OFF_T pos = static_cast<OPJ_OFF_T>(s->pos), size = static_cast<OPJ_OFF_T>(s->size);
  n = std::clamp(n, -pos, size - pos);
  s->pos = static_cast<OPJ_SIZE_T>(pos + n);
  return n;
}

OPJ_BOOL seek_to(OPJ_OFF_T to, void* user) {
  auto* s = static_cast<MemorySource*>(user);
  if (to < 0 || static_cast<OPJ_SIZE_T>(to) > s->size) return OPJ_FALSE;
  s->pos = static_cast<OPJ_SIZE_T>(to);
  return OPJ_TRUE;
}

// OpenJPEG's last error message, its trailing newline removed.
void keep_error(const char* msg, void* user) {
  std::string& out = *static_cast<std::string*>(user);
  out = msg;
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
}
void ignore_message(const char*, void*) {}

struct CodecFree {
  void operator()(opj_codec_t* c) const { opj_destroy_codec(c); }
};
struct StreamFree {
  void operator()(opj_stream_t* s) const { opj_stream_destroy(s); }
};
struct ImageFree {
  void operator()(opj_image_t* i) const { opj_image_destroy(i); }
};

// The frame's raw codestream (SOC, SIZ markers) or JP2 file (signature box); anything else is refused.
OPJ_CODEC_FORMAT codec_of(const std::vector<Uint8>& frame, const std::string& where) {
  constexpr std::array<Uint8, 4> kCodestream{0xFF, 0x4F, 0xFF, 0x51};
  constexpr std::array<Uint8, 12> kJp2{0x00, 0x00, 0x00, 0x0C, 0x6A, 0x50, 0x20, 0x20, 0x0D, 0x0A, 0x87, 0x0A};
  if (frame.size() >= kCodestream.size() && std::equal(kCodestream.begin(), kCodestream.end(), frame.begin())) {
    return OPJ_CODEC_J2K;
  }
  if (frame.size() >= kJp2.size() && std::equal(kJp2.begin(), kJp2.end(), frame.begin())) return OPJ_CODEC_JP2;
  throw DataError(
      fmt::format("{}: neither a JPEG 2000 codestream (FF 4F FF 51) nor a JP2 file ({} bytes)", where, frame.size()));
}

// One frame's bytes decoded into out[0, rows * columns), PixelRepresentation's signedness applied.
void decode_frame(const std::vector<Uint8>& frame, const FrameLayout& layout, const std::string& where, float* out) {
  std::unique_ptr<opj_codec_t, CodecFree> codec(opj_create_decompress(codec_of(frame, where)));
  std::string error;
  opj_set_error_handler(codec.get(), keep_error, &error);
  opj_set_warning_handler(codec.get(), ignore_message, nullptr);
  opj_set_info_handler(codec.get(), ignore_message, nullptr);
  opj_decoder_set_strict_mode(codec.get(), OPJ_TRUE);  // a codestream cut short is an error, never a partial frame
  opj_dparameters_t parameters;
  opj_set_default_decoder_parameters(&parameters);
  MemorySource source{frame.data(), frame.size(), 0};
  std::unique_ptr<opj_stream_t, StreamFree> stream(
      opj_stream_create(OPJ_J2K_STREAM_CHUNK_SIZE, /*p_is_input=*/OPJ_TRUE));
  opj_stream_set_user_data(stream.get(), &source, nullptr);
  opj_stream_set_user_data_length(stream.get(), frame.size());
  opj_stream_set_read_function(stream.get(), read_bytes);
  opj_stream_set_skip_function(stream.get(), skip_bytes);
  opj_stream_set_seek_function(stream.get(), seek_to);
  opj_image_t* raw = nullptr;
  const bool header = opj_setup_decoder(codec.get(), &parameters) && opj_read_header(stream.get(), codec.get(), &raw);
  std::unique_ptr<opj_image_t, ImageFree> image(raw);
  if (!header || !opj_decode(codec.get(), stream.get(), image.get()) ||
      !opj_end_decompress(codec.get(), stream.get())) {
    throw DataError(
        fmt::format("{}: OpenJPEG cannot decode it ({})", where, error.empty() ? "no reason given" : error));
  }
  if (image->numcomps < 1) throw DataError(fmt::format("{}: decodes to no component", where));
  const opj_image_comp_t& c = image->comps[0];
  if (image->numcomps != 1 || c.w != layout.columns || c.h != layout.rows || c.prec < 1 ||
      static_cast<int>(c.prec) > layout.bits_allocated || c.data == nullptr) {
    throw DataError(fmt::format(
        "{}: decodes to {} component(s) of {} rows x {} columns at {} bits; the data set declares 1 sample of {} "
        "rows x {} columns in {} bits allocated",
        where, image->numcomps, c.h, c.w, c.prec, layout.rows, layout.columns, layout.bits_allocated));
  }
  const int64_t wrap = int64_t{1} << c.prec;  // the codestream's bits read with PixelRepresentation's sign
  const bool to_signed = layout.is_signed && !c.sgnd, to_unsigned = !layout.is_signed && c.sgnd;
  const int64_t n = layout.rows * layout.columns;
  for (int64_t i = 0; i < n; ++i) {
    int64_t v = c.data[i];
    if (to_signed && v >= wrap / 2) v -= wrap;
    if (to_unsigned && v < 0) v += wrap;
    out[i] = static_cast<float>(v);
  }
}

// The bytes of frame `f`: its fragments (items after the Basic Offset Table) joined.
std::vector<Uint8> frame_bytes(DcmPixelSequence& seq, int64_t f, int64_t frames, const std::string& what) {
  const Uint32 items = static_cast<Uint32>(seq.card());
  Uint32 first = 1, end = items;
  if (frames > 1) {
    Uint32 next = 0;
    if (DcmCodec::determineStartFragment(static_cast<Uint32>(f), static_cast<Sint32>(frames), &seq, first).bad() ||
        (f + 1 < frames &&
         DcmCodec::determineStartFragment(static_cast<Uint32>(f + 1), static_cast<Sint32>(frames), &seq, next).bad())) {
      throw DataError(fmt::format("{}: {} JPEG 2000 fragments cannot be told apart into {} frames (no offset table)",
                                  what, items > 0 ? items - 1 : 0, frames));
    }
    if (f + 1 < frames) end = next;
  }
  std::vector<Uint8> out;
  for (Uint32 i = first; i < end; ++i) {
    DcmPixelItem* item = nullptr;
    Uint8* bytes = nullptr;
    if (seq.getItem(item, i).bad() || item->getUint8Array(bytes).bad()) continue;
    if (bytes != nullptr) out.insert(out.end(), bytes, bytes + item->getLength());
  }
  if (out.empty()) throw DataError(fmt::format("{}: JPEG 2000 frame {} holds no bytes", what, f + 1));
  return out;
}

}  // namespace

bool is_jpeg2000(const std::string& uid) {
  for (const char* j2k : {"1.2.840.10008.1.2.4.90", "1.2.840.10008.1.2.4.91", "1.2.840.10008.1.2.4.201",
                          "1.2.840.10008.1.2.4.202", "1.2.840.10008.1.2.4.203"}) {
    if (uid == j2k) return true;
  }
  return false;
}

torch::Tensor decode_jpeg2000(DcmDataset& ds, const FrameLayout& layout, const std::string& what) {
  DcmElement* element = nullptr;
  DcmPixelSequence* seq = nullptr;
  auto* pixel_data =
      ds.findAndGetElement(DCM_PixelData, element).good() ? dynamic_cast<DcmPixelData*>(element) : nullptr;
  if (pixel_data == nullptr || pixel_data->getEncapsulatedRepresentation(ds.getOriginalXfer(), nullptr, seq).bad() ||
      seq == nullptr || seq->card() < 2) {
    throw DataError(fmt::format("{}: JPEG 2000 transfer syntax without encapsulated pixel data fragments", what));
  }
  torch::Tensor t = torch::empty({layout.frames, layout.rows, layout.columns}, torch::kFloat32);
  for (int64_t f = 0; f < layout.frames; ++f) {
    const std::string where = layout.frames == 1 ? fmt::format("{}: JPEG 2000 frame", what)
                                                 : fmt::format("{}: JPEG 2000 frame {}", what, f + 1);
    decode_frame(frame_bytes(*seq, f, layout.frames, what), layout, where, t[f].data_ptr<float>());
  }
  return t;
}

}  // namespace u3d::dicom_j2k_detail

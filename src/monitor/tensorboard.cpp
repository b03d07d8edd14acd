#include "u3d/monitor/tensorboard.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <system_error>

#include "u3d/core/errors.h"

namespace u3d {
namespace {

constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

// Protobuf wire format: varints, fixed-width little-endian scalars, length-delimited fields.
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_key(std::string& out, uint32_t field, WireType type) { put_varint(out, (uint64_t{field} << 3) | type); }
// int32 and int64 fields: negative values are sign-extended to 64 bits (10 bytes), as protobuf does.
void put_int(std::string& out, uint32_t field, int64_t v) {
  put_key(out, field, kVarint);
  put_varint(out, static_cast<uint64_t>(v));
}
void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes.data(), bytes.size());
}
template <typename T>
void put_le(std::string& out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put_double(std::string& out, uint32_t field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, kFixed64);
  put_le(out, bits);
}
void put_float(std::string& out, uint32_t field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, kFixed32);
  put_le(out, bits);
}

// Field numbers (tensorboard/compat/proto/event.proto, summary.proto).
namespace event {
constexpr uint32_t kWallTime = 1, kStep = 2, kFileVersion = 3, kSummary = 5, kSessionLog = 7;
}
constexpr uint32_t kSessionLogStatus = 1, kSessionLogStart = 1;
constexpr uint32_t kSummaryValue = 1;
namespace value {
constexpr uint32_t kTag = 1, kSimpleValue = 2, kImage = 4;
}
namespace image {
constexpr uint32_t kHeight = 1, kWidth = 2, kColorspace = 3, kEncoded = 4;
}

double wall_time_now() {
  const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
  return std::chrono::duration_cast<std::chrono::microseconds>(since_epoch).count() / 1e6;
}

// Event{wall_time, step} with the one-of member appended by the caller.
std::string event_head(int64_t step) {
  std::string e;
  put_double(e, event::kWallTime, wall_time_now());
  put_int(e, event::kStep, step);
  return e;
}

float to_float(double v) {
  // Out-of-range double -> float conversion is undefined behaviour: saturate to +-Inf explicitly.
  constexpr double kMax = std::numeric_limits<float>::max();
  if (std::isfinite(v) && std::fabs(v) > kMax) return std::copysign(std::numeric_limits<float>::infinity(), v);
  return static_cast<float>(v);  // NaN stays NaN, Inf stays Inf
}

std::string scalar_value(const std::string& tag, double v) {
  std::string out;
  put_bytes(out, value::kTag, tag);
  // simple_value is a one-of member: written even when 0, or readers see no scalar.
  put_float(out, value::kSimpleValue, to_float(v));
  return out;
}

std::string hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == 0) return "localhost";
  std::string h(buf);
  for (char& c : h) {
    if (c == '/') c = '_';
  }
  return h;
}

uint32_t read_le32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
uint64_t read_le64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

std::atomic<uint64_t> g_file_counter{0};

}  // namespace

uint32_t crc32c(std::string_view bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char b : bytes) crc = kCrc32cTable[(crc ^ b) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(std::string_view bytes) {
  const uint32_t crc = crc32c(bytes);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw IoError(fmt::format("{}: cannot create the TensorBoard folder: {}", dir.string(), ec.message()));
  const auto seconds =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  const std::string prefix = fmt::format("events.out.tfevents.{}.{}.{}.", seconds, hostname(), getpid());
  // O_EXCL: never append to another writer's file, whether of this process or another one.
  int fd = -1;
  for (int attempt = 0; attempt < 1000; ++attempt) {
    path_ = dir / (prefix + std::to_string(g_file_counter.fetch_add(1)));
    fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST) break;
  }
  if (fd < 0) throw IoError(fmt::format("{}: cannot create the events file: {}", path_.string(), std::strerror(errno)));
  file_ = fdopen(fd, "ab");
  if (file_ == nullptr) {
    const int err = errno;
    ::close(fd);
    throw IoError(fmt::format("{}: cannot open the events file: {}", path_.string(), std::strerror(err)));
  }
  std::string e;
  put_double(e, event::kWallTime, wall_time_now());
  put_bytes(e, event::kFileVersion, "brain.Event:2");
  write_event(e);
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ == nullptr) return;
  std::fflush(file_);
  ::fsync(fileno(file_));
  std::fclose(file_);
}

void TensorBoardWriter::add_scalar(const std::string& tag, int64_t step, double value) {
  add_scalars(step, {{tag, value}});
}

void TensorBoardWriter::add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  if (values.empty()) return;
  std::string summary;
  for (const auto& [tag, v] : values) put_bytes(summary, kSummaryValue, scalar_value(tag, v));
  std::string e = event_head(step);
  put_bytes(e, event::kSummary, summary);
  write_event(e);
}

void TensorBoardWriter::add_image(const std::string& tag, int64_t step, const std::string& png, int height, int width,
                                  int channels) {
  if (height < 1 || width < 1 || channels < 1 || channels > 4) {
    throw std::invalid_argument(
        fmt::format("TensorBoardWriter::add_image({}): size {}x{} with {} channels", tag, height, width, channels));
  }
  std::string img;
  put_int(img, image::kHeight, height);
  put_int(img, image::kWidth, width);
  put_int(img, image::kColorspace, channels);
  put_bytes(img, image::kEncoded, png);
  std::string val;
  put_bytes(val, value::kTag, tag);
  put_bytes(val, value::kImage, img);
  std::string summary;
  put_bytes(summary, kSummaryValue, val);
  std::string e = event_head(step);
  put_bytes(e, event::kSummary, summary);
  write_event(e);
}

void TensorBoardWriter::session_start(int64_t step) {
  std::string log;
  put_int(log, kSessionLogStatus, kSessionLogStart);
  std::string e = event_head(step);
  put_bytes(e, event::kSessionLog, log);
  write_event(e);
}

void TensorBoardWriter::flush() {
  if (std::fflush(file_) != 0 || ::fsync(fileno(file_)) != 0) {
    throw IoError(fmt::format("{}: cannot flush the events file: {}", path_.string(), std::strerror(errno)));
  }
}

void TensorBoardWriter::write_event(const std::string& event) {
  std::string record;
  record.reserve(event.size() + 16);
  put_le(record, static_cast<uint64_t>(event.size()));
  put_le(record, masked_crc32c(record));  // of the 8 length bytes
  record += event;
  put_le(record, masked_crc32c(event));
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() || std::fflush(file_) != 0) {
    throw IoError(fmt::format("{}: cannot write to the events file: {}", path_.string(), std::strerror(errno)));
  }
}

std::vector<std::string> read_tfrecords(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(fmt::format("{}: cannot open the record file", path.string()));
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw IoError(fmt::format("{}: cannot read the record file", path.string()));
  std::vector<std::string> records;
  size_t pos = 0;
  while (pos < data.size()) {
    const size_t left = data.size() - pos;
    if (left < 12) {
      throw IoError(fmt::format("{}: truncated record at offset {}: {} bytes left, the header needs 12", path.string(),
                                pos, left));
    }
    const std::string_view length_bytes(data.data() + pos, 8);
    if (read_le32(data.data() + pos + 8) != masked_crc32c(length_bytes)) {
      throw IoError(fmt::format("{}: record at offset {}: bad length CRC", path.string(), pos));
    }
    const uint64_t length = read_le64(data.data() + pos);
    if (left < 16 || length > left - 16) {  // the data and its 4 CRC bytes
      throw IoError(fmt::format(
          "{}: truncated record at offset {}: length {} but {} bytes left after the header (data and its CRC)",
          path.string(), pos, length, left - 12));
    }
    const std::string_view payload(data.data() + pos + 12, length);
    if (read_le32(data.data() + pos + 12 + length) != masked_crc32c(payload)) {
      throw IoError(fmt::format("{}: record at offset {}: bad data CRC", path.string(), pos));
    }
    records.emplace_back(payload);
    pos += 16 + length;
  }
  return records;
}

}  // namespace u3d

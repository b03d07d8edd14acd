// TensorBoard event files: CRC-32C against the RFC 3720 vectors, the TFRecord framing of a written
// file (checked byte by byte, independently of read_tfrecords), the Event protobufs inside it
// (decoded by a minimal wire-format parser here), and read_tfrecords's detection of corruption and
// truncation. tests/python/read_tensorboard.py checks the same files with TensorBoard's own reader.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "test_support.h"
#include "u3d/core/errors.h"
#include "u3d/monitor/tensorboard.h"

namespace u3d {
namespace {

namespace fs = std::filesystem;

using test::TempDir;
const auto read_bytes = test::read_text;
const auto write_bytes = test::write_text;
uint64_t le(const std::string& s, size_t pos, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s.at(pos + i));
  return v;
}

// Minimal protobuf wire-format reader: the fields of one message, in order.
struct Field {
  uint32_t number = 0;
  uint32_t wire = 0;
  uint64_t bits = 0;  // varint, fixed64 or fixed32 value
  std::string bytes;  // length-delimited payload
};
uint64_t varint(const std::string& s, size_t& pos) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    const auto b = static_cast<unsigned char>(s.at(pos++));
    v |= uint64_t{b & 0x7Fu} << shift;
    if (!(b & 0x80)) return v;
  }
  throw std::runtime_error("varint longer than 10 bytes");
}
std::vector<Field> parse(const std::string& s) {
  std::vector<Field> fields;
  size_t pos = 0;
  while (pos < s.size()) {
    const uint64_t key = varint(s, pos);
    Field f;
    f.number = static_cast<uint32_t>(key >> 3);
    f.wire = static_cast<uint32_t>(key & 7);
    switch (f.wire) {
      case 0: f.bits = varint(s, pos); break;
      case 1: f.bits = le(s, pos, 8), pos += 8; break;
      case 5: f.bits = le(s, pos, 4), pos += 4; break;
      case 2: {
        const uint64_t n = varint(s, pos);
        if (n > s.size() - pos) throw std::runtime_error("length-delimited field past the end");
        f.bytes = s.substr(pos, n);
        pos += n;
        break;
      }
      default: throw std::runtime_error("unexpected wire type " + std::to_string(f.wire));
    }
    fields.push_back(f);
  }
  return fields;
}
// The one field `number` of a message (fails the test when absent or repeated).
Field only(const std::vector<Field>& fields, uint32_t number, uint32_t wire) {
  std::vector<Field> hits;
  for (const auto& f : fields) {
    if (f.number == number) hits.push_back(f);
  }
  EXPECT_EQ(hits.size(), 1u) << "field " << number;
  if (hits.size() != 1) return Field{};
  EXPECT_EQ(hits[0].wire, wire) << "field " << number;
  return hits[0];
}
double as_double(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}
uint32_t float_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Event field numbers (tensorboard/compat/proto/event.proto).
constexpr uint32_t kWallTime = 1, kStep = 2, kFileVersion = 3, kSummary = 5, kSessionLog = 7;

TEST(TensorBoard, Crc32cMatchesTheRfc3720Vectors) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string up, down;
  for (int i = 0; i < 32; ++i) up.push_back(static_cast<char>(i)), down.push_back(static_cast<char>(31 - i));
  EXPECT_EQ(crc32c(up), 0x46DD794Eu);
  EXPECT_EQ(crc32c(down), 0x113FDB5Cu);
  // Masked values as computed by tensorboard.compat.tensorflow_stub.pywrap_tensorflow.masked_crc32c.
  EXPECT_EQ(masked_crc32c("123456789"), 0xC78AB0E5u);
  EXPECT_EQ(masked_crc32c(std::string(8, '\0')), 0x07980329u);
}

// A file with every kind of record: file_version, a scalar, several scalars (one NaN, one out of
// float range, one 0), an image, a session start.
fs::path write_sample(const fs::path& dir) {
  TensorBoardWriter tb(dir);
  tb.add_scalar("loss/train", 3, 0.25);
  tb.add_scalars(4, {{"loss/val", 0.1}, {"metric/nan", std::nan("")}, {"big", 1e300}, {"zero", 0.0}});
  tb.add_image("slice", 4, std::string("\x89PNG\r\n\x1a\n fake", 13), 7, 5, 3);
  tb.session_start(2);
  tb.flush();
  return tb.path();
}

TEST(TensorBoard, WritesOneNamedFileWithCorrectFraming) {
  TempDir dir;
  const fs::path file = write_sample(dir / "run" / "tensorboard");  // folders created
  ASSERT_TRUE(fs::is_regular_file(file));
  EXPECT_EQ(file.parent_path(), dir / "run" / "tensorboard");
  EXPECT_EQ(file.filename().string().rfind("events.out.tfevents.", 0), 0u) << file;
  EXPECT_NE(file.filename().string().find("." + std::to_string(getpid()) + "."), std::string::npos) << file;

  // The framing, walked here by hand.
  const std::string bytes = read_bytes(file);
  std::vector<std::string> by_hand;
  size_t pos = 0;
  while (pos < bytes.size()) {
    ASSERT_LE(pos + 12, bytes.size());
    const uint64_t length = le(bytes, pos, 8);
    EXPECT_EQ(le(bytes, pos + 8, 4), masked_crc32c(bytes.substr(pos, 8))) << "offset " << pos;
    ASSERT_LE(pos + 16 + length, bytes.size());
    const std::string data = bytes.substr(pos + 12, length);
    EXPECT_EQ(le(bytes, pos + 12 + length, 4), masked_crc32c(data)) << "offset " << pos;
    by_hand.push_back(data);
    pos += 16 + length;
  }
  EXPECT_EQ(pos, bytes.size());
  const std::vector<std::string> records = read_tfrecords(file);
  EXPECT_EQ(records, by_hand);
  ASSERT_EQ(records.size(), 5u);
}

TEST(TensorBoard, FirstRecordIsTheFileVersion) {
  TempDir dir;
  const double before = now_seconds();
  const auto records = read_tfrecords(write_sample(dir.path()));
  ASSERT_FALSE(records.empty());
  EXPECT_NE(records[0].find("brain.Event:2"), std::string::npos);
  const auto event = parse(records[0]);
  EXPECT_EQ(only(event, kFileVersion, 2).bytes, "brain.Event:2");
  const double wall = as_double(only(event, kWallTime, 1).bits);
  EXPECT_GE(wall, before - 1);
  EXPECT_LE(wall, now_seconds() + 1);
}

TEST(TensorBoard, EventsCarryTheScalarsImageAndSessionStart) {
  TempDir dir;
  const auto records = read_tfrecords(write_sample(dir.path()));
  ASSERT_EQ(records.size(), 5u);

  // add_scalar: Event{step 3, summary{value{tag, simple_value}}}.
  auto event = parse(records[1]);
  EXPECT_EQ(only(event, kStep, 0).bits, 3u);
  auto values = parse(only(event, kSummary, 2).bytes);
  ASSERT_EQ(values.size(), 1u);
  auto value = parse(values[0].bytes);
  EXPECT_EQ(only(value, 1, 2).bytes, "loss/train");
  EXPECT_EQ(only(value, 2, 5).bits, float_bits(0.25f));

  // add_scalars: one Event, four values in order; NaN kept, 1e300 saturated to +Inf, 0 written.
  event = parse(records[2]);
  EXPECT_EQ(only(event, kStep, 0).bits, 4u);
  values = parse(only(event, kSummary, 2).bytes);
  ASSERT_EQ(values.size(), 4u);
  const std::vector<std::string> tags = {"loss/val", "metric/nan", "big", "zero"};
  std::vector<float> got;
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(values[i].number, 1u);
    value = parse(values[i].bytes);
    EXPECT_EQ(only(value, 1, 2).bytes, tags[i]);
    const auto bits = static_cast<uint32_t>(only(value, 2, 5).bits);
    float f;
    std::memcpy(&f, &bits, sizeof f);
    got.push_back(f);
  }
  EXPECT_EQ(float_bits(got[0]), float_bits(0.1f));
  EXPECT_TRUE(std::isnan(got[1]));
  EXPECT_EQ(got[2], std::numeric_limits<float>::infinity());
  EXPECT_EQ(float_bits(got[3]), 0u);

  // add_image: Value{tag 1, image 4{height 1, width 2, colorspace 3, encoded 4}}.
  event = parse(records[3]);
  EXPECT_EQ(only(event, kStep, 0).bits, 4u);
  values = parse(only(event, kSummary, 2).bytes);
  ASSERT_EQ(values.size(), 1u);
  value = parse(values[0].bytes);
  EXPECT_EQ(only(value, 1, 2).bytes, "slice");
  const auto image = parse(only(value, 4, 2).bytes);
  EXPECT_EQ(only(image, 1, 0).bits, 7u);
  EXPECT_EQ(only(image, 2, 0).bits, 5u);
  EXPECT_EQ(only(image, 3, 0).bits, 3u);
  EXPECT_EQ(only(image, 4, 2).bytes, std::string("\x89PNG\r\n\x1a\n fake", 13));

  // session_start: Event{step 2, session_log 7{status 1 = START}}.
  event = parse(records[4]);
  EXPECT_EQ(only(event, kStep, 0).bits, 2u);
  const auto log = parse(only(event, kSessionLog, 2).bytes);
  EXPECT_EQ(only(log, 1, 0).bits, 1u);
}

TEST(TensorBoard, NegativeStepsAreTenByteVarints) {
  TempDir dir;
  fs::path file;
  {
    TensorBoardWriter tb(dir.path());
    tb.add_scalar("x", -1, 1.0);
    file = tb.path();
  }
  const auto records = read_tfrecords(file);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(static_cast<int64_t>(only(parse(records[1]), kStep, 0).bits), -1);
}

// Expects read_tfrecords(file) to throw an IoError whose message contains every one of `parts`.
void expect_read_error(const fs::path& file, const std::vector<std::string>& parts) {
  try {
    read_tfrecords(file);
    ADD_FAILURE() << "no error reading " << file;
  } catch (const IoError& e) {
    const std::string what = e.what();
    for (const auto& part : parts) EXPECT_NE(what.find(part), std::string::npos) << what << "\nmissing: " << part;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(TensorBoard, AFlippedByteIsDetected) {
  TempDir dir;
  const fs::path file = write_sample(dir.path());
  const std::string good = read_bytes(file);
  const auto records = read_tfrecords(file);
  const size_t second = 16 + records[0].size();  // offset of the second record
  const size_t third = second + 16 + records[1].size();

  std::string bad = good;
  bad[second + 12 + records[1].size() / 2] ^= 0x01;  // in the middle of the second record's data
  write_bytes(file, bad);
  expect_read_error(file, {file.string(), "offset " + std::to_string(second) + ":", "data CRC"});

  bad = good;
  bad[third + 1] ^= 0x40;  // in the third record's length
  write_bytes(file, bad);
  expect_read_error(file, {file.string(), "offset " + std::to_string(third) + ":", "length CRC"});

  bad = good;
  bad[third + 12 + records[2].size() + 2] ^= 0x10;  // in the third record's data CRC itself
  write_bytes(file, bad);
  expect_read_error(file, {file.string(), "offset " + std::to_string(third) + ":", "data CRC"});

  write_bytes(file, good);
  EXPECT_EQ(read_tfrecords(file), records);
}

TEST(TensorBoard, TruncationIsDetected) {
  TempDir dir;
  const fs::path file = write_sample(dir.path());
  const std::string good = read_bytes(file);
  const auto records = read_tfrecords(file);
  size_t last = 0;
  for (size_t i = 0; i + 1 < records.size(); ++i) last += 16 + records[i].size();

  for (const size_t cut : {size_t{1}, size_t{4}, size_t{5}, size_t{16 + records.back().size() - 13},
                           size_t{16 + records.back().size() - 5}, size_t{16 + records.back().size() - 1}}) {
    write_bytes(file, good.substr(0, good.size() - cut));
    expect_read_error(file, {file.string(), "truncated", "offset " + std::to_string(last) + ":"});
  }
  write_bytes(file, good.substr(0, 5));
  expect_read_error(file, {file.string(), "truncated", "offset 0:"});
  write_bytes(file, "");
  EXPECT_TRUE(read_tfrecords(file).empty());
  expect_read_error(dir / "missing", {(dir / "missing").string()});
}

TEST(TensorBoard, WritersStartedTogetherGetTheirOwnFiles) {
  TempDir dir;
  TensorBoardWriter a(dir.path());
  TensorBoardWriter b(dir.path());
  EXPECT_NE(a.path(), b.path());
  a.add_scalar("a", 1, 1.0);
  b.add_scalar("b", 1, 2.0);
  EXPECT_EQ(read_tfrecords(a.path()).size(), 2u);
  EXPECT_EQ(read_tfrecords(b.path()).size(), 2u);
  // An existing name is skipped, not appended to: a's next name taken in advance.
  const std::string name = a.path().filename().string();
  const size_t dot = name.rfind('.');
  const int64_t n = std::stoll(name.substr(dot + 1));
  for (int64_t k = n + 2; k < n + 6; ++k) write_bytes(dir / (name.substr(0, dot + 1) + std::to_string(k)), "taken");
  TensorBoardWriter c(dir.path());
  EXPECT_EQ(read_tfrecords(c.path()).size(), 1u) << c.path();
  const std::string c_name = c.path().filename().string();
  if (c_name.substr(0, dot + 1) == name.substr(0, dot + 1)) {  // same second
    EXPECT_EQ(c_name.substr(dot + 1), std::to_string(n + 6));
  }
}

TEST(TensorBoard, ErrorsNameTheFolderAndRefuseBadImages) {
  TempDir dir;
  write_bytes(dir / "file", "x");
  try {
    TensorBoardWriter tb(dir / "file" / "tensorboard");
    ADD_FAILURE() << "created a folder under a regular file";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find((dir / "file" / "tensorboard").string()), std::string::npos) << e.what();
  }
  TensorBoardWriter tb(dir.path());
  EXPECT_THROW(tb.add_image("x", 0, "png", 0, 4, 1), std::invalid_argument);
  EXPECT_THROW(tb.add_image("x", 0, "png", 4, 4, 5), std::invalid_argument);
  tb.add_scalars(0, {});  // nothing written
  EXPECT_EQ(read_tfrecords(tb.path()).size(), 1u);
}

}  // namespace
}  // namespace u3d

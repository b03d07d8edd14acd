// TensorBoard event files (logging.tensorboard): scalars, images and restart markers written as
// `<dir>/events.out.tfevents.<unix seconds>.<hostname>.<pid>.<n>`, readable by TensorBoard with no
// TensorFlow or protobuf library on our side.
//
// The file is a sequence of TFRecords:
//   uint64 LE length | uint32 LE masked CRC32C(length bytes) | data | uint32 LE masked CRC32C(data)
// (masked: ((crc >> 15) | (crc << 17)) + 0xa282ead8), each data a hand-encoded `tensorboard.Event`
// protobuf (field numbers from tensorboard/compat/proto/event.proto and summary.proto):
//   Event      { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5;
//                SessionLog session_log = 7; }
//   SessionLog { SessionStatus status = 1; }                        // START = 1
//   Summary    { repeated Value value = 1; }
//   Value      { string tag = 1; float simple_value = 2; Image image = 4; }
//   Image      { int32 height = 1; int32 width = 2; int32 colorspace = 3; bytes encoded_image_string = 4; }
// The first record is Event{wall_time, file_version: "brain.Event:2"}.
//
//   TensorBoardWriter tb(run_dir / "tensorboard");
//   tb.session_start(resumed ? checkpoint_step + 1 : 0);   // every run, first thing
//   tb.add_scalars(global_step, {{"loss/train", 0.12}, {"loss/val", 0.2}});
//
// One writer per thread (no locking). Write failures throw u3d::IoError naming the file.
#pragma once
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace u3d {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, init and final xor 0xFFFFFFFF), software
// table: crc32c("123456789") == 0xE3069283.
uint32_t crc32c(std::string_view bytes);
// The TFRecord form: ((crc >> 15) | (crc << 17)) + 0xa282ead8 of crc32c(bytes).
uint32_t masked_crc32c(std::string_view bytes);

class TensorBoardWriter {
 public:
  // Creates `dir` (and its parents) if needed and a new events file in it (never an existing one:
  // <n> counts up until the name is free), and writes the file_version record. IoError when the
  // folder or the file cannot be created or written.
  explicit TensorBoardWriter(const std::filesystem::path& dir);
  ~TensorBoardWriter();  // flushes and closes; never throws
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One scalar at global step `step`, stored as a float32 simple_value (NaN and Inf kept; finite
  // values beyond the float range become +-Inf).
  void add_scalar(const std::string& tag, int64_t step, double value);
  // Several scalars at one step, in one Event (one record).
  void add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  // `png`: the encoded PNG bytes of an image `height` x `width` pixels with `channels` channels
  // (1 gray, 2 gray + alpha, 3 RGB, 4 RGBA: the Image colorspace). std::invalid_argument for a
  // size < 1 or channels outside 1..4; the PNG itself is not checked.
  void add_image(const std::string& tag, int64_t step, const std::string& png, int height, int width, int channels);
  // SessionLog START at `step`: TensorBoard (purge_orphaned_data, its default) then drops the
  // events with step >= `step` read before this record, in this file and the earlier files of the
  // folder (the run). Call it once right after opening, in every run: with 0 in a fresh run; at a
  // resume with the first step the resumed run will log (the checkpoint's global step + 1 keeps
  // what was logged at the checkpoint's own step). The server `tensorboard --logdir` runs
  // (plugin_event_accumulator; tensorflow/tensorboard#4763, 2021) ignores the first START of a
  // run and purges only at later ones: a resume purges only if the first run wrote one too.
  void session_start(int64_t step);
  // fflush + fsync. The add_* and session_start calls fflush (not fsync) after each record.
  void flush();
  const std::filesystem::path& path() const { return path_; }

 private:
  void write_event(const std::string& event);  // frames one Event as a record, writes it, fflush

  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

// The data of every record of an events file (or any TFRecord file), in order. IoError naming the
// file and the record's byte offset for a bad length CRC, a bad data CRC or a truncated record; an
// empty file gives no records.
std::vector<std::string> read_tfrecords(const std::filesystem::path& path);

}  // namespace u3d

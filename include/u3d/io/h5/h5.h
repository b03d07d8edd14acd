// HDF5 helpers for the library's file formats (dataset, predictions): RAII handles, staged files,
// typed reads/writes of attributes and datasets, chunked writes. Needs HDF5's headers, so only the
// library's sources include it (u3d links HDF5 privately).
#pragma once
#include <hdf5.h>
#include <torch/torch.h>

#include <filesystem>
#include <string>
#include <vector>

#include "u3d/core/errors.h"

namespace u3d::h5 {

// Owns one hid_t and closes it with the matching H5*close.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(o.id_), closer_(o.closer_) { o.id_ = -1; }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      closer_ = o.closer_;
      o.id_ = -1;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset() {
    if (id_ >= 0 && closer_) closer_(id_);
    id_ = -1;
  }

 private:
  hid_t id_ = -1;
  Closer closer_ = nullptr;
};

// A new HDF5 file built under a temporary name beside `path` (".<name>.partial.<pid>") and moved
// into place by commit() (flush, close, fsync, rename, folder fsync): an interrupted write never
// leaves a half file under the final name. Without commit() the destructor closes the file and
// every object still open in it (strong close degree) and removes the temporary file; it truncates
// the file first, so that HDF5's closing metadata writes succeed even on a full disk (a failed
// H5Fclose would leave a half-closed file that crashes the process at exit).
class StagedFile {
 public:
  explicit StagedFile(std::filesystem::path path);
  ~StagedFile();
  StagedFile(const StagedFile&) = delete;
  StagedFile& operator=(const StagedFile&) = delete;
  hid_t get() const { return file_; }
  const std::filesystem::path& path() const { return path_; }
  void commit();

 private:
  void abandon();
  std::filesystem::path path_, tmp_path_;
  hid_t file_ = -1;
  bool committed_ = false;
};

// " (12.3 MB free on its file system)" for the file system holding `path`; "" when unknown.
std::string free_space_note(const std::filesystem::path& path);
// " (disk full?) (… free on its file system)" for the file holding HDF5 object `loc`: the tail of
// a failed write's message.
std::string write_failure_note(hid_t loc);

// Memory (native) and file (little-endian) HDF5 types of a torch dtype; IoError for others.
hid_t native_type(torch::ScalarType t);
hid_t file_type(torch::ScalarType t);

// Turns HDF5's automatic error printing off (errors become exceptions with context instead).
void silence_errors();

bool exists(hid_t loc, const std::string& path);
bool has_attribute(hid_t obj, const std::string& name);

Handle open_group(hid_t loc, const std::string& path, const std::string& context);
Handle create_group(hid_t loc, const std::string& path, const std::string& context);
Handle open_dataset(hid_t loc, const std::string& path, const std::string& context);

std::string read_string_attribute(hid_t obj, const std::string& name, const std::string& context);
std::vector<std::string> read_string_list_attribute(hid_t obj, const std::string& name, const std::string& context);
int64_t read_int_attribute(hid_t obj, const std::string& name, const std::string& context);
std::vector<double> read_double_list_attribute(hid_t obj, const std::string& name, const std::string& context);

void write_string_attribute(hid_t obj, const std::string& name, const std::string& value);
void write_string_list_attribute(hid_t obj, const std::string& name, const std::vector<std::string>& values);
void write_int_attribute(hid_t obj, const std::string& name, int64_t value);
void write_double_list_attribute(hid_t obj, const std::string& name, const std::vector<double>& values);

// 1-D string dataset (variable-length UTF-8, as h5py writes by default; fixed-length also read).
std::vector<std::string> read_string_dataset(hid_t loc, const std::string& path, const std::string& context);
void write_string_dataset(hid_t loc, const std::string& path, const std::vector<std::string>& values);

// Shape of a dataset.
std::vector<int64_t> dataset_shape(hid_t dataset, const std::string& context);
// Reads a whole numeric dataset into a CPU tensor of `dtype` (HDF5 converts on read).
// Why a dataset of `shape` read as `dtype` cannot be allocated here ("declares shape [...] (X as
// float), more than the Y of memory available; ..."), or "" when it fits. read_tensor checks it
// before allocating and throws a DataError with the context and this text.
std::string declared_size_problem(const std::vector<int64_t>& shape, torch::ScalarType dtype);
torch::Tensor read_tensor(hid_t loc, const std::string& path, torch::ScalarType dtype, const std::string& context);
// The dtype a dataset is stored in, mapped to torch (float32/float64/int8..int64/uint8).
torch::ScalarType stored_dtype(hid_t dataset, const std::string& context);
// Writes a contiguous CPU tensor as a chunked, shuffled, gzip-compressed dataset.
void write_tensor(hid_t loc, const std::string& path, const torch::Tensor& t, const std::vector<int64_t>& chunk,
                  int compression_level, const std::string& context);

// A tensor already cut into chunks and filtered as write_tensor's pipeline does (byte shuffle, then
// zlib deflate), so the costly part of a write runs on any thread, without HDF5 calls; the chunks
// are then stored as they are (H5Dwrite_chunk). Chunks that hold only zeros are left out: they read
// back as the fill value 0, which saves both time and space on sparse volumes (masks).
struct CompressedTensor {
  torch::ScalarType dtype = torch::kFloat;
  std::vector<int64_t> shape, chunk;
  int compression_level = 0;
  struct Chunk {
    std::vector<hsize_t> offset;  // element offset of the chunk in the dataset
    std::vector<unsigned char> bytes;
  };
  std::vector<Chunk> chunks;
  int64_t stored_bytes() const;
};
// Needs compression_level >= 1 (the pipeline is shuffle + deflate). Thread-safe.
CompressedTensor compress_tensor(const torch::Tensor& t, const std::vector<int64_t>& chunk, int compression_level);
// Creates the dataset (chunked, shuffle + deflate) and stores the chunks.
void write_compressed_tensor(hid_t loc, const std::string& path, const CompressedTensor& t, const std::string& context);

// A chunked, compressed dataset written in slabs along `axis`, rows arriving in order (streamed
// prediction outputs). Rows are buffered up to whole chunks so each chunk is compressed once.
class SlabWriter {
 public:
  SlabWriter(hid_t loc, const std::string& path, torch::ScalarType dtype, std::vector<int64_t> shape, int64_t axis,
             std::vector<int64_t> chunk, int compression_level, std::string context);
  // The next rows: the dataset's shape with `axis` shortened to the number of rows.
  void write(const torch::Tensor& rows);
  // Writes what is buffered; IoError unless every row was written.
  void finish();

 private:
  void flush(int64_t rows);
  Handle dataset_;
  torch::ScalarType dtype_;
  std::vector<int64_t> shape_;
  int64_t axis_, chunk_rows_;
  std::string context_;
  std::vector<torch::Tensor> pending_;
  int64_t pending_rows_ = 0, written_ = 0;
};

// The one way a dataset is created (write_tensor, SlabWriter, write_compressed_tensor).
// The chunk of a dataset of shape `dims`: each edge of `chunk` clamped to [1, dims[i]].
std::vector<hsize_t> clamped_chunk(const std::vector<hsize_t>& dims, const std::vector<int64_t>& chunk);

// Dataset `path` under `loc` (missing groups made) of `dtype`'s file type and shape `dims`, stored in
// chunks of `chunk` (empty: contiguous), shuffled and deflated at `compression_level` when it is > 0.
// IoError naming `context`, `path` and the file's free space when it cannot be made.
Handle create_dataset(hid_t loc, const std::string& path, torch::ScalarType dtype, const std::vector<hsize_t>& dims,
                      const std::vector<hsize_t>& chunk, int compression_level, const std::string& context);

}  // namespace u3d::h5

// Chunked HDF5 data: tensors read by inflating their chunks in the calling thread (read_tensor),
// tensors compressed in the caller's threads and written chunk by chunk
// (CompressedTensor), and datasets streamed slab by slab along one axis (SlabWriter).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "u3d/core/files.h"
#include "u3d/io/h5/h5.h"

namespace u3d::h5 {
namespace {

// The torch dtype of a little-endian integer or IEEE float file type, or nullopt.
std::optional<torch::ScalarType> plain_file_dtype(hid_t type) {
  const auto cls = H5Tget_class(type);
  const size_t size = H5Tget_size(type);
  if (H5Tget_order(type) != H5T_ORDER_LE) return std::nullopt;
  if (cls == H5T_FLOAT) {
    if (size == 4 && H5Tequal(type, H5T_IEEE_F32LE) > 0) return torch::kFloat;
    if (size == 8 && H5Tequal(type, H5T_IEEE_F64LE) > 0) return torch::kDouble;
    return std::nullopt;
  }
  if (cls != H5T_INTEGER) return std::nullopt;
  const bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
  if (size == 1) return is_signed ? torch::kInt8 : torch::kUInt8;
  if (size == 2 && is_signed) return torch::kInt16;
  if (size == 4 && is_signed) return torch::kInt32;
  if (size == 8 && is_signed) return torch::kInt64;
  return std::nullopt;
}

// Reads a chunked dataset whose filters are only shuffle and deflate by fetching its raw chunks
// (short HDF5 calls under the library's global lock) and inflating them here, outside the lock, so
// threads reading different datasets decompress in parallel (H5Dread would decompress inside the
// lock, one thread at a time). Returns an undefined tensor, having read nothing, when the layout,
// filters or type are not of that kind; read_tensor then uses H5Dread. Chunks never written read as
// the dataset's fill value, as H5Dread gives them.
torch::Tensor read_raw_chunks(hid_t d, const std::vector<int64_t>& shape, const std::string& context,
                              const std::string& path) {
  Handle dcpl(H5Dget_create_plist(d), H5Pclose);
  if (!dcpl.valid() || H5Pget_layout(dcpl.get()) != H5D_CHUNKED) return {};
  const int rank = static_cast<int>(shape.size());
  if (rank == 0) return {};
  std::vector<hsize_t> chunk(static_cast<size_t>(rank));
  if (H5Pget_chunk(dcpl.get(), rank, chunk.data()) != rank) return {};
  std::vector<H5Z_filter_t> filters;
  const int nfilters = H5Pget_nfilters(dcpl.get());
  for (int i = 0; i < nfilters; ++i) {
    unsigned flags = 0, config = 0;
    size_t nvalues = 8;
    unsigned values[8];
    char name[64];
    const H5Z_filter_t f =
        H5Pget_filter2(dcpl.get(), static_cast<unsigned>(i), &flags, &nvalues, values, sizeof name, name, &config);
    if (f != H5Z_FILTER_DEFLATE && f != H5Z_FILTER_SHUFFLE) return {};
    filters.push_back(f);
  }
  Handle type(H5Dget_type(d), H5Tclose);
  const auto file_dtype = plain_file_dtype(type.get());
  if (!file_dtype) return {};
  const size_t elem = c10::elementSize(*file_dtype);
  size_t chunk_elems = 1;
  std::vector<int64_t> grid(static_cast<size_t>(rank));
  int64_t chunks = 1;
  for (int a = 0; a < rank; ++a) {
    chunk_elems *= chunk[static_cast<size_t>(a)];
    grid[static_cast<size_t>(a)] =
        (shape[static_cast<size_t>(a)] + static_cast<int64_t>(chunk[static_cast<size_t>(a)]) - 1) /
        static_cast<int64_t>(chunk[static_cast<size_t>(a)]);
    chunks *= grid[static_cast<size_t>(a)];
  }
  auto chunk_offset = [&](int64_t c, std::vector<hsize_t>& offset) {
    for (int a = rank - 1; a >= 0; --a) {
      offset[static_cast<size_t>(a)] =
          static_cast<hsize_t>(c % grid[static_cast<size_t>(a)]) * chunk[static_cast<size_t>(a)];
      c /= grid[static_cast<size_t>(a)];
    }
  };
  std::vector<hsize_t> offset(static_cast<size_t>(rank));
  std::vector<hsize_t> stored_bytes(static_cast<size_t>(chunks));
  bool unallocated = false;
  for (int64_t c = 0; c < chunks; ++c) {  // 0 bytes: a chunk never written, which reads as the fill value
    chunk_offset(c, offset);
    unsigned filter_mask = 0;
    haddr_t address = HADDR_UNDEF;
    if (H5Dget_chunk_info_by_coord(d, offset.data(), &filter_mask, &address, &stored_bytes[static_cast<size_t>(c)]) <
        0) {
      return {};
    }
    if (address == HADDR_UNDEF) stored_bytes[static_cast<size_t>(c)] = 0;
    unallocated = unallocated || stored_bytes[static_cast<size_t>(c)] == 0;
  }
  std::vector<uint8_t> fill(elem, 0);
  if (unallocated) {
    H5D_fill_value_t defined = H5D_FILL_VALUE_UNDEFINED;
    if (H5Pfill_value_defined(dcpl.get(), &defined) < 0) return {};
    if (defined == H5D_FILL_VALUE_USER_DEFINED && H5Pget_fill_value(dcpl.get(), type.get(), fill.data()) < 0) return {};
  }
  torch::Tensor out = torch::empty(shape, torch::TensorOptions().dtype(*file_dtype));
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  std::vector<int64_t> out_stride(static_cast<size_t>(rank), 1);
  for (int a = rank - 2; a >= 0; --a)
    out_stride[static_cast<size_t>(a)] = out_stride[static_cast<size_t>(a) + 1] * shape[static_cast<size_t>(a) + 1];
  std::vector<uint8_t> stored, inflated(chunk_elems * elem), unshuffled(chunk_elems * elem);
  std::vector<uint8_t> filled;
  for (int64_t c = 0; c < chunks; ++c) {
    chunk_offset(c, offset);
    const uint8_t* data = nullptr;
    size_t size = 0;
    uint32_t mask = ~0u;  // no filter to undo
    if (stored_bytes[static_cast<size_t>(c)] == 0) {
      if (filled.empty()) {
        filled.resize(chunk_elems * elem);
        for (size_t k = 0; k < chunk_elems; ++k) std::memcpy(filled.data() + k * elem, fill.data(), elem);
      }
      data = filled.data();
      size = filled.size();
    } else {
      stored.resize(stored_bytes[static_cast<size_t>(c)]);
      mask = 0;
      if (H5Dread_chunk(d, H5P_DEFAULT, offset.data(), &mask, stored.data()) < 0) {
        throw DataError(fmt::format("{}: '{}' cannot be read (truncated or corrupt file?)", context, path));
      }
      data = stored.data();
      size = stored.size();
    }
    // Undo the filters in reverse order (a set bit in `mask` means the filter was skipped).
    for (int i = static_cast<int>(filters.size()) - 1; i >= 0; --i) {
      if (mask & (1u << i)) continue;
      if (filters[static_cast<size_t>(i)] == H5Z_FILTER_DEFLATE) {
        uLongf length = static_cast<uLongf>(inflated.size());
        if (uncompress(inflated.data(), &length, data, static_cast<uLong>(size)) != Z_OK || length != inflated.size()) {
          throw DataError(fmt::format("{}: '{}' has a corrupt compressed chunk", context, path));
        }
        data = inflated.data();
        size = length;
      } else {  // shuffle: byte b of element k was stored at b * n + k
        if (size != chunk_elems * elem) throw DataError(fmt::format("{}: '{}' has a corrupt chunk", context, path));
        for (size_t b = 0; b < elem; ++b) {
          const uint8_t* plane = data + b * chunk_elems;
          for (size_t k = 0; k < chunk_elems; ++k) unshuffled[k * elem + b] = plane[k];
        }
        data = unshuffled.data();
      }
    }
    if (size != chunk_elems * elem) throw DataError(fmt::format("{}: '{}' has a corrupt chunk", context, path));
    // Scatter the chunk's rows (the last axis) that lie inside the dataset.
    const size_t row = chunk[static_cast<size_t>(rank) - 1];
    const size_t rows = chunk_elems / row;
    const int64_t last_off = static_cast<int64_t>(offset[static_cast<size_t>(rank) - 1]);
    const size_t keep = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(row), shape.back() - last_off));
    for (size_t r = 0; r < rows; ++r) {
      int64_t rest_r = static_cast<int64_t>(r), target = last_off;
      bool inside = true;
      for (int a = rank - 2; a >= 0; --a) {
        const int64_t i = rest_r % static_cast<int64_t>(chunk[static_cast<size_t>(a)]) +
                          static_cast<int64_t>(offset[static_cast<size_t>(a)]);
        rest_r /= static_cast<int64_t>(chunk[static_cast<size_t>(a)]);
        inside = inside && i < shape[static_cast<size_t>(a)];
        target += i * out_stride[static_cast<size_t>(a)];
      }
      if (inside) std::memcpy(dst + static_cast<size_t>(target) * elem, data + r * row * elem, keep * elem);
    }
  }
  return out;
}

}  // namespace

torch::Tensor read_tensor(hid_t loc, const std::string& path, torch::ScalarType dtype, const std::string& context) {
  Handle d = open_dataset(loc, path, context);
  const auto shape = dataset_shape(d.get(), context);
  if (const std::string problem = declared_size_problem(shape, dtype); !problem.empty()) {
    throw DataError(fmt::format("{}: '{}' {}", context, path, problem));
  }
  {
    Handle type(H5Dget_type(d.get()), H5Tclose);
    const auto cls = H5Tget_class(type.get());
    if (cls != H5T_FLOAT && cls != H5T_INTEGER) {
      throw DataError(fmt::format("{}: '{}' is not numeric", context, path));
    }
  }
  if (torch::Tensor raw = read_raw_chunks(d.get(), shape, context, path); raw.defined()) {
    return raw.scalar_type() == dtype ? raw : raw.to(dtype);
  }
  torch::Tensor t = torch::empty(shape, torch::TensorOptions().dtype(dtype));
  if (t.numel() == 0) return t;
  if (H5Dread(d.get(), native_type(dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data_ptr()) < 0) {
    throw DataError(fmt::format("{}: '{}' cannot be read (truncated or corrupt file?)", context, path));
  }
  return t;
}

int64_t CompressedTensor::stored_bytes() const {
  int64_t n = 0;
  for (const auto& c : chunks) n += static_cast<int64_t>(c.bytes.size());
  return n;
}

CompressedTensor compress_tensor(const torch::Tensor& tensor, const std::vector<int64_t>& chunk,
                                 int compression_level) {
  if (compression_level < 1 || compression_level > 9) {
    throw IoError(fmt::format("compress_tensor: compression level {} is not in 1..9", compression_level));
  }
  torch::Tensor t = tensor.to(torch::kCPU).contiguous();
  if (t.scalar_type() == torch::kBool) t = t.to(torch::kUInt8);
  if (t.scalar_type() == torch::kHalf || t.scalar_type() == torch::kBFloat16) t = t.to(torch::kFloat);
  native_type(t.scalar_type());  // throws for unsupported dtypes
  CompressedTensor out;
  out.dtype = t.scalar_type();
  out.shape.assign(t.sizes().begin(), t.sizes().end());
  out.compression_level = compression_level;
  const size_t rank = out.shape.size();
  if (rank == 0 || rank != chunk.size()) throw IoError("compress_tensor: chunk rank differs from the tensor's");
  for (size_t i = 0; i < rank; ++i) out.chunk.push_back(std::max<int64_t>(1, std::min(chunk[i], out.shape[i])));
  if (t.numel() == 0) return out;

  const size_t esize = t.element_size();
  int64_t chunk_elems = 1;
  for (auto c : out.chunk) chunk_elems *= c;
  const size_t chunk_bytes = static_cast<size_t>(chunk_elems) * esize;
  std::vector<unsigned char> raw(chunk_bytes), shuffled(chunk_bytes);
  std::vector<unsigned char> packed(compressBound(static_cast<uLong>(chunk_bytes)));
  const auto* src = static_cast<const unsigned char*>(t.data_ptr());
  // Row-major strides of the tensor, in elements.
  std::vector<int64_t> stride(rank, 1);
  for (size_t i = rank - 1; i > 0; --i) stride[i - 1] = stride[i] * out.shape[i];
  std::vector<int64_t> origin(rank, 0);  // chunk origin, iterated in row-major chunk order
  while (true) {
    // Gather the chunk (zero-padded at the edges, as HDF5 stores full chunks), row by row along
    // the last axis.
    std::fill(raw.begin(), raw.end(), 0);
    bool any = false;
    const int64_t last = rank - 1;
    const int64_t row_len = std::min(out.chunk[last], out.shape[last] - origin[last]);
    std::vector<int64_t> pos(rank - 1, 0);  // position inside the chunk over the leading axes
    while (true) {
      bool inside = true;
      int64_t src_off = origin[last], dst_off = 0;
      for (size_t i = 0; i + 1 < rank; ++i) {
        const int64_t g = origin[i] + pos[i];
        if (g >= out.shape[i]) inside = false;
        src_off += g * stride[i];
        dst_off = dst_off * out.chunk[i] + pos[i];
      }
      dst_off *= out.chunk[last];
      if (inside) {
        std::memcpy(raw.data() + static_cast<size_t>(dst_off) * esize, src + static_cast<size_t>(src_off) * esize,
                    static_cast<size_t>(row_len) * esize);
      }
      int64_t k = static_cast<int64_t>(rank) - 2;
      while (k >= 0 && ++pos[static_cast<size_t>(k)] == out.chunk[static_cast<size_t>(k)])
        pos[static_cast<size_t>(k--)] = 0;
      if (k < 0) break;
    }
    {
      // Any non-zero byte? An OR over 8-byte words (vectorised; no early exit on purpose).
      uint64_t acc = 0;
      const size_t words = chunk_bytes / 8;
      for (size_t w = 0; w < words; ++w) {
        uint64_t v;
        std::memcpy(&v, raw.data() + w * 8, 8);
        acc |= v;
      }
      for (size_t b = words * 8; b < chunk_bytes; ++b) acc |= raw[b];
      any = acc != 0;
    }
    if (any) {
      // HDF5's shuffle filter: byte j of element i goes to j * n + i (a no-op for 1-byte types).
      const unsigned char* in = raw.data();
      if (esize > 1) {
        for (size_t i = 0; i < static_cast<size_t>(chunk_elems); ++i) {
          for (size_t j = 0; j < esize; ++j) shuffled[j * static_cast<size_t>(chunk_elems) + i] = raw[i * esize + j];
        }
        in = shuffled.data();
      }
      uLongf packed_size = static_cast<uLongf>(packed.size());
      if (compress2(packed.data(), &packed_size, in, static_cast<uLong>(chunk_bytes), compression_level) != Z_OK) {
        throw IoError("compress_tensor: zlib compress2 failed");
      }
      CompressedTensor::Chunk c;
      c.offset.assign(origin.begin(), origin.end());
      c.bytes.assign(packed.begin(), packed.begin() + static_cast<std::ptrdiff_t>(packed_size));
      out.chunks.push_back(std::move(c));
    }
    int64_t k = static_cast<int64_t>(rank) - 1;
    while (k >= 0) {
      origin[static_cast<size_t>(k)] += out.chunk[static_cast<size_t>(k)];
      if (origin[static_cast<size_t>(k)] < out.shape[static_cast<size_t>(k)]) break;
      origin[static_cast<size_t>(k--)] = 0;
    }
    if (k < 0) break;
  }
  return out;
}

void write_compressed_tensor(hid_t loc, const std::string& path, const CompressedTensor& t,
                             const std::string& context) {
  const std::vector<hsize_t> dims(t.shape.begin(), t.shape.end());
  int64_t numel = 1;
  for (auto d : t.shape) numel *= d;
  // The chunks were compressed with shuffle + deflate: the dataset declares both filters even at level 0.
  const Handle d =
      create_dataset(loc, path, t.dtype, dims,
                     numel > 0 ? std::vector<hsize_t>(t.chunk.begin(), t.chunk.end()) : std::vector<hsize_t>{},
                     std::max(1, t.compression_level), context);
  for (const auto& c : t.chunks) {
    if (H5Dwrite_chunk(d.get(), H5P_DEFAULT, /*filters=*/0, c.offset.data(), c.bytes.size(), c.bytes.data()) < 0) {
      throw IoError(fmt::format("{}: cannot write dataset '{}'{}", context, path, write_failure_note(loc)));
    }
  }
}

SlabWriter::SlabWriter(hid_t loc, const std::string& path, torch::ScalarType dtype, std::vector<int64_t> shape,
                       int64_t axis, std::vector<int64_t> chunk, int compression_level, std::string context)
    : dtype_(dtype), shape_(std::move(shape)), axis_(axis), context_(std::move(context)) {
  const std::vector<hsize_t> dims(shape_.begin(), shape_.end());
  const std::vector<hsize_t> c = clamped_chunk(dims, chunk);
  chunk_rows_ = static_cast<int64_t>(c[static_cast<size_t>(axis_)]);
  dataset_ = create_dataset(loc, path, dtype_, dims, c, compression_level, context_);
}

void SlabWriter::write(const torch::Tensor& rows) {
  if (rows.dim() != static_cast<int64_t>(shape_.size())) {
    throw IoError(fmt::format("{}: slab has {} dimensions, the dataset {}", context_, rows.dim(), shape_.size()));
  }
  if (written_ + pending_rows_ + rows.size(axis_) > shape_[static_cast<size_t>(axis_)]) {
    throw IoError(fmt::format("{}: more rows than the dataset holds", context_));
  }
  pending_.push_back(rows.to(torch::kCPU, dtype_));
  pending_rows_ += rows.size(axis_);
  if (pending_rows_ >= chunk_rows_) flush(pending_rows_ / chunk_rows_ * chunk_rows_);
}

void SlabWriter::flush(int64_t n) {
  if (n <= 0) return;
  const torch::Tensor all = pending_.size() == 1 ? pending_[0] : torch::cat(pending_, axis_);
  const torch::Tensor out = all.narrow(axis_, 0, n).contiguous();
  std::vector<hsize_t> start(shape_.size(), 0), count(shape_.begin(), shape_.end());
  start[static_cast<size_t>(axis_)] = static_cast<hsize_t>(written_);
  count[static_cast<size_t>(axis_)] = static_cast<hsize_t>(n);
  Handle file_space(H5Dget_space(dataset_.get()), H5Sclose);
  U3D_CHECK_H5(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr),
               context_);
  Handle mem_space(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr), H5Sclose);
  if (H5Dwrite(dataset_.get(), native_type(dtype_), mem_space.get(), file_space.get(), H5P_DEFAULT, out.data_ptr()) <
      0) {
    throw IoError(fmt::format("{}: cannot write rows {}..{}{}", context_, written_, written_ + n,
                              write_failure_note(dataset_.get())));
  }
  written_ += n;
  const int64_t rest = all.size(axis_) - n;
  pending_.clear();
  if (rest > 0) pending_.push_back(all.narrow(axis_, n, rest).clone());
  pending_rows_ = rest;
}

void SlabWriter::finish() {
  flush(pending_rows_);
  if (written_ != shape_[static_cast<size_t>(axis_)]) {
    throw IoError(fmt::format("{}: {} of {} rows written", context_, written_, shape_[static_cast<size_t>(axis_)]));
  }
}

}  // namespace u3d::h5

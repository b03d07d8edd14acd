#include "h5.h"

#include <fcntl.h>
#include <unistd.h>

#include "u3d/files.h"

#include <fmt/ranges.h>

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <optional>

namespace u3d::h5 {
namespace {

// HDF5 closes the files still open at exit (H5_term_library, an atexit handler). A file whose close
// already failed (its final metadata write hit a full disk) is half torn down in HDF5 1.10, and that
// second close crashes the process (exit 139) after the one-line error was printed. Writers close
// what they open (StagedFile, Handle); this keeps a failure HDF5 itself leaves behind from turning
// exit 1 into a crash. It must run before the library initialises: at load time.
[[maybe_unused]] const bool kNoHdf5ExitCleanup = (H5dont_atexit(), true);

// Memory (native) and file (little-endian) types for a torch dtype.
hid_t native_type(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat: return H5T_NATIVE_FLOAT;
    case torch::kDouble: return H5T_NATIVE_DOUBLE;
    case torch::kUInt8: return H5T_NATIVE_UINT8;
    case torch::kInt8: return H5T_NATIVE_INT8;
    case torch::kInt16: return H5T_NATIVE_INT16;
    case torch::kInt32: return H5T_NATIVE_INT32;
    case torch::kInt64: return H5T_NATIVE_INT64;
    default: throw IoError(fmt::format("HDF5: unsupported tensor dtype {}", c10::toString(t)));
  }
}
hid_t file_type(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat: return H5T_IEEE_F32LE;
    case torch::kDouble: return H5T_IEEE_F64LE;
    case torch::kUInt8: return H5T_STD_U8LE;
    case torch::kInt8: return H5T_STD_I8LE;
    case torch::kInt16: return H5T_STD_I16LE;
    case torch::kInt32: return H5T_STD_I32LE;
    case torch::kInt64: return H5T_STD_I64LE;
    default: throw IoError(fmt::format("HDF5: unsupported tensor dtype {}", c10::toString(t)));
  }
}

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
    const H5Z_filter_t f = H5Pget_filter2(dcpl.get(), static_cast<unsigned>(i), &flags, &nvalues, values, sizeof name,
                                          name, &config);
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
    grid[static_cast<size_t>(a)] = (shape[static_cast<size_t>(a)] + static_cast<int64_t>(chunk[static_cast<size_t>(a)]) - 1) /
                                   static_cast<int64_t>(chunk[static_cast<size_t>(a)]);
    chunks *= grid[static_cast<size_t>(a)];
  }
  auto chunk_offset = [&](int64_t c, std::vector<hsize_t>& offset) {
    for (int a = rank - 1; a >= 0; --a) {
      offset[static_cast<size_t>(a)] = static_cast<hsize_t>(c % grid[static_cast<size_t>(a)]) * chunk[static_cast<size_t>(a)];
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
    if (H5Dget_chunk_info_by_coord(d, offset.data(), &filter_mask, &address, &stored_bytes[static_cast<size_t>(c)]) < 0) {
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
  for (int a = rank - 2; a >= 0; --a) out_stride[static_cast<size_t>(a)] = out_stride[static_cast<size_t>(a) + 1] * shape[static_cast<size_t>(a) + 1];
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
        if (uncompress(inflated.data(), &length, data, static_cast<uLong>(size)) != Z_OK ||
            length != inflated.size()) {
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
        const int64_t i = rest_r % static_cast<int64_t>(chunk[static_cast<size_t>(a)]) + static_cast<int64_t>(offset[static_cast<size_t>(a)]);
        rest_r /= static_cast<int64_t>(chunk[static_cast<size_t>(a)]);
        inside = inside && i < shape[static_cast<size_t>(a)];
        target += i * out_stride[static_cast<size_t>(a)];
      }
      if (inside) std::memcpy(dst + static_cast<size_t>(target) * elem, data + r * row * elem, keep * elem);
    }
  }
  return out;
}

Handle open_attribute(hid_t obj, const std::string& name, const std::string& context) {
  if (!has_attribute(obj, name)) throw DataError(fmt::format("{}: attribute '{}' is missing", context, name));
  Handle a(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose);
  if (!a.valid()) throw IoError(fmt::format("{}: cannot open attribute '{}'", context, name));
  return a;
}

// Reads N strings from an attribute or dataset whose type is `type`, fixed or variable length.
template <class ReadFn>
std::vector<std::string> read_strings(hid_t type, hsize_t n, ReadFn read, const std::string& context) {
  if (H5Tget_class(type) != H5T_STRING) throw DataError(fmt::format("{}: expected strings", context));
  std::vector<std::string> out;
  if (n == 0) return out;  // an empty list (reading nothing fails in HDF5)
  if (H5Tis_variable_str(type) > 0) {
    Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
    U3D_CHECK_H5(H5Tset_size(mem.get(), H5T_VARIABLE), context);
    U3D_CHECK_H5(H5Tset_cset(mem.get(), H5Tget_cset(type)), context);
    std::vector<char*> ptrs(n, nullptr);
    U3D_CHECK_H5(read(mem.get(), ptrs.data()), context);
    for (char* p : ptrs) out.emplace_back(p ? p : "");
    // Free the library-allocated strings.
    Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
    H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, ptrs.data());
  } else {
    const size_t size = H5Tget_size(type);
    Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
    U3D_CHECK_H5(H5Tset_size(mem.get(), size), context);
    U3D_CHECK_H5(H5Tset_strpad(mem.get(), H5T_STR_NULLPAD), context);
    std::vector<char> buf(size * n + 1, '\0');
    U3D_CHECK_H5(read(mem.get(), buf.data()), context);
    for (hsize_t i = 0; i < n; ++i) {
      const char* s = buf.data() + i * size;
      out.emplace_back(s, strnlen(s, size));
    }
  }
  return out;
}

hsize_t element_count(hid_t space) {
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  return n < 0 ? 0 : static_cast<hsize_t>(n);
}

Handle vlen_utf8_type() {
  Handle t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t.get(), H5T_VARIABLE);
  H5Tset_cset(t.get(), H5T_CSET_UTF8);
  return t;
}

}  // namespace

StagedFile::StagedFile(std::filesystem::path path) : path_(std::move(path)) {
  silence_errors();
  const auto dir = path_.parent_path().empty() ? std::filesystem::path(".") : path_.parent_path();
  ensure_writable_directory(dir);
  remove_stale_temporaries(dir);  // staged files of writers that were killed
  tmp_path_ = dir / fmt::format(".{}.partial.{}", path_.filename().string(), ::getpid());
  std::error_code ec;
  std::filesystem::remove(tmp_path_, ec);
  // Strong close: closing the file also closes every object still open in it, so no dataset or
  // group a failed writer still holds can keep the file open past abandon().
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (!fapl.valid() || H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG) < 0) {
    throw IoError(fmt::format("{}: cannot set up the HDF5 file access properties", path_.string()));
  }
  file_ = H5Fcreate(tmp_path_.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, fapl.get());
  if (file_ < 0) {
    throw IoError(fmt::format("{}: cannot create HDF5 file {}{}", path_.string(), tmp_path_.string(),
                              free_space_note(dir)));
  }
}

StagedFile::~StagedFile() {
  if (!committed_) abandon();
}

void StagedFile::abandon() {
  if (file_ >= 0) {
    // HDF5 flushes its metadata when it closes a file, and a close that fails (disk full) leaves the
    // file half torn down in the library's table: a second close, or H5_term_library at exit,
    // then crashes. The staged file is being thrown away, so first give its bytes back (truncate it
    // to 0 through a file descriptor of our own): the close then has room for its few metadata
    // blocks and succeeds, and every handle is released.
    const int fd = ::open(tmp_path_.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (fd >= 0) ::close(fd);
    H5Fclose(file_);
    file_ = -1;
  }
  std::error_code ec;
  std::filesystem::remove(tmp_path_, ec);
}

void StagedFile::commit() {
  // Flush first: a flush that fails leaves the file closable (abandon() in the destructor), a
  // failing close would not.
  if (H5Fflush(file_, H5F_SCOPE_GLOBAL) < 0) {
    throw IoError(fmt::format("{}: writing the HDF5 file failed (disk full?){}", path_.string(),
                              free_space_note(path_.parent_path())));
  }
  const herr_t rc = H5Fclose(file_);
  file_ = -1;  // never closed twice: after a failed close HDF5's state for it is gone
  if (rc < 0) {
    throw IoError(fmt::format("{}: closing the HDF5 file failed (disk full?){}", path_.string(),
                              free_space_note(path_.parent_path())));
  }
  commit_staged_file(tmp_path_, path_);
  committed_ = true;
}

std::string free_space_note(const std::filesystem::path& path) {
  const int64_t free = free_bytes(path.empty() ? std::filesystem::path(".") : path);
  return free >= 0 ? fmt::format(" ({} free on its file system)", human_bytes(static_cast<double>(free))) : "";
}

std::string write_failure_note(hid_t loc) {
  const ssize_t n = H5Fget_name(loc, nullptr, 0);
  if (n <= 0) return " (disk full?)";
  std::string name(static_cast<size_t>(n) + 1, '\0');
  H5Fget_name(loc, name.data(), name.size());
  name.resize(static_cast<size_t>(n));
  return " (disk full?)" + free_space_note(std::filesystem::path(name).parent_path());
}

void silence_errors() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

bool exists(hid_t loc, const std::string& path) {
  // Walk the path so that a missing intermediate group is "absent", not an error.
  size_t pos = 0;
  while (true) {
    const size_t slash = path.find('/', pos);
    const std::string prefix = path.substr(0, slash);
    if (!prefix.empty() && H5Lexists(loc, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    if (slash == std::string::npos) return true;
    pos = slash + 1;
  }
}

bool has_attribute(hid_t obj, const std::string& name) { return H5Aexists(obj, name.c_str()) > 0; }

Handle open_group(hid_t loc, const std::string& path, const std::string& context) {
  if (!exists(loc, path)) throw DataError(fmt::format("{}: group '{}' is missing", context, path));
  Handle g(H5Gopen2(loc, path.c_str(), H5P_DEFAULT), H5Gclose);
  if (!g.valid()) throw DataError(fmt::format("{}: '{}' is not a readable group", context, path));
  return g;
}

Handle create_group(hid_t loc, const std::string& path, const std::string& context) {
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Handle g(H5Gcreate2(loc, path.c_str(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  if (!g.valid()) throw IoError(fmt::format("{}: cannot create group '{}'", context, path));
  return g;
}

Handle open_dataset(hid_t loc, const std::string& path, const std::string& context) {
  if (!exists(loc, path)) throw DataError(fmt::format("{}: dataset '{}' is missing", context, path));
  Handle d(H5Dopen2(loc, path.c_str(), H5P_DEFAULT), H5Dclose);
  if (!d.valid()) throw DataError(fmt::format("{}: '{}' is not a readable dataset", context, path));
  return d;
}

std::string read_string_attribute(hid_t obj, const std::string& name, const std::string& context) {
  const auto v = read_string_list_attribute(obj, name, context);
  if (v.size() != 1) throw DataError(fmt::format("{}: attribute '{}' should hold one string", context, name));
  return v[0];
}

std::vector<std::string> read_string_list_attribute(hid_t obj, const std::string& name, const std::string& context) {
  Handle a = open_attribute(obj, name, context);
  Handle type(H5Aget_type(a.get()), H5Tclose);
  Handle space(H5Aget_space(a.get()), H5Sclose);
  const hsize_t n = element_count(space.get());
  const std::string where = fmt::format("{}: attribute '{}'", context, name);
  return read_strings(type.get(), n, [&](hid_t mem, void* buf) { return H5Aread(a.get(), mem, buf); }, where);
}

int64_t read_int_attribute(hid_t obj, const std::string& name, const std::string& context) {
  Handle a = open_attribute(obj, name, context);
  Handle type(H5Aget_type(a.get()), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_INTEGER) {
    throw DataError(fmt::format("{}: attribute '{}' should be an integer", context, name));
  }
  int64_t v = 0;
  U3D_CHECK_H5(H5Aread(a.get(), H5T_NATIVE_INT64, &v), context);
  return v;
}

std::vector<double> read_double_list_attribute(hid_t obj, const std::string& name, const std::string& context) {
  Handle a = open_attribute(obj, name, context);
  Handle type(H5Aget_type(a.get()), H5Tclose);
  const auto cls = H5Tget_class(type.get());
  if (cls != H5T_FLOAT && cls != H5T_INTEGER) {
    throw DataError(fmt::format("{}: attribute '{}' should hold numbers", context, name));
  }
  Handle space(H5Aget_space(a.get()), H5Sclose);
  std::vector<double> v(element_count(space.get()));
  if (!v.empty()) U3D_CHECK_H5(H5Aread(a.get(), H5T_NATIVE_DOUBLE, v.data()), context);
  return v;
}

void write_string_attribute(hid_t obj, const std::string& name, const std::string& value) {
  Handle type = vlen_utf8_type();
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle a(H5Acreate2(obj, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a.valid()) throw IoError(fmt::format("HDF5: cannot create attribute '{}'", name));
  const char* p = value.c_str();
  U3D_CHECK_H5(H5Awrite(a.get(), type.get(), &p), name);
}

void write_string_list_attribute(hid_t obj, const std::string& name, const std::vector<std::string>& values) {
  Handle type = vlen_utf8_type();
  const hsize_t n = values.size();
  Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
  Handle a(H5Acreate2(obj, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a.valid()) throw IoError(fmt::format("HDF5: cannot create attribute '{}'", name));
  std::vector<const char*> ptrs;
  for (const auto& s : values) ptrs.push_back(s.c_str());
  if (n > 0) U3D_CHECK_H5(H5Awrite(a.get(), type.get(), ptrs.data()), name);
}

void write_int_attribute(hid_t obj, const std::string& name, int64_t value) {
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle a(H5Acreate2(obj, name.c_str(), H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a.valid()) throw IoError(fmt::format("HDF5: cannot create attribute '{}'", name));
  U3D_CHECK_H5(H5Awrite(a.get(), H5T_NATIVE_INT64, &value), name);
}

void write_double_list_attribute(hid_t obj, const std::string& name, const std::vector<double>& values) {
  const hsize_t n = values.size();
  Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
  Handle a(H5Acreate2(obj, name.c_str(), H5T_IEEE_F64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a.valid()) throw IoError(fmt::format("HDF5: cannot create attribute '{}'", name));
  U3D_CHECK_H5(H5Awrite(a.get(), H5T_NATIVE_DOUBLE, values.data()), name);
}

std::vector<std::string> read_string_dataset(hid_t loc, const std::string& path, const std::string& context) {
  Handle d = open_dataset(loc, path, context);
  Handle type(H5Dget_type(d.get()), H5Tclose);
  Handle space(H5Dget_space(d.get()), H5Sclose);
  const hsize_t n = element_count(space.get());
  const std::string where = fmt::format("{}: '{}'", context, path);
  return read_strings(type.get(), n,
                      [&](hid_t mem, void* buf) { return H5Dread(d.get(), mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf); },
                      where);
}

void write_string_dataset(hid_t loc, const std::string& path, const std::vector<std::string>& values) {
  Handle type = vlen_utf8_type();
  const hsize_t n = values.size();
  Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Handle d(H5Dcreate2(loc, path.c_str(), type.get(), space.get(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  if (!d.valid()) throw IoError(fmt::format("HDF5: cannot create dataset '{}'", path));
  std::vector<const char*> ptrs;
  for (const auto& s : values) ptrs.push_back(s.c_str());
  if (n > 0) U3D_CHECK_H5(H5Dwrite(d.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()), path);
}

std::vector<int64_t> dataset_shape(hid_t dataset, const std::string& context) {
  Handle space(H5Dget_space(dataset), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) throw IoError(fmt::format("{}: cannot read dataset shape", context));
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return std::vector<int64_t>(dims.begin(), dims.end());
}

torch::ScalarType stored_dtype(hid_t dataset, const std::string& context) {
  Handle type(H5Dget_type(dataset), H5Tclose);
  const auto cls = H5Tget_class(type.get());
  const size_t size = H5Tget_size(type.get());
  if (cls == H5T_FLOAT) return size <= 4 ? torch::kFloat : torch::kDouble;
  if (cls == H5T_INTEGER) {
    const bool is_signed = H5Tget_sign(type.get()) == H5T_SGN_2;
    switch (size) {
      case 1: return is_signed ? torch::kInt8 : torch::kUInt8;
      case 2: return is_signed ? torch::kInt16 : torch::kInt32;
      case 4: return is_signed ? torch::kInt32 : torch::kInt64;
      default: return torch::kInt64;
    }
  }
  throw DataError(fmt::format("{}: expected a numeric dataset", context));
}

// A damaged or forged file can declare any shape, with chunks never written: refuse one that could
// not fit in the memory available before anything is allocated (it used to end in std::bad_alloc).
std::string declared_size_problem(const std::vector<int64_t>& shape, torch::ScalarType dtype) {
  double bytes = static_cast<double>(c10::elementSize(dtype));
  for (const int64_t s : shape) bytes *= static_cast<double>(s);
  const int64_t available = host_available_bytes();
  if (available <= 0 || bytes <= static_cast<double>(available)) return "";
  return fmt::format("declares shape [{}] ({} as {}), more than the {} of memory available; the file is damaged, or "
                     "the volume is too large for this machine",
                     fmt::join(shape, ", "), human_bytes(bytes), c10::toString(dtype),
                     human_bytes(static_cast<double>(available)));
}

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

void write_tensor(hid_t loc, const std::string& path, const torch::Tensor& tensor, const std::vector<int64_t>& chunk,
                  int compression_level, const std::string& context) {
  torch::Tensor t = tensor.to(torch::kCPU).contiguous();
  if (t.scalar_type() == torch::kBool) t = t.to(torch::kUInt8);
  if (t.scalar_type() == torch::kHalf || t.scalar_type() == torch::kBFloat16) t = t.to(torch::kFloat);
  std::vector<hsize_t> dims(t.sizes().begin(), t.sizes().end());
  Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (!chunk.empty() && t.numel() > 0) {
    std::vector<hsize_t> c(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) {
      c[i] = static_cast<hsize_t>(std::max<int64_t>(1, std::min<int64_t>(chunk[i], static_cast<int64_t>(dims[i]))));
    }
    U3D_CHECK_H5(H5Pset_chunk(dcpl.get(), static_cast<int>(c.size()), c.data()), context);
    if (compression_level > 0) {
      U3D_CHECK_H5(H5Pset_shuffle(dcpl.get()), context);
      U3D_CHECK_H5(H5Pset_deflate(dcpl.get(), static_cast<unsigned>(compression_level)), context);
    }
  }
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Handle d(H5Dcreate2(loc, path.c_str(), file_type(t.scalar_type()), space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT),
           H5Dclose);
  if (!d.valid()) throw IoError(fmt::format("{}: cannot create dataset '{}'{}", context, path, write_failure_note(loc)));
  if (t.numel() > 0) {
    if (H5Dwrite(d.get(), native_type(t.scalar_type()), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data_ptr()) < 0) {
      throw IoError(fmt::format("{}: cannot write dataset '{}'{}", context, path, write_failure_note(loc)));
    }
  }
}

// ---------------------------------------------------------------------------------------------
int64_t CompressedTensor::stored_bytes() const {
  int64_t n = 0;
  for (const auto& c : chunks) n += static_cast<int64_t>(c.bytes.size());
  return n;
}

CompressedTensor compress_tensor(const torch::Tensor& tensor, const std::vector<int64_t>& chunk, int compression_level) {
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
      while (k >= 0 && ++pos[static_cast<size_t>(k)] == out.chunk[static_cast<size_t>(k)]) pos[static_cast<size_t>(k--)] = 0;
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

void write_compressed_tensor(hid_t loc, const std::string& path, const CompressedTensor& t, const std::string& context) {
  std::vector<hsize_t> dims(t.shape.begin(), t.shape.end());
  Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  int64_t numel = 1;
  for (auto d : t.shape) numel *= d;
  if (numel > 0) {
    std::vector<hsize_t> c(t.chunk.begin(), t.chunk.end());
    U3D_CHECK_H5(H5Pset_chunk(dcpl.get(), static_cast<int>(c.size()), c.data()), context);
    U3D_CHECK_H5(H5Pset_shuffle(dcpl.get()), context);
    U3D_CHECK_H5(H5Pset_deflate(dcpl.get(), static_cast<unsigned>(t.compression_level)), context);
  }
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Handle d(H5Dcreate2(loc, path.c_str(), file_type(t.dtype), space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT),
           H5Dclose);
  if (!d.valid()) throw IoError(fmt::format("{}: cannot create dataset '{}'{}", context, path, write_failure_note(loc)));
  for (const auto& c : t.chunks) {
    if (H5Dwrite_chunk(d.get(), H5P_DEFAULT, /*filters=*/0, c.offset.data(), c.bytes.size(), c.bytes.data()) < 0) {
      throw IoError(fmt::format("{}: cannot write dataset '{}'{}", context, path, write_failure_note(loc)));
    }
  }
}

SlabWriter::SlabWriter(hid_t loc, const std::string& path, torch::ScalarType dtype, std::vector<int64_t> shape,
                       int64_t axis, std::vector<int64_t> chunk, int compression_level, std::string context)
    : dtype_(dtype), shape_(std::move(shape)), axis_(axis), context_(std::move(context)) {
  std::vector<hsize_t> dims(shape_.begin(), shape_.end());
  Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  std::vector<hsize_t> c(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    c[i] = static_cast<hsize_t>(std::max<int64_t>(1, std::min<int64_t>(chunk[i], shape_[i])));
  }
  chunk_rows_ = static_cast<int64_t>(c[static_cast<size_t>(axis_)]);
  U3D_CHECK_H5(H5Pset_chunk(dcpl.get(), static_cast<int>(c.size()), c.data()), context_);
  if (compression_level > 0) {
    U3D_CHECK_H5(H5Pset_shuffle(dcpl.get()), context_);
    U3D_CHECK_H5(H5Pset_deflate(dcpl.get(), static_cast<unsigned>(compression_level)), context_);
  }
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  dataset_ = Handle(H5Dcreate2(loc, path.c_str(), file_type(dtype_), space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT),
                    H5Dclose);
  if (!dataset_.valid()) {
    throw IoError(fmt::format("{}: cannot create dataset '{}'{}", context_, path, write_failure_note(loc)));
  }
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
  if (H5Dwrite(dataset_.get(), native_type(dtype_), mem_space.get(), file_space.get(), H5P_DEFAULT, out.data_ptr()) < 0) {
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

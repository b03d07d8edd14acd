#include "u3d/io/h5/h5.h"

#include <fcntl.h>
#include <unistd.h>

#include "u3d/core/files.h"
#include "u3d/core/input_limits.h"

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

Handle open_attribute(hid_t obj, const std::string& name, const std::string& context) {
  if (!has_attribute(obj, name)) throw DataError(fmt::format("{}: attribute '{}' is missing", context, name));
  Handle a(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose);
  if (!a.valid()) throw IoError(fmt::format("{}: cannot open attribute '{}'", context, name));
  return a;
}

hsize_t element_count(hid_t space) {
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  return n < 0 ? 0 : static_cast<hsize_t>(n);
}

// Reads the strings of an attribute or dataset of type `type` and dataspace `space`, fixed or variable length.
template <class ReadFn>
std::vector<std::string> read_strings(hid_t type, hid_t space, ReadFn read, const std::string& context) {
  const hsize_t n = element_count(space);
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

Handle vlen_utf8_type() {
  Handle t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t.get(), H5T_VARIABLE);
  H5Tset_cset(t.get(), H5T_CSET_UTF8);
  return t;
}

}  // namespace

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
    throw IoError(
        fmt::format("{}: cannot create HDF5 file {}{}", path_.string(), tmp_path_.string(), free_space_note(dir)));
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
  return read_strings(
      Handle(H5Aget_type(a.get()), H5Tclose).get(), Handle(H5Aget_space(a.get()), H5Sclose).get(),
      [&](hid_t mem, void* buf) { return H5Aread(a.get(), mem, buf); },
      fmt::format("{}: attribute '{}'", context, name));
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
  return read_strings(
      Handle(H5Dget_type(d.get()), H5Tclose).get(), Handle(H5Dget_space(d.get()), H5Sclose).get(),
      [&](hid_t mem, void* buf) { return H5Dread(d.get(), mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf); },
      fmt::format("{}: '{}'", context, path));
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
// not fit in the memory available before anything is allocated (core/input_limits.h, as every reader).
std::string declared_size_problem(const std::vector<int64_t>& shape, torch::ScalarType dtype) {
  return u3d::declared_size_problem(shape, static_cast<int64_t>(c10::elementSize(dtype)), c10::toString(dtype));
}

void write_tensor(hid_t loc, const std::string& path, const torch::Tensor& tensor, const std::vector<int64_t>& chunk,
                  int compression_level, const std::string& context) {
  torch::Tensor t = tensor.to(torch::kCPU).contiguous();
  if (t.scalar_type() == torch::kBool) t = t.to(torch::kUInt8);
  if (t.scalar_type() == torch::kHalf || t.scalar_type() == torch::kBFloat16) t = t.to(torch::kFloat);
  const std::vector<hsize_t> dims(t.sizes().begin(), t.sizes().end());
  const std::vector<hsize_t> c = !chunk.empty() && t.numel() > 0 ? clamped_chunk(dims, chunk) : std::vector<hsize_t>{};
  const Handle d = create_dataset(loc, path, t.scalar_type(), dims, c, compression_level, context);
  if (t.numel() > 0) {
    if (H5Dwrite(d.get(), native_type(t.scalar_type()), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data_ptr()) < 0) {
      throw IoError(fmt::format("{}: cannot write dataset '{}'{}", context, path, write_failure_note(loc)));
    }
  }
}

std::vector<hsize_t> clamped_chunk(const std::vector<hsize_t>& dims, const std::vector<int64_t>& chunk) {
  std::vector<hsize_t> c(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    c[i] = static_cast<hsize_t>(std::max<int64_t>(1, std::min<int64_t>(chunk[i], static_cast<int64_t>(dims[i]))));
  }
  return c;
}

Handle create_dataset(hid_t loc, const std::string& path, torch::ScalarType dtype, const std::vector<hsize_t>& dims,
                      const std::vector<hsize_t>& chunk, int compression_level, const std::string& context) {
  Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (!chunk.empty()) {
    U3D_CHECK_H5(H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()), context);
    if (compression_level > 0) {
      U3D_CHECK_H5(H5Pset_shuffle(dcpl.get()), context);
      U3D_CHECK_H5(H5Pset_deflate(dcpl.get(), static_cast<unsigned>(compression_level)), context);
    }
  }
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Handle d(H5Dcreate2(loc, path.c_str(), file_type(dtype), space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT), H5Dclose);
  if (!d.valid()) {
    throw IoError(fmt::format("{}: cannot create dataset '{}'{}", context, path, write_failure_note(loc)));
  }
  return d;
}

}  // namespace u3d::h5

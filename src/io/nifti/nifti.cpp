#include "u3d/io/nifti/nifti.h"

#include <fcntl.h>
#include <nifti2_io.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/input_limits.h"
#include "u3d/core/text.h"

namespace u3d {
namespace {

void init_library() {
  static std::once_flag once;
  // Errors become exceptions naming the file; the library's own messages would only repeat them.
  std::call_once(once, [] { nifti_set_debug_level(0); });
}

struct NimFree {
  void operator()(nifti_image* p) const {
    if (p) nifti_image_free(p);
  }
};
using NimPtr = std::unique_ptr<nifti_image, NimFree>;

std::string ending_of(const std::filesystem::path& path) {
  return ends_with(path.filename().string(), ".nii.gz") ? ".nii.gz" : ".nii";
}

std::array<double, 16> to_array(const nifti_dmat44& m) {
  std::array<double, 16> a{};
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) a[static_cast<size_t>(r * 4 + c)] = m.m[r][c];
  return a;
}

nifti_dmat44 to_mat(const std::array<double, 16>& a) {
  nifti_dmat44 m{};
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) m.m[r][c] = a[static_cast<size_t>(r * 4 + c)];
  return m;
}

NimPtr open_header(const std::filesystem::path& path) {
  init_library();
  check_input_file(path, /*max_bytes=*/-1, "a NIfTI file");
  if (!is_nifti_path(path)) {
    throw DataError(fmt::format("{}: not a NIfTI file name; expected .nii or .nii.gz", path.string()));
  }
  NimPtr nim(nifti_image_read(path.c_str(), /*read_data=*/0));
  if (!nim) {
    throw DataError(fmt::format("{}: not a readable NIfTI file (bad, truncated or not NIfTI header)", path.string()));
  }
  // Unused dims past dim[0] read as 0: count the volumes from the voxel total.
  const int64_t per_volume = std::max<int64_t>(1, nim->nx * nim->ny * nim->nz);
  const int64_t volumes = nim->nvox / per_volume;
  if (volumes > 1) {
    throw DataError(fmt::format("{}: holds {} volumes (dims {} x {} x {} x {}); expected one 3-D volume per file",
                                path.string(), volumes, nim->nx, nim->ny, nim->nz, nim->nt));
  }
  if (nim->nx < 1 || nim->ny < 1 || nim->nz < 1) {
    throw DataError(fmt::format("{}: has an empty dimension ({} x {} x {})", path.string(), nim->nx, nim->ny, nim->nz));
  }
  for (double d : {nim->dx, nim->dy, nim->dz}) {
    if (!std::isfinite(d) || d <= 0) {
      throw DataError(fmt::format("{}: voxel size (pixdim) {} x {} x {} is not positive", path.string(), nim->dx,
                                  nim->dy, nim->dz));
    }
  }
  return nim;
}

SourceGeometry geometry_of(const nifti_image& nim, const std::filesystem::path& path) {
  SourceGeometry g;
  g.format = "nifti";
  g.shape = {nim.nz, nim.ny, nim.nx};
  g.spacing = {nim.dz, nim.dy, nim.dx};
  g.qform_code = nim.qform_code;
  g.quatern = {nim.quatern_b, nim.quatern_c, nim.quatern_d, nim.qoffset_x, nim.qoffset_y, nim.qoffset_z, nim.qfac};
  g.qform = to_array(nim.qto_xyz);
  g.sform_code = nim.sform_code;
  g.sform = to_array(nim.sto_xyz);
  g.affine = nim.sform_code > 0 ? g.sform : g.qform;
  g.xyzt_units = nim.xyz_units | nim.time_units;
  g.nifti_version = (nim.nifti_type == NIFTI_FTYPE_NIFTI2_1 || nim.nifti_type == NIFTI_FTYPE_NIFTI2_2) ? 2 : 1;
  g.file_ending = ending_of(path);
  g.files = {path.string()};
  return g;
}

int datatype_for(torch::ScalarType t) {
  switch (t) {
    case torch::kUInt8: return DT_UINT8;
    case torch::kInt16: return DT_INT16;
    case torch::kInt32: return DT_INT32;
    case torch::kFloat: return DT_FLOAT32;
    default: throw IoError(fmt::format("NIfTI: cannot write voxels of type {}", c10::toString(t)));
  }
}

}  // namespace

bool is_nifti_path(const std::filesystem::path& path) {
  const std::string name = path.filename().string();
  return ends_with(name, ".nii") || ends_with(name, ".nii.gz");
}

SourceGeometry read_nifti_geometry(const std::filesystem::path& path) {
  NimPtr nim = open_header(path);
  return geometry_of(*nim, path);
}

NiftiVolume read_nifti(const std::filesystem::path& path) {
  NimPtr nim = open_header(path);
  // The voxels are read here rather than by nifti_image_load, which silently replaces NaN and Inf
  // by 0 in float files; the importers must see them to refuse such files.
  {
    check_declared_size(path.string() + ":", {nim->nz, nim->ny, nim->nx}, nim->nbyper,
                        nifti_datatype_string(nim->datatype));  // before the buffer: a header may declare anything
    const int64_t bytes = nim->nvox * nim->nbyper;
    znzFile fp = znzopen(nim->iname, "rb", nifti_is_gzfile(nim->iname));
    if (znz_isnull(fp)) throw DataError(fmt::format("{}: cannot open the voxel data", path.string()));
    nim->data = std::malloc(static_cast<size_t>(std::max<int64_t>(1, bytes)));
    const bool ok = nim->data && znzseek(fp, static_cast<long>(nim->iname_offset), SEEK_SET) >= 0 &&
                    static_cast<int64_t>(znzread(nim->data, 1, static_cast<size_t>(bytes), fp)) == bytes;
    znzclose(fp);
    if (!ok) {
      throw DataError(
          fmt::format("{}: voxel data cannot be read (truncated file or broken gzip stream?)", path.string()));
    }
    if (nim->swapsize > 1 && nim->byteorder != nifti_short_order()) {
      nifti_swap_Nbytes(nim->nvox, nim->swapsize, nim->data);
    }
  }
  NiftiVolume v;
  v.geometry = geometry_of(*nim, path);
  v.datatype = nim->datatype;
  const double slope = nim->scl_slope, inter = nim->scl_inter;
  const std::vector<int64_t> sizes = {nim->nz, nim->ny, nim->nx};
  const int64_t n = nim->nz * nim->ny * nim->nx;
  // The tensor takes over the library's buffer where the type maps directly (no copy).
  auto adopt = [&](torch::ScalarType t) {
    nifti_image* raw = nim.release();
    return torch::from_blob(
        raw->data, sizes, [raw](void*) { nifti_image_free(raw); }, torch::TensorOptions().dtype(t));
  };
  auto widen = [&](auto* src, torch::ScalarType t) {
    torch::Tensor out = torch::empty(sizes, torch::TensorOptions().dtype(t));
    if (t == torch::kInt32) {
      auto* dst = out.data_ptr<int32_t>();
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<int32_t>(src[i]);
    } else {
      auto* dst = out.data_ptr<int64_t>();
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<int64_t>(src[i]);
    }
    return out;
  };
  switch (nim->datatype) {
    case DT_UINT8: v.data = adopt(torch::kUInt8); break;
    case DT_INT8: v.data = adopt(torch::kInt8); break;
    case DT_INT16: v.data = adopt(torch::kInt16); break;
    case DT_INT32: v.data = adopt(torch::kInt32); break;
    case DT_INT64: v.data = adopt(torch::kInt64); break;
    case DT_FLOAT32: v.data = adopt(torch::kFloat); break;
    case DT_FLOAT64: v.data = adopt(torch::kDouble); break;
    case DT_UINT16: v.data = widen(static_cast<const uint16_t*>(nim->data), torch::kInt32); break;
    case DT_UINT32: v.data = widen(static_cast<const uint32_t*>(nim->data), torch::kInt64); break;
    case DT_UINT64: {
      const auto* src = static_cast<const uint64_t*>(nim->data);
      for (int64_t i = 0; i < n; ++i) {
        if (src[i] > static_cast<uint64_t>(INT64_MAX)) {
          throw DataError(fmt::format("{}: uint64 voxel values above 2^63 are not supported", path.string()));
        }
      }
      v.data = widen(src, torch::kInt64);
      break;
    }
    default:
      throw DataError(fmt::format("{}: voxel type {} is not supported; expected an integer or float type",
                                  path.string(), nifti_datatype_string(v.datatype)));
  }
  // scl_slope = 0 means "no scaling" (NIfTI standard); otherwise value = stored * slope + inter.
  if (std::isfinite(slope) && slope != 0 && (slope != 1 || inter != 0)) {
    v.data = v.data.to(torch::kFloat).mul_(slope).add_(inter);
  }
  return v;
}

// ---------------------------------------------------------------------------------------------
struct NiftiWriter::State {
  NimPtr nim;
  znzFile fp = nullptr;
  int64_t row_bytes = 0;
};

NiftiWriter::NiftiWriter(std::filesystem::path path, const SourceGeometry& geometry, torch::ScalarType dtype,
                         const std::string& description)
    : path_(std::move(path)), geometry_(geometry), dtype_(dtype), state_(std::make_unique<State>()) {
  init_library();
  if (!is_nifti_path(path_)) {
    throw IoError(fmt::format("{}: a NIfTI output name must end in .nii or .nii.gz", path_.string()));
  }
  const auto dir = path_.parent_path().empty() ? std::filesystem::path(".") : path_.parent_path();
  ensure_writable_directory(dir);
  tmp_path_ = dir / fmt::format(".{}.partial.{}{}", path_.filename().string(), ::getpid(), ending_of(path_));
  const int datatype = datatype_for(dtype_);
  const auto& g = geometry_;
  const int64_t dims[8] = {3, g.shape[2], g.shape[1], g.shape[0], 1, 1, 1, 1};
  state_->nim.reset(nifti_make_new_nim(dims, datatype, /*data_fill=*/0));
  nifti_image* nim = state_->nim.get();
  if (!nim) throw IoError(fmt::format("{}: cannot build a NIfTI header", path_.string()));
  nim->dx = nim->pixdim[1] = g.spacing[2];
  nim->dy = nim->pixdim[2] = g.spacing[1];
  nim->dz = nim->pixdim[3] = g.spacing[0];
  nim->xyz_units = static_cast<int>(g.xyzt_units & 0x07);
  nim->time_units = static_cast<int>(g.xyzt_units & 0x38);
  nim->qform_code = static_cast<int>(g.qform_code);
  nim->quatern_b = g.quatern[0];
  nim->quatern_c = g.quatern[1];
  nim->quatern_d = g.quatern[2];
  nim->qoffset_x = g.quatern[3];
  nim->qoffset_y = g.quatern[4];
  nim->qoffset_z = g.quatern[5];
  nim->qfac = g.quatern[6] < 0 ? -1.0 : 1.0;
  nim->qto_xyz = nifti_quatern_to_dmat44(nim->quatern_b, nim->quatern_c, nim->quatern_d, nim->qoffset_x, nim->qoffset_y,
                                         nim->qoffset_z, nim->dx, nim->dy, nim->dz, nim->qfac);
  nim->qto_ijk = nifti_dmat44_inverse(nim->qto_xyz);
  nim->sform_code = static_cast<int>(g.sform_code);
  if (g.sform_code > 0) {
    nim->sto_xyz = to_mat(g.sform);
    nim->sto_ijk = nifti_dmat44_inverse(nim->sto_xyz);
  }
  std::strncpy(nim->descrip, description.c_str(), sizeof(nim->descrip) - 1);
  nim->nifti_type = g.nifti_version == 2 ? NIFTI_FTYPE_NIFTI2_1 : NIFTI_FTYPE_NIFTI1_1;
  if (nifti_set_filenames(nim, tmp_path_.c_str(), /*check=*/0, /*set_byte_order=*/1) != 0) {
    throw IoError(fmt::format("{}: cannot set NIfTI file name {}", path_.string(), tmp_path_.string()));
  }
  std::error_code ec;
  std::filesystem::remove(tmp_path_, ec);
  state_->fp = nifti_image_write_hdr_img(nim, /*write_data=*/2, "wb");  // 2: header only, leave open
  if (znz_isnull(state_->fp)) {
    state_->fp = nullptr;
    throw IoError(fmt::format("{}: cannot create {}", path_.string(), tmp_path_.string()));
  }
  state_->row_bytes = g.shape[1] * g.shape[2] * static_cast<int64_t>(nim->nbyper);
}

NiftiWriter::~NiftiWriter() {
  if (state_ && state_->fp) znzclose(state_->fp);
  if (!committed_) {
    std::error_code ec;
    std::filesystem::remove(tmp_path_, ec);
  }
}

void NiftiWriter::write_slab(const torch::Tensor& slab) {
  if (!state_->fp) throw IoError(fmt::format("{}: written after commit", path_.string()));
  if (slab.dim() != 3 || slab.size(1) != geometry_.shape[1] || slab.size(2) != geometry_.shape[2]) {
    throw IoError(fmt::format("{}: slab of shape ({}) does not fit rows of {} x {}", path_.string(),
                              fmt::join(slab.sizes(), ", "), geometry_.shape[1], geometry_.shape[2]));
  }
  if (rows_ + slab.size(0) > geometry_.shape[0]) {
    throw IoError(fmt::format("{}: more than {} rows written", path_.string(), geometry_.shape[0]));
  }
  const torch::Tensor t = slab.to(torch::kCPU, dtype_).contiguous();
  const int64_t bytes = state_->row_bytes * t.size(0);
  if (bytes > 0 && nifti_write_buffer(state_->fp, t.data_ptr(), bytes) != bytes) {
    throw IoError(fmt::format("{}: cannot write {} (disk full? {} free)", path_.string(), tmp_path_.string(),
                              human_bytes(static_cast<double>(free_bytes(tmp_path_)))));
  }
  rows_ += t.size(0);
}

void NiftiWriter::commit() {
  if (rows_ != geometry_.shape[0]) {
    throw IoError(fmt::format("{}: {} of {} rows written; not committing", path_.string(), rows_, geometry_.shape[0]));
  }
  const int rc = znzclose(state_->fp);
  state_->fp = nullptr;
  if (rc != 0) throw IoError(fmt::format("{}: closing {} failed (disk full?)", path_.string(), tmp_path_.string()));
  commit_staged_file(tmp_path_, path_);
  committed_ = true;
}

void write_nifti(const std::filesystem::path& path, const torch::Tensor& volume, const SourceGeometry& geometry,
                 const std::string& description) {
  if (volume.dim() != 3 || volume.size(0) != geometry.shape[0] || volume.size(1) != geometry.shape[1] ||
      volume.size(2) != geometry.shape[2]) {
    throw IoError(fmt::format("{}: volume ({}) does not match the geometry's shape ({}, {}, {})", path.string(),
                              fmt::join(volume.sizes(), ", "), geometry.shape[0], geometry.shape[1],
                              geometry.shape[2]));
  }
  const auto t = volume.scalar_type();
  const torch::ScalarType dtype = (t == torch::kBool)                                                   ? torch::kUInt8
                                  : (t == torch::kInt64 || t == torch::kInt8)                           ? torch::kInt32
                                  : (t == torch::kDouble || t == torch::kHalf || t == torch::kBFloat16) ? torch::kFloat
                                                                                                        : t;
  NiftiWriter w(path, geometry, dtype, description);
  w.write_slab(volume);
  w.commit();
}

SourceGeometry plain_geometry(const Shape3& shape, const std::array<double, 3>& spacing) {
  SourceGeometry g;
  g.shape = shape;
  g.spacing = spacing;
  g.qform_code = 1;
  g.quatern = {0, 0, 0, 0, 0, 0, 1};
  g.qform = {spacing[2], 0, 0, 0, 0, spacing[1], 0, 0, 0, 0, spacing[0], 0, 0, 0, 0, 1};
  g.sform_code = 1;
  g.sform = g.qform;
  g.affine = g.qform;
  g.xyzt_units = NIFTI_UNITS_MM;
  return g;
}

}  // namespace u3d

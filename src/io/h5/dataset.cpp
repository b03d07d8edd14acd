#include "u3d/io/h5/dataset.h"

#include <algorithm>
#include <optional>
#include <set>

#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/finite.h"
#include "u3d/core/input_limits.h"
#include "u3d/core/signals.h"
#include "u3d/core/text.h"
#include "u3d/io/h5/h5.h"

namespace u3d {
namespace {

constexpr const char* kFormatName = "u3d-dataset";

std::vector<std::string> list_group(hid_t file, const std::string& path, const std::string& context) {
  std::vector<std::string> names;
  if (!h5::exists(file, path)) return names;
  h5::Handle g = h5::open_group(file, path, context);
  H5G_info_t info{};
  if (H5Gget_info(g.get(), &info) < 0) throw DataError(fmt::format("{}: cannot list '{}'", context, path));
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t len = H5Lget_name_by_idx(g.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (len < 0) throw DataError(fmt::format("{}: cannot list '{}'", context, path));
    std::string name(static_cast<size_t>(len) + 1, '\0');
    H5Lget_name_by_idx(g.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT);
    name.resize(static_cast<size_t>(len));
    names.push_back(std::move(name));
  }
  return names;
}

// An identifier read from a file, shown on one line: control characters and non-ASCII bytes as \xNN.
std::string printable(const std::string& id) {
  std::string out;
  for (unsigned char c : id) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  return out;
}

template <size_t N>
std::array<double, N> read_fixed(hid_t obj, const std::string& name, const std::string& ctx) {
  const auto v = h5::read_double_list_attribute(obj, name, ctx);
  if (v.size() != N)
    throw DataError(fmt::format("{}: attribute '{}' should hold {} numbers, has {}", ctx, name, N, v.size()));
  std::array<double, N> out{};
  std::copy(v.begin(), v.end(), out.begin());
  return out;
}

// SourceGeometry as source_* attributes of /cases/<id> (docs/dataset-format.md).
std::optional<SourceGeometry> read_source_attributes(hid_t group, const std::string& ctx) {
  if (!h5::has_attribute(group, "source_shape")) return std::nullopt;
  SourceGeometry g;
  if (h5::has_attribute(group, "source_format")) g.format = h5::read_string_attribute(group, "source_format", ctx);
  const auto shape = read_fixed<3>(group, "source_shape", ctx);
  for (int a = 0; a < 3; ++a) {
    g.shape[a] = static_cast<int64_t>(shape[a]);
    if (g.shape[a] < 1) throw DataError(fmt::format("{}: 'source_shape' must hold positive sizes", ctx));
  }
  g.spacing = read_fixed<3>(group, "source_spacing", ctx);
  g.qform_code = h5::read_int_attribute(group, "source_qform_code", ctx);
  g.quatern = read_fixed<7>(group, "source_quatern", ctx);
  g.qform = read_fixed<16>(group, "source_qform", ctx);
  g.sform_code = h5::read_int_attribute(group, "source_sform_code", ctx);
  g.sform = read_fixed<16>(group, "source_sform", ctx);
  g.affine = read_fixed<16>(group, "source_affine", ctx);
  g.xyzt_units = h5::read_int_attribute(group, "source_xyzt_units", ctx);
  if (h5::has_attribute(group, "source_nifti_version")) {
    g.nifti_version = h5::read_int_attribute(group, "source_nifti_version", ctx);
  }
  if (h5::has_attribute(group, "source_file_ending")) {
    g.file_ending = h5::read_string_attribute(group, "source_file_ending", ctx);
  }
  if (h5::has_attribute(group, "source_files")) g.files = h5::read_string_list_attribute(group, "source_files", ctx);
  return g;
}

void write_source_attributes(hid_t group, const SourceGeometry& g) {
  h5::write_string_attribute(group, "source_format", g.format);
  h5::write_double_list_attribute(
      group, "source_shape",
      {static_cast<double>(g.shape[0]), static_cast<double>(g.shape[1]), static_cast<double>(g.shape[2])});
  h5::write_double_list_attribute(group, "source_spacing", {g.spacing.begin(), g.spacing.end()});
  h5::write_int_attribute(group, "source_qform_code", g.qform_code);
  h5::write_double_list_attribute(group, "source_quatern", {g.quatern.begin(), g.quatern.end()});
  h5::write_double_list_attribute(group, "source_qform", {g.qform.begin(), g.qform.end()});
  h5::write_int_attribute(group, "source_sform_code", g.sform_code);
  h5::write_double_list_attribute(group, "source_sform", {g.sform.begin(), g.sform.end()});
  h5::write_double_list_attribute(group, "source_affine", {g.affine.begin(), g.affine.end()});
  h5::write_int_attribute(group, "source_xyzt_units", g.xyzt_units);
  h5::write_int_attribute(group, "source_nifti_version", g.nifti_version);
  h5::write_string_attribute(group, "source_file_ending", g.file_ending);
  h5::write_string_list_attribute(group, "source_files", g.files);
}

}  // namespace

std::string to_string(Task t) { return t == Task::kDose ? "dose" : "segmentation"; }

Task task_from_string(const std::string& s) {
  if (s == "dose" || s == "regression") return Task::kDose;
  if (s == "segmentation") return Task::kSegmentation;
  throw DataError(fmt::format("task '{}' is not dose or segmentation", s));
}

bool is_valid_case_id(const std::string& id) {
  if (id.empty() || id == "." || id == "..") return false;
  return std::all_of(id.begin(), id.end(),
                     [](unsigned char c) { return std::isalnum(c) || c == '_' || c == '-' || c == '.'; });
}

// ---------------------------------------------------------------------------------------------
DatasetReader::DatasetReader(const std::filesystem::path& path) : path_(path) {
  h5::silence_errors();
  const std::string ctx = path.string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw IoError(fmt::format("{}: dataset file not found", ctx));
  check_input_file(path, /*max_bytes=*/-1, "a dataset file (HDF5)");  // not a FIFO or a device
  if (H5Fis_hdf5(path.c_str()) <= 0) throw DataError(fmt::format("{}: not an HDF5 file", ctx));
  file_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file_ < 0) throw DataError(fmt::format("{}: cannot open HDF5 file (truncated or corrupt?)", ctx));
  try {
    read_info();
  } catch (...) {  // the destructor does not run for a constructor that throws
    H5Fclose(static_cast<hid_t>(file_));
    file_ = -1;
    throw;
  }
}

void DatasetReader::read_info() {
  const std::string ctx = path_.string();

  const hid_t f = static_cast<hid_t>(file_);
  h5::Handle root = h5::open_group(f, "/", ctx);
  if (!h5::has_attribute(root.get(), "format") || h5::read_string_attribute(root.get(), "format", ctx) != kFormatName) {
    throw DataError(
        fmt::format("{}: root attribute format=\"{}\" is missing; not a trainer dataset "
                    "(see docs/dataset-format.md)",
                    ctx, kFormatName));
  }
  const int64_t version = h5::read_int_attribute(root.get(), "format_version", ctx);
  if (version != kDatasetFormatVersion) {
    throw DataError(fmt::format("{}: format_version {} is not supported (this build reads {})", ctx, version,
                                kDatasetFormatVersion));
  }
  info_.task = task_from_string(h5::read_string_attribute(root.get(), "task", ctx));
  info_.channel_names = h5::read_string_list_attribute(root.get(), "channel_names", ctx);
  if (info_.channel_names.empty()) throw DataError(fmt::format("{}: channel_names is empty", ctx));
  if (h5::has_attribute(root.get(), "target_name")) {
    info_.target_name = h5::read_string_attribute(root.get(), "target_name", ctx);
  }
  if (h5::has_attribute(root.get(), "target_units")) {
    info_.target_units = h5::read_string_attribute(root.get(), "target_units", ctx);
  }
  if (h5::has_attribute(root.get(), "description")) {
    info_.description = h5::read_string_attribute(root.get(), "description", ctx);
  }
  if (h5::has_attribute(root.get(), "channel_normalization")) {
    info_.channel_normalization = h5::read_string_list_attribute(root.get(), "channel_normalization", ctx);
    if (info_.channel_normalization.size() != info_.channel_names.size()) {
      throw DataError(fmt::format("{}: channel_normalization has {} entries for {} channels", ctx,
                                  info_.channel_normalization.size(), info_.channel_names.size()));
    }
  }
  if (info_.task == Task::kSegmentation) {
    info_.num_classes = h5::read_int_attribute(root.get(), "num_classes", ctx);
    if (info_.num_classes < 2 || info_.num_classes > 256) {
      throw DataError(
          fmt::format("{}: num_classes = {}; expected 2..256 (background included)", ctx, info_.num_classes));
    }
    if (h5::has_attribute(root.get(), "class_names")) {
      info_.class_names = h5::read_string_list_attribute(root.get(), "class_names", ctx);
    }
    if (h5::has_attribute(root.get(), "ignore_label")) {
      info_.ignore_label = h5::read_int_attribute(root.get(), "ignore_label", ctx);
      if (info_.ignore_label < info_.num_classes || info_.ignore_label > 255) {
        throw DataError(fmt::format("{}: ignore_label = {}; expected a label above the classes 0..{} and at most 255",
                                    ctx, info_.ignore_label, info_.num_classes - 1));
      }
    }
    if (info_.class_names.size() != static_cast<size_t>(info_.num_classes)) {
      info_.class_names.clear();
      for (int64_t k = 0; k < info_.num_classes; ++k)
        info_.class_names.push_back(k == 0 ? "background" : fmt::format("class_{}", k));
    }
  }
  info_.case_ids = list_group(f, "cases", ctx);
  std::sort(info_.case_ids.begin(), info_.case_ids.end());
  // Ids become HDF5 paths, file names and CSV fields downstream: the rule the writers enforce holds
  // for every file read, whoever made it.
  for (const auto& id : info_.case_ids) {
    if (!is_valid_case_id(id)) {
      throw DataError(
          fmt::format("{}: case id '{}' in /cases is not allowed: case ids may hold only letters, digits, "
                      "'_', '-' and '.'",
                      ctx, printable(id)));
    }
  }
  const std::set<std::string> known(info_.case_ids.begin(), info_.case_ids.end());
  for (const auto& split : list_group(f, "splits", ctx)) {
    if (!is_valid_case_id(split)) {  // split names become file names: predictions/<split>.h5
      throw DataError(
          fmt::format("{}: split name '{}' in /splits is not allowed: split names may hold only letters, "
                      "digits, '_', '-' and '.'",
                      ctx, printable(split)));
    }
    auto ids = h5::read_string_dataset(f, "splits/" + split, ctx);
    for (const auto& id : ids) {
      if (!known.count(id)) {
        throw DataError(fmt::format("{}: split '{}' names case '{}', which is not in /cases", ctx, split, id));
      }
    }
    info_.splits[split] = std::move(ids);
  }
}

DatasetReader::~DatasetReader() {
  if (file_ >= 0) H5Fclose(static_cast<hid_t>(file_));
}

const std::vector<std::string>& DatasetReader::split(const std::string& name) const {
  const auto it = info_.splits.find(name);
  if (it == info_.splits.end()) {
    std::vector<std::string> names;
    for (const auto& [n, ids] : info_.splits) names.push_back(n);
    // A split is asked for by name (a config key, --split): one it lacks is a wrong request (exit 2).
    throw ConfigError(
        fmt::format("{}: split '{}' is missing; the file has: {}", path_.string(), name,
                    names.empty() ? std::string("no splits") : fmt::format("{}", fmt::join(names, ", "))));
  }
  return it->second;
}

namespace {
// The spacing attribute of a case's group: mm along (D, H, W), 1 mm when absent.
std::array<double, 3> read_spacing(hid_t group, const std::string& ctx) {
  if (!h5::has_attribute(group, "spacing")) return {1.0, 1.0, 1.0};
  const auto s = h5::read_double_list_attribute(group, "spacing", ctx);
  if (s.size() != 3 || !std::all_of(s.begin(), s.end(), [](double v) { return std::isfinite(v) && v > 0; })) {
    throw DataError(fmt::format("{}: 'spacing' should be three positive numbers (mm along D, H, W)", ctx));
  }
  return {s[0], s[1], s[2]};
}
}  // namespace

Shape3 DatasetReader::case_shape(const std::string& id) const {
  const std::string ctx = fmt::format("{}: case '{}'", path_.string(), id);
  h5::Handle d = h5::open_dataset(static_cast<hid_t>(file_), "cases/" + id + "/image", ctx);
  const auto s = h5::dataset_shape(d.get(), ctx);
  if (s.size() != 4)
    throw DataError(fmt::format("{}: 'image' should be (C, D, H, W), has {} dimensions", ctx, s.size()));
  return {s[1], s[2], s[3]};
}

CaseData DatasetReader::read_case(const std::string& id) const {
  const std::string ctx = fmt::format("{}: case '{}'", path_.string(), id);
  const hid_t f = static_cast<hid_t>(file_);
  const std::string base = "cases/" + id;
  if (!h5::exists(f, base)) throw DataError(fmt::format("{}: not in the file", ctx));
  CaseData c;
  c.id = id;
  c.image = h5::read_tensor(f, base + "/image", torch::kFloat, ctx);
  if (c.image.dim() != 4) {
    throw DataError(fmt::format("{}: 'image' should be (C, D, H, W), is {}", ctx, shape_text(c.image.sizes())));
  }
  if (c.image.size(0) != static_cast<int64_t>(info_.channel_names.size())) {
    throw DataError(fmt::format("{}: 'image' has {} channels; channel_names lists {}", ctx, c.image.size(0),
                                info_.channel_names.size()));
  }
  check_finite(c.image, fmt::format("{}: 'image'", ctx));
  const auto spatial = c.image.sizes().slice(1);
  if (h5::exists(f, base + "/target")) {
    if (info_.task == Task::kSegmentation) {
      torch::Tensor labels = h5::read_tensor(f, base + "/target", torch::kInt64, ctx);
      if (labels.numel() > 0) {
        const int64_t lo = labels.min().item<int64_t>();
        const int64_t hi = labels.max().item<int64_t>();
        // The ignore label may appear above the classes; every other value is a class.
        const int64_t hi_class = info_.ignore_label >= 0 && hi == info_.ignore_label
                                     ? labels.masked_fill(labels == info_.ignore_label, 0).max().item<int64_t>()
                                     : hi;
        if (lo < 0 || hi_class >= info_.num_classes) {
          throw DataError(fmt::format(
              "{}: 'target' holds label values in [{}, {}]; num_classes = {} allows 0..{}{}", ctx, lo, hi,
              info_.num_classes, info_.num_classes - 1,
              info_.ignore_label >= 0 ? fmt::format(" and the ignore label {}", info_.ignore_label) : std::string()));
        }
      }
      c.target = labels.to(torch::kUInt8);
    } else {
      c.target = h5::read_tensor(f, base + "/target", torch::kFloat, ctx);
      check_finite(c.target, fmt::format("{}: 'target'", ctx));
    }
    if (c.target.sizes() != spatial) {
      throw DataError(fmt::format("{}: 'target' is {} but the image is {} spatially", ctx, shape_text(c.target.sizes()),
                                  shape_text(spatial)));
    }
  }
  if (h5::exists(f, base + "/mask")) {
    c.mask = h5::read_tensor(f, base + "/mask", torch::kUInt8, ctx);
    if (c.mask.sizes() != spatial) {
      throw DataError(fmt::format("{}: 'mask' is {} but the image is {} spatially", ctx, shape_text(c.mask.sizes()),
                                  shape_text(spatial)));
    }
  }
  h5::Handle group = h5::open_group(f, base, ctx);
  c.spacing = read_spacing(group.get(), ctx);
  c.source = read_source_attributes(group.get(), ctx);
  return c;
}

std::array<double, 3> DatasetReader::case_spacing(const std::string& id) const {
  const std::string ctx = fmt::format("{}: case '{}'", path_.string(), id);
  h5::Handle group = h5::open_group(static_cast<hid_t>(file_), "cases/" + id, ctx);
  return read_spacing(group.get(), ctx);
}

std::optional<SourceGeometry> DatasetReader::read_source(const std::string& id) const {
  const std::string ctx = fmt::format("{}: case '{}'", path_.string(), id);
  h5::Handle group = h5::open_group(static_cast<hid_t>(file_), "cases/" + id, ctx);
  return read_source_attributes(group.get(), ctx);
}

// ---------------------------------------------------------------------------------------------
DatasetWriter::DatasetWriter(std::filesystem::path path, DatasetInfo info, DatasetWriteOptions options)
    : path_(std::move(path)), info_(std::move(info)), options_(options) {
  file_ = std::make_unique<h5::StagedFile>(path_);
  h5::Handle root(H5Gopen2(file_->get(), "/", H5P_DEFAULT), H5Gclose);
  h5::write_string_attribute(root.get(), "format", kFormatName);
  h5::write_int_attribute(root.get(), "format_version", kDatasetFormatVersion);
  h5::write_string_attribute(root.get(), "task", to_string(info_.task));
  h5::write_string_list_attribute(root.get(), "channel_names", info_.channel_names);
  h5::write_string_attribute(root.get(), "target_name", info_.target_name);
  h5::write_string_attribute(root.get(), "target_units", info_.target_units);
  if (!info_.description.empty()) h5::write_string_attribute(root.get(), "description", info_.description);
  if (info_.task == Task::kSegmentation) {
    h5::write_int_attribute(root.get(), "num_classes", info_.num_classes);
    if (!info_.class_names.empty()) h5::write_string_list_attribute(root.get(), "class_names", info_.class_names);
    if (info_.ignore_label >= 0) h5::write_int_attribute(root.get(), "ignore_label", info_.ignore_label);
  }
  info_.case_ids.clear();
}

DatasetWriter::~DatasetWriter() = default;

void DatasetWriter::check_writable(const CaseData& c) const {
  const std::string ctx = fmt::format("{}: case '{}'", path_.string(), c.id);
  if (!is_valid_case_id(c.id)) {
    throw DataError(fmt::format("{}: case ids may hold only letters, digits, '_', '-' and '.'", ctx));
  }
  if (!c.image.defined() || c.image.dim() != 4 || c.image.size(0) != static_cast<int64_t>(info_.channel_names.size())) {
    throw DataError(fmt::format("{}: image must be (C, D, H, W) with C = {}", ctx, info_.channel_names.size()));
  }
  const auto spatial = c.image.sizes().slice(1);
  if (c.target.defined() && c.target.sizes() != spatial) {
    throw DataError(fmt::format("{}: target must be (D, H, W) like the image", ctx));
  }
  if (c.mask.defined() && c.mask.sizes() != spatial) {
    throw DataError(fmt::format("{}: mask must be (D, H, W) like the image", ctx));
  }
}

struct PreparedCase {
  CaseData data;  // compression level 0: kept as is and written by write_case(CaseData)
  std::optional<h5::CompressedTensor> image, target, mask;
};

std::shared_ptr<const PreparedCase> DatasetWriter::prepare(const CaseData& c) const {
  check_writable(c);
  auto p = std::make_shared<PreparedCase>();
  p->data = c;
  if (options_.compression_level <= 0) return p;
  const int64_t k = options_.chunk;
  const int level = options_.compression_level;
  p->image = h5::compress_tensor(c.image, {1, k, k, k}, level);
  if (c.target.defined()) p->target = h5::compress_tensor(c.target, {k, k, k}, level);
  if (c.mask.defined()) p->mask = h5::compress_tensor(c.mask.to(torch::kUInt8), {k, k, k}, level);
  // Keep only what write_case needs: the id, spacing and source geometry.
  p->data.image = p->data.target = p->data.mask = torch::Tensor();
  return p;
}

void DatasetWriter::write_case(const PreparedCase& p) {
  StopSignals::throw_if_stopped(path_.string());
  if (!p.image) {
    write_case(p.data);
    return;
  }
  const std::string ctx = fmt::format("{}: case '{}'", path_.string(), p.data.id);
  if (std::find(info_.case_ids.begin(), info_.case_ids.end(), p.data.id) != info_.case_ids.end()) {
    throw DataError(fmt::format("{}: written twice", ctx));
  }
  const hid_t f = file_->get();
  const std::string base = "cases/" + p.data.id;
  h5::Handle group = h5::create_group(f, base, ctx);
  h5::write_compressed_tensor(f, base + "/image", *p.image, ctx);
  if (p.target) h5::write_compressed_tensor(f, base + "/target", *p.target, ctx);
  if (p.mask) h5::write_compressed_tensor(f, base + "/mask", *p.mask, ctx);
  const auto& s = p.data.spacing;
  h5::write_double_list_attribute(group.get(), "spacing", {s[0], s[1], s[2]});
  if (p.data.source) write_source_attributes(group.get(), *p.data.source);  // as write_case(CaseData)
  info_.case_ids.push_back(p.data.id);
}

void DatasetWriter::write_case(const CaseData& c) {
  StopSignals::throw_if_stopped(path_.string());
  const std::string ctx = fmt::format("{}: case '{}'", path_.string(), c.id);
  check_writable(c);
  if (std::find(info_.case_ids.begin(), info_.case_ids.end(), c.id) != info_.case_ids.end()) {
    throw DataError(fmt::format("{}: written twice", ctx));
  }
  const auto spatial = c.image.sizes().slice(1);
  const hid_t f = file_->get();
  const std::string base = "cases/" + c.id;
  h5::Handle group = h5::create_group(f, base, ctx);
  const int64_t k = options_.chunk;
  h5::write_tensor(f, base + "/image", c.image, {1, k, k, k}, options_.compression_level, ctx);
  if (c.target.defined()) {
    if (c.target.sizes() != spatial) throw DataError(fmt::format("{}: target must be (D, H, W) like the image", ctx));
    h5::write_tensor(f, base + "/target", c.target, {k, k, k}, options_.compression_level, ctx);
  }
  if (c.mask.defined()) {
    if (c.mask.sizes() != spatial) throw DataError(fmt::format("{}: mask must be (D, H, W) like the image", ctx));
    h5::write_tensor(f, base + "/mask", c.mask.to(torch::kUInt8), {k, k, k}, options_.compression_level, ctx);
  }
  h5::write_double_list_attribute(group.get(), "spacing", {c.spacing[0], c.spacing[1], c.spacing[2]});
  if (c.source) write_source_attributes(group.get(), *c.source);
  info_.case_ids.push_back(c.id);
}

void DatasetWriter::set_split(const std::string& name, std::vector<std::string> ids) {
  info_.splits[name] = std::move(ids);
}

void DatasetWriter::set_channel_normalization(std::vector<std::string> specs) {
  if (specs.size() != info_.channel_names.size()) {
    throw DataError(fmt::format("{}: channel_normalization needs {} entries, got {}", path_.string(),
                                info_.channel_names.size(), specs.size()));
  }
  info_.channel_normalization = std::move(specs);
}

void DatasetWriter::commit() {
  if (!info_.channel_normalization.empty()) {
    h5::Handle root(H5Gopen2(file_->get(), "/", H5P_DEFAULT), H5Gclose);
    h5::write_string_list_attribute(root.get(), "channel_normalization", info_.channel_normalization);
  }
  const std::set<std::string> known(info_.case_ids.begin(), info_.case_ids.end());
  for (const auto& [name, ids] : info_.splits) {
    for (const auto& id : ids) {
      if (!known.count(id)) {
        throw DataError(fmt::format("{}: split '{}' names case '{}', which was not written", path_.string(), name, id));
      }
    }
    h5::write_string_dataset(file_->get(), "splits/" + name, ids);
  }
  file_->commit();
}

}  // namespace u3d

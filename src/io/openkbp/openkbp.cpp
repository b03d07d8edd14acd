#include "u3d/io/openkbp/openkbp.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <unistd.h>

#include "../import_layout.h"
#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/parallel.h"
#include "u3d/core/text.h"

namespace u3d::openkbp {
namespace {

namespace fs = std::filesystem;

// Split folders of a provided-data folder and the split each becomes.
const std::vector<std::pair<std::string, std::string>>& split_folders() {
  static const std::vector<std::pair<std::string, std::string>> folders = {
      {"train-pats", "train"}, {"validation-pats", "val"}, {"test-pats", "test"}};
  return folders;
}

bool is_patient_folder(const fs::directory_entry& e) {
  std::error_code ec;
  const std::string name = e.path().filename().string();
  return e.is_directory(ec) && name.rfind("pt_", 0) == 0;
}

// "pt_12" -> 12 for a natural order; names without a number sort after, by name.
int64_t patient_number(const std::string& id) {
  int64_t n = 0;
  const char* b = id.data() + 3;
  const char* e = id.data() + id.size();
  const auto [ptr, ec] = std::from_chars(b, e, n);
  return (ec == std::errc() && ptr == e) ? n : INT64_MAX;
}

std::string_view trim_cr(std::string_view s) {
  if (!s.empty() && s.back() == '\r') s.remove_suffix(1);
  return s;
}

// Per thread: the line that first named each voxel index (0: not seen), reset after each file.
std::vector<uint32_t>& seen_lines() {
  thread_local std::vector<uint32_t> lines(static_cast<size_t>(kGridVoxels), 0);
  return lines;
}

torch::Tensor dense_values(const SparseCsv& csv) {
  torch::Tensor t = torch::zeros({kGridSize, kGridSize, kGridSize}, torch::kFloat);
  float* p = t.data_ptr<float>();
  for (size_t i = 0; i < csv.indices.size(); ++i) p[csv.indices[i]] = csv.values[i];
  return t;
}

torch::Tensor dense_mask(const SparseCsv& csv, torch::Tensor out = {}) {
  if (!out.defined()) out = torch::zeros({kGridSize, kGridSize, kGridSize}, torch::kUInt8);
  uint8_t* p = out.data_ptr<uint8_t>();
  for (int32_t idx : csv.indices) p[idx] = 1;
  return out;
}

}  // namespace

const std::vector<std::string>& oar_names() {
  static const std::vector<std::string> names = {"Brainstem", "SpinalCord", "RightParotid", "LeftParotid",
                                                 "Esophagus", "Larynx",     "Mandible"};
  return names;
}

const std::vector<std::string>& target_names() {
  static const std::vector<std::string> names = {"PTV56", "PTV63", "PTV70"};
  return names;
}

const std::vector<std::string>& structure_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> all = oar_names();
    all.insert(all.end(), target_names().begin(), target_names().end());
    return all;
  }();
  return names;
}

std::vector<std::string> channel_names() {
  std::vector<std::string> names = {"ct"};
  names.insert(names.end(), structure_names().begin(), structure_names().end());
  return names;
}

bool is_openkbp_dataset(const DatasetInfo& info) {
  if (info.task != Task::kDose) return false;
  for (const auto& name : channel_names()) {
    if (!find_channel(info.channel_names, name)) return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
SparseCsv parse_sparse_csv(std::string_view text, const std::string& name, CsvKind kind) {
  SparseCsv out;
  auto fail = [&](size_t line, const std::string& what) -> void {
    throw DataError(fmt::format("{}:{}: {}", name, line, what));
  };
  if (text.size() >= 3 && static_cast<unsigned char>(text[0]) == 0xEF && static_cast<unsigned char>(text[1]) == 0xBB &&
      static_cast<unsigned char>(text[2]) == 0xBF) {
    text.remove_prefix(3);  // UTF-8 byte-order mark
  }
  size_t pos = 0;
  auto next_line = [&](std::string_view& line) {
    if (pos >= text.size()) return false;
    const size_t end = text.find('\n', pos);
    line = trim_cr(text.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos));
    pos = end == std::string_view::npos ? text.size() : end + 1;
    return true;
  };
  std::string_view line;
  if (!next_line(line)) fail(1, "empty file; expected the header ',data'");
  if (line != ",data") {
    fail(1, fmt::format("header '{}' is not ',data' (an OpenKBP CSV file starts with ',data')",
                        std::string(line.substr(0, 40))));
  }
  // Rough row count from the size, to reserve once.
  out.indices.reserve(text.size() / (kind == CsvKind::kValues ? 12 : 8));
  if (kind == CsvKind::kValues) out.values.reserve(out.indices.capacity());
  std::vector<uint32_t>& seen = seen_lines();
  size_t line_no = 1;
  try {
    while (next_line(line)) {
      ++line_no;
      if (line.empty()) {
        if (pos >= text.size()) break;  // final newline
        fail(line_no, "empty line");
      }
      const size_t comma = line.find(',');
      if (comma == std::string_view::npos) {
        fail(line_no, fmt::format("expected 'index,{}', got '{}'", kind == CsvKind::kValues ? "value" : "",
                                  std::string(line.substr(0, 40))));
      }
      int64_t index = 0;
      const auto [iptr, iec] = std::from_chars(line.data(), line.data() + comma, index);
      if (iec != std::errc() || iptr != line.data() + comma || comma == 0) {
        fail(line_no, fmt::format("index '{}' is not an integer", std::string(line.substr(0, comma))));
      }
      if (index < 0 || index >= kGridVoxels) {
        fail(line_no, fmt::format("index {} is outside the grid 0..{} (128^3 voxels)", index, kGridVoxels - 1));
      }
      const std::string_view value = line.substr(comma + 1);
      if (kind == CsvKind::kMask) {
        if (!value.empty()) {
          fail(line_no,
               fmt::format("mask rows are 'index,' with an empty value, got '{}'", std::string(value.substr(0, 40))));
        }
      } else {
        double v = 0;
        const auto [vptr, vec] = std::from_chars(value.data(), value.data() + value.size(), v);
        if (value.empty() || vec != std::errc() || vptr != value.data() + value.size()) {
          fail(line_no, fmt::format("value '{}' is not a number", std::string(value.substr(0, 40))));
        }
        if (!std::isfinite(v) || std::abs(v) > 3.0e38) fail(line_no, fmt::format("value {} is not finite", v));
        out.values.push_back(static_cast<float>(v));
      }
      uint32_t& first = seen[static_cast<size_t>(index)];
      if (first != 0) fail(line_no, fmt::format("index {} appears twice (first on line {})", index, first));
      first = static_cast<uint32_t>(line_no);
      out.indices.push_back(static_cast<int32_t>(index));
    }
  } catch (...) {
    for (int32_t idx : out.indices) seen[static_cast<size_t>(idx)] = 0;
    throw;
  }
  for (int32_t idx : out.indices) seen[static_cast<size_t>(idx)] = 0;
  return out;
}

SparseCsv read_sparse_csv(const fs::path& path, CsvKind kind) {
  return parse_sparse_csv(read_file(path), path.string(), kind);
}

std::array<double, 3> read_voxel_dimensions(const fs::path& path) {
  const std::string text = read_file(path);
  std::array<double, 3> out{};
  size_t count = 0, line_no = 0, pos = 0;
  while (pos < text.size()) {
    const size_t end = std::min(text.find('\n', pos), text.size());
    ++line_no;
    std::string_view line = trim_cr(std::string_view(text).substr(pos, end - pos));
    pos = end + 1;
    // Numbers separated by blanks or commas (np.loadtxt writes one per line).
    size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == ',')) ++i;
      if (i >= line.size()) break;
      size_t j = i;
      while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != ',') ++j;
      double v = 0;
      const auto [ptr, ec] = std::from_chars(line.data() + i, line.data() + j, v);
      if (ec != std::errc() || ptr != line.data() + j) {
        throw DataError(
            fmt::format("{}:{}: '{}' is not a number", path.string(), line_no, std::string(line.substr(i, j - i))));
      }
      if (!(std::isfinite(v) && v > 0)) {
        throw DataError(fmt::format("{}:{}: voxel size {} must be a positive number of mm", path.string(), line_no, v));
      }
      if (count == 3) {
        throw DataError(fmt::format("{}:{}: more than three voxel sizes", path.string(), line_no));
      }
      out[count++] = v;
      i = j;
    }
  }
  if (count != 3) {
    throw DataError(fmt::format("{}:{}: expected three voxel sizes (mm along axes 0, 1, 2), found {}", path.string(),
                                std::max<size_t>(line_no, 1), count));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
Patient read_patient(const fs::path& dir) {
  Patient p;
  p.id = dir.filename().string();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw DataError(fmt::format("{}: patient folder not found", dir.string()));
  auto require = [&](const std::string& file) {
    const fs::path path = dir / file;
    if (!fs::exists(path, ec)) throw DataError(fmt::format("{}: required file is missing", path.string()));
    p.csv_bytes += static_cast<int64_t>(fs::file_size(path, ec));
    return path;
  };
  const SparseCsv ct = read_sparse_csv(require("ct.csv"), CsvKind::kValues);
  p.ct = dense_values(ct);
  p.ct_fits_int16 = std::all_of(ct.values.begin(), ct.values.end(),
                                [](float v) { return v == std::nearbyint(v) && v >= -32768.0f && v <= 32767.0f; });
  p.possible_dose_mask = dense_mask(read_sparse_csv(require("possible_dose_mask.csv"), CsvKind::kMask));
  p.spacing = read_voxel_dimensions(require("voxel_dimensions.csv"));
  if (fs::exists(dir / "dose.csv", ec)) {
    const SparseCsv dose = read_sparse_csv(require("dose.csv"), CsvKind::kValues);
    for (size_t i = 0; i < dose.values.size(); ++i) {
      if (dose.values[i] < 0) {
        throw DataError(fmt::format("{}: voxel {} has a negative dose {} Gy", (dir / "dose.csv").string(),
                                    dose.indices[i], dose.values[i]));
      }
      p.dose_csv_sum += static_cast<double>(dose.values[i]);
    }
    p.dose = dense_values(dose);
  }
  const auto& names = structure_names();
  p.structures = torch::zeros({static_cast<int64_t>(names.size()), kGridSize, kGridSize, kGridSize}, torch::kUInt8);
  for (size_t s = 0; s < names.size(); ++s) {
    const fs::path path = dir / (names[s] + ".csv");
    if (!fs::exists(path, ec)) {
      p.structure_voxels.push_back(0);
      continue;
    }
    const SparseCsv mask = read_sparse_csv(require(names[s] + ".csv"), CsvKind::kMask);
    dense_mask(mask, p.structures[static_cast<int64_t>(s)]);
    p.structure_voxels.push_back(static_cast<int64_t>(mask.indices.size()));
  }
  return p;
}

CaseData to_case(const Patient& p) {
  CaseData c;
  c.id = p.id;
  const int64_t s = static_cast<int64_t>(structure_names().size());
  const auto dtype = p.ct_fits_int16 ? torch::kInt16 : torch::kFloat;
  c.image = torch::empty({1 + s, kGridSize, kGridSize, kGridSize}, dtype);  // (11, 128, 128, 128)
  c.image[0].copy_(p.ct);
  c.image.slice(/*dim=*/0, /*start=*/1).copy_(p.structures);
  if (p.dose.defined()) c.target = p.dose;
  c.mask = p.possible_dose_mask;
  c.spacing = p.spacing;
  return c;
}

// ---------------------------------------------------------------------------------------------
std::vector<PatientFolder> find_patients(const fs::path& source, const std::string& single_split) {
  std::error_code ec;
  if (!fs::is_directory(source, ec)) {
    throw UsageError(fmt::format("openkbp: {} is not a folder", source.string()));
  }
  std::vector<PatientFolder> out;
  auto add_folder = [&](const fs::path& dir, const std::string& split) {
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (is_patient_folder(e)) out.push_back({e.path().filename().string(), e.path(), split});
    }
  };
  bool provided_layout = false;
  for (const auto& [folder, split] : split_folders()) {
    if (fs::is_directory(source / folder, ec)) {
      provided_layout = true;
      add_folder(source / folder, split);
    }
  }
  if (!provided_layout) {
    std::string split = single_split;
    const std::string name = fs::absolute(source).lexically_normal().filename().string();
    for (const auto& [folder, s] : split_folders()) {
      if (name == folder) split = s;
    }
    add_folder(source, split);
  }
  if (out.empty()) {
    throw UsageError(
        fmt::format("openkbp: no patient folders (pt_*) in {}; expected an OpenKBP provided-data "
                    "folder (train-pats, validation-pats, test-pats) or a folder of pt_* folders",
                    source.string()));
  }
  const auto split_rank = [](const std::string& s) {
    if (s == "train") return 0;
    if (s == "val") return 1;
    if (s == "test") return 2;
    return 3;
  };
  std::sort(out.begin(), out.end(), [&](const PatientFolder& a, const PatientFolder& b) {
    const auto ka = std::make_tuple(split_rank(a.split), patient_number(a.id), a.id);
    const auto kb = std::make_tuple(split_rank(b.split), patient_number(b.id), b.id);
    return ka < kb;
  });
  std::map<std::string, fs::path> seen;
  for (const auto& p : out) {
    if (!is_valid_case_id(p.id)) {
      throw DataError(
          fmt::format("{}: patient folder names may hold only letters, digits, '_', '-' and '.'", p.dir.string()));
    }
    const auto [it, inserted] = seen.emplace(p.id, p.dir);
    if (!inserted) {
      throw DataError(fmt::format("{}: patient {} also appears as {}", p.dir.string(), p.id, it->second.string()));
    }
  }
  return out;
}

ImportReport import_dataset(const CsvImportOptions& options) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  std::error_code ec;
  if (options.out.empty()) throw UsageError("import openkbp: --out FILE.h5 is required");
  if (fs::exists(options.out, ec) && !options.force) {
    throw UsageError(fmt::format("import openkbp: {} exists; pass --force to replace it", options.out.string()));
  }
  const auto patients = find_patients(options.source, options.single_split);
  ImportReport report;
  report.threads = resolve_threads(options.threads);
  const fs::path parent = options.out.parent_path();
  if (!parent.empty()) ensure_writable_directory(parent);

  DatasetInfo info;
  info.task = Task::kDose;
  info.channel_names = channel_names();
  info.target_name = "dose";
  info.target_units = "Gy";
  info.description = fmt::format(
      "OpenKBP (AAPM 2020) imported from {}; ct = CSV value (HU + 1024); structures 0/1; "
      "mask = possible_dose_mask; axes = flattened C order of the CSV indices",
      fs::absolute(options.source).lexically_normal().string());
  DatasetWriteOptions wo;
  wo.compression_level = options.compression_level;
  DatasetWriter writer(options.out, info, wo);

  // Workers parse and compress patients (at most `window` ahead of the writer); this thread writes
  // them in order, so parsing overlaps writing and the file's case order is deterministic.
  const size_t n = patients.size();
  std::vector<int64_t> bytes(n, 0);
  std::vector<char> has_dose(n, 0);  // not vector<bool>: workers write neighbouring items at once
  ordered_pipeline(
      static_cast<int64_t>(n), report.threads, /*window=*/report.threads + 2,
      [&](int64_t i) {
        Patient p = read_patient(patients[static_cast<size_t>(i)].dir);
        bytes[static_cast<size_t>(i)] = p.csv_bytes;
        has_dose[static_cast<size_t>(i)] = p.dose.defined();
        return writer.prepare(to_case(p));  // compressed here, in parallel
      },
      [&](int64_t i, std::shared_ptr<const PreparedCase> c) {
        writer.write_case(*c);
        spdlog::debug("import openkbp: {} ({}/{})", patients[static_cast<size_t>(i)].id, i + 1, n);
      });

  std::map<std::string, std::vector<std::string>> splits;
  for (size_t i = 0; i < n; ++i) {
    splits[patients[i].split].push_back(patients[i].id);
    report.csv_bytes += bytes[i];
    if (!has_dose[i]) ++report.patients_without_dose;
  }
  for (const auto& [name, ids] : splits) report.patients_per_split[name] = static_cast<int64_t>(ids.size());
  import_detail::commit_splits(writer, import_detail::NamedSplits(splits.begin(), splits.end()));  // by name
  report.patients = static_cast<int64_t>(n);
  report.output_bytes = static_cast<int64_t>(fs::file_size(options.out, ec));
  report.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return report;
}

// ---------------------------------------------------------------------------------------------
namespace {

std::string dose_csv_text(const torch::Tensor& dose, const torch::Tensor& possible_dose_mask) {
  torch::Tensor d = dose.detach().to(torch::kCPU, torch::kFloat).reshape({-1});
  if (d.numel() != kGridVoxels) {
    throw DataError(fmt::format("OpenKBP dose must have 128^3 = {} voxels, got {}", kGridVoxels, d.numel()));
  }
  if (possible_dose_mask.defined()) {
    d = d * possible_dose_mask.detach().to(torch::kCPU).reshape({-1}).to(torch::kFloat);
  }
  d = d.contiguous();
  const float* p = d.data_ptr<float>();
  std::string text = ",data\n";
  text.reserve(1 << 20);
  fmt::memory_buffer buf;
  for (int64_t i = 0; i < kGridVoxels; ++i) {
    if (!(p[i] > 0.0f)) continue;  // the challenge keeps x > 0 only (NaN is dropped too)
    buf.clear();
    fmt::format_to(std::back_inserter(buf), "{},{}\n", i, p[i]);
    text.append(buf.data(), buf.size());
  }
  return text;
}

}  // namespace

void write_dose_csv(const fs::path& path, const torch::Tensor& dose, const torch::Tensor& possible_dose_mask) {
  write_file_atomic(path, dose_csv_text(dose, possible_dose_mask));
}

torch::Tensor read_dose_csv(const fs::path& path) { return dense_values(read_sparse_csv(path, CsvKind::kValues)); }

}  // namespace u3d::openkbp

// `trainer import dicom` (io/dicom_import.h): walk, group, read, rasterise, resample, write.
#include "u3d/io/dicom_import.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <set>

#include "import_layout.h"
#include "u3d/core/errors.h"
#include "u3d/core/output_guard.h"
#include "u3d/core/parallel.h"
#include "u3d/core/text.h"
#include "u3d/io/dicom.h"
#include "u3d/io/dicom_grid.h"

namespace u3d {
namespace {

namespace fs = std::filesystem;
using StructureMap = std::vector<std::pair<std::string, std::vector<std::string>>>;

struct Patient {
  std::string id, name;
  std::map<std::string, std::vector<DicomFileInfo>> series;  // series UID -> its files
};

std::string key(const std::string& name) {
  std::string s = to_lower(name);
  const auto b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::string modality_of(const std::vector<DicomFileInfo>& files) { return files.front().modality; }

// Every DICOM file under `source` (any depth, hidden entries skipped), grouped by patient and series.
std::map<std::string, Patient> walk(const fs::path& source) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(source, fs::directory_options::skip_permission_denied, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) throw DataError(fmt::format("{}: cannot list the folder: {}", source.string(), ec.message()));
    if (it->path().filename().string().rfind('.', 0) == 0) {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file()) files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  std::vector<std::optional<DicomFileInfo>> infos(files.size());
  parallel_for(static_cast<int64_t>(files.size()), resolve_threads(0),
               [&](int64_t i) { infos[static_cast<size_t>(i)] = dicom_file_info(files[static_cast<size_t>(i)]); });
  std::map<std::string, Patient> patients;
  int64_t other = 0;
  for (auto& info : infos) {
    if (!info) {
      ++other;
      continue;
    }
    Patient& p = patients[info->patient_id];
    p.id = info->patient_id;
    p.name = info->patient_name;
    p.series[info->series_uid].push_back(std::move(*info));
  }
  if (other > 0) spdlog::info("import dicom: {} file(s) under {} are not DICOM; skipped", other, source.string());
  return patients;
}

// The channel (index into `map`) each structure name fills, or -1.
int64_t channel_of(const StructureMap& map, const std::string& name) {
  for (size_t c = 0; c < map.size(); ++c) {
    for (const auto& n : map[c].second) {
      if (key(n) == key(name)) return static_cast<int64_t>(c);
    }
  }
  return -1;
}

std::string case_id_of(const std::string& patient_id) {
  std::string id;
  for (const char ch : patient_id) {
    id += (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.') ? ch : '_';
  }
  return id.empty() || id[0] == '.' ? "patient" + id : id;
}

struct PatientPlan {
  const Patient* patient;
  std::string case_id, series_uid;
  std::vector<fs::path> image_files;
  std::optional<fs::path> rtstruct, rtdose;
};

std::vector<fs::path> paths_of(const std::vector<DicomFileInfo>& files) {
  std::vector<fs::path> out;
  for (const auto& f : files) out.push_back(f.file);
  return out;
}

// Which series and RT objects make the patient's case (DataError naming the patient when unclear).
PatientPlan plan_patient(const Patient& p, const DicomImportOptions& o) {
  PatientPlan plan{&p, "", "", {}, std::nullopt, std::nullopt};
  std::vector<std::string> images;
  std::vector<fs::path> structs, doses;
  for (const auto& [uid, files] : p.series) {
    const std::string m = modality_of(files);
    if (m == "CT" || m == "MR") images.push_back(uid);
    for (const auto& f : files) {
      if (m == "RTSTRUCT") structs.push_back(f.file);
      if (m == "RTDOSE") doses.push_back(f.file);
    }
  }
  const std::string who = fmt::format("patient {}", p.id);
  if (images.empty()) {
    std::vector<std::string> found;
    for (const auto& [uid, files] : p.series) found.push_back(modality_of(files).empty() ? "?" : modality_of(files));
    throw DataError(fmt::format("{}: no CT or MR image series (found: {})", who, fmt::join(found, ", ")));
  }
  std::vector<RtStructureSet> sets;
  for (const auto& f : structs) sets.push_back(read_rtstruct(f));
  if (!o.series.empty()) {
    if (std::find(images.begin(), images.end(), o.series) == images.end()) {
      throw DataError(
          fmt::format("{}: no image series {} (--series); candidates: {}", who, o.series, fmt::join(images, ", ")));
    }
    plan.series_uid = o.series;
  } else if (images.size() == 1) {
    plan.series_uid = images[0];
  } else {
    std::set<std::string> referenced;
    for (const auto& s : sets) {
      if (std::find(images.begin(), images.end(), s.referenced_series_uid) != images.end()) {
        referenced.insert(s.referenced_series_uid);
      }
    }
    if (referenced.size() != 1) {
      throw DataError(fmt::format("{}: {} candidate image series ({}); choose one with --series UID", who,
                                  images.size(), fmt::join(images, ", ")));
    }
    plan.series_uid = *referenced.begin();
  }
  plan.image_files = paths_of(p.series.at(plan.series_uid));
  for (size_t i = 0; i < structs.size(); ++i) {
    const std::string& ref = sets[i].referenced_series_uid;
    if (ref.empty() || ref == plan.series_uid) {
      if (plan.rtstruct) {
        throw DataError(fmt::format("{}, series {}: several RT Structure Sets ({} and {}); keep one", who,
                                    plan.series_uid, plan.rtstruct->string(), structs[i].string()));
      }
      plan.rtstruct = structs[i];
    }
  }
  if (doses.size() > 1) {
    std::vector<std::string> names;
    for (const auto& f : doses) names.push_back(f.string());
    throw DataError(
        fmt::format("{}: {} RT Dose files ({}); keep the plan's one", who, doses.size(), fmt::join(names, ", ")));
  }
  if (!doses.empty()) plan.rtdose = doses[0];
  return plan;
}

CaseData load_case(const PatientPlan& plan, const StructureMap& map, const DicomImportOptions& o, bool& labelled) {
  const std::string who = fmt::format("patient {}, series {}", plan.patient->id, plan.series_uid);
  try {
    ImageSeries img = read_image_series(plan.image_files, who);
    const auto [depth, rows, cols] = img.grid.shape;
    std::vector<torch::Tensor> masks(map.size());
    for (auto& m : masks) m = torch::zeros({depth, rows, cols}, torch::kUInt8);
    std::vector<std::string> unmapped, present;
    if (plan.rtstruct) {
      const RtStructureSet set = read_rtstruct(*plan.rtstruct);
      for (const RtStructure& s : set.structures) {
        const int64_t c = channel_of(map, s.name);
        if (c < 0) {
          unmapped.push_back(s.name);
          continue;
        }
        int64_t off = 0;
        masks[static_cast<size_t>(c)] |= rasterize_structure(s, img.grid, &off);
        present.push_back(map[static_cast<size_t>(c)].first);
        if (off > 0)
          spdlog::warn("import dicom: {}: structure '{}': {} contour(s) off the image grid", who, s.name, off);
      }
    }
    std::vector<std::string> missing;
    for (const auto& [target, names] : map) {
      if (std::find(present.begin(), present.end(), target) == present.end()) missing.push_back(target);
    }
    if (!unmapped.empty() || !missing.empty()) {
      spdlog::info("import dicom: {}: unmapped structures [{}]; missing channels [{}]", who, fmt::join(unmapped, ", "),
                   fmt::join(missing, ", "));
    }
    CaseData c;
    c.id = plan.case_id;
    c.spacing = img.grid.spacing;
    std::vector<torch::Tensor> channels = {img.voxels};
    if (o.task == Task::kDose) {
      for (const auto& m : masks) channels.push_back(m.to(torch::kFloat32));
      labelled = plan.rtdose.has_value();
      if (labelled) {
        int64_t outside = 0;
        c.target = resample_dose(read_rtdose(*plan.rtdose), img.grid, &outside);
        if (outside > 0) spdlog::info("import dicom: {}: {} voxels outside the RT Dose grid (dose 0)", who, outside);
      }
    } else {
      labelled = plan.rtstruct.has_value();
      if (labelled) {  // the first channel of the map wins where structures overlap: painted last
        c.target = torch::zeros({depth, rows, cols}, torch::kUInt8);
        for (size_t k = masks.size(); k-- > 0;)
          c.target.masked_fill_(masks[k].to(torch::kBool), static_cast<int64_t>(k + 1));
      }
    }
    c.image = torch::stack(channels).contiguous();
    SourceGeometry g;
    g.format = "dicom";
    g.shape = img.grid.shape;
    g.spacing = img.grid.spacing;
    g.affine = img.grid.affine();
    g.file_ending = ".dcm";
    if (!o.anonymize) {  // absolute: prediction reads them back (io/dicom_write.h) from any folder
      for (const auto& f : img.files) g.files.push_back(fs::absolute(f).string());
      if (plan.rtstruct) g.files.push_back(fs::absolute(*plan.rtstruct).string());
      if (plan.rtdose) g.files.push_back(fs::absolute(*plan.rtdose).string());
    }
    c.source = g;
    return c;
  } catch (const DataError& e) {
    const std::string m = e.what();
    throw DataError(m.rfind("patient ", 0) == 0 ? m : fmt::format("{}: {}", who, m));
  }
}

}  // namespace

StructureMap read_structure_map(const fs::path& file) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(file.string());
  } catch (const YAML::Exception& e) {
    throw ConfigError(fmt::format("{}: not a readable YAML structure map ({})", file.string(), e.msg));
  }
  if (!root.IsMap() || root.size() == 0) {
    throw ConfigError(
        fmt::format("{}: expected a map 'channel: [structure names]', e.g. 'PTV70: [PTV_70, ptv70]'", file.string()));
  }
  StructureMap map;
  for (const auto& kv : root) {
    const std::string target = kv.first.as<std::string>();
    std::vector<std::string> names;
    if (kv.second.IsScalar()) {
      names.push_back(kv.second.as<std::string>());
    } else if (kv.second.IsSequence()) {
      for (const auto& n : kv.second) {
        if (!n.IsScalar()) throw ConfigError(fmt::format("{}: '{}': expected a list of names", file.string(), target));
        names.push_back(n.as<std::string>());
      }
    } else {
      throw ConfigError(fmt::format("{}: '{}': expected a name or a list of names", file.string(), target));
    }
    map.emplace_back(target, names);
  }
  return map;
}

DicomImportSummary import_dicom(const DicomImportOptions& o, const fs::path& out) {
  const std::map<std::string, Patient> patients = walk(o.source);
  if (patients.empty()) throw DataError(fmt::format("{}: no DICOM files found (any depth)", o.source.string()));
  DicomImportSummary summary;
  std::vector<PatientPlan> plans;
  int64_t index = 0;
  std::set<std::string> ids;
  for (const auto& [pid, p] : patients) {
    try {
      PatientPlan plan = plan_patient(p, o);
      std::string id = o.anonymize ? fmt::format("case_{:03d}", index++) : case_id_of(pid);
      for (int n = 2; ids.count(id); ++n) id = fmt::format("{}_{}", case_id_of(pid), n);
      ids.insert(id);
      plan.case_id = id;
      plans.push_back(std::move(plan));
    } catch (const DataError& e) {
      if (!o.skip_bad) throw;
      spdlog::warn("import dicom: skipped: {}", e.what());
      summary.skipped.push_back(e.what());
    }
  }
  for (const auto& plan : plans) {
    refuse_output_over_input("import dicom", "--out", out, plan.image_files);
  }
  StructureMap map;
  if (!o.structures.empty()) {
    map = read_structure_map(o.structures);
  } else {  // every structure name found, each a channel
    std::set<std::string> names;
    for (const auto& plan : plans) {
      if (!plan.rtstruct) continue;
      for (const auto& s : read_rtstruct(*plan.rtstruct).structures) names.insert(s.name);
    }
    for (const auto& n : names) map.emplace_back(n, std::vector<std::string>{n});
  }
  DatasetInfo info;
  info.task = o.task;
  const std::string modality = plans.empty() ? "CT" : modality_of(plans[0].patient->series.at(plans[0].series_uid));
  info.channel_names = {modality};
  std::vector<std::string> normalization = {"zscore"};
  if (o.task == Task::kDose) {
    for (const auto& [target, names] : map) {
      info.channel_names.push_back(target);
      normalization.push_back("none");
    }
    info.target_name = "dose";
    info.target_units = "Gy";
  } else {
    if (map.empty()) throw DataError(fmt::format("{}: no structures to make labels of", o.source.string()));
    info.target_name = "labels";
    info.class_names = {"background"};
    for (const auto& [target, names] : map) info.class_names.push_back(target);
    info.num_classes = static_cast<int64_t>(info.class_names.size());
  }
  info.description = o.anonymize ? "imported from DICOM"
                                 : fmt::format("imported from DICOM folder {}", fs::absolute(o.source).string());
  summary.channels = info.channel_names;
  DatasetWriteOptions wo;
  wo.compression_level = o.compression_level;
  DatasetWriter writer(out, info, wo);
  std::vector<std::string> labelled_ids, test_ids;
  for (const auto& plan : plans) {
    try {
      bool labelled = false;
      writer.write_case(load_case(plan, map, o, labelled));
      (labelled ? labelled_ids : test_ids).push_back(plan.case_id);
      spdlog::info("import dicom: {} <- patient {}{}", plan.case_id, o.anonymize ? "(anonymized)" : plan.patient->id,
                   labelled ? "" : " (no target: split 'test')");
    } catch (const DataError& e) {
      if (!o.skip_bad) throw;
      spdlog::warn("import dicom: skipped: {}", e.what());
      summary.skipped.push_back(e.what());
    }
  }
  if (labelled_ids.empty() && test_ids.empty()) {
    throw DataError(
        fmt::format("{}: no patient could be imported ({} skipped)", o.source.string(), summary.skipped.size()));
  }
  std::vector<std::string> train, val;
  if (!labelled_ids.empty()) {
    import_detail::split_cases(labelled_ids, o.val_fraction, o.seed, train, val);
    writer.set_split("train", train);
    if (!val.empty()) writer.set_split("val", val);
  }
  if (!test_ids.empty()) writer.set_split("test", test_ids);
  writer.set_channel_normalization(normalization);
  writer.commit();
  summary.train = static_cast<int64_t>(train.size());
  summary.val = static_cast<int64_t>(val.size());
  summary.test = static_cast<int64_t>(test_ids.size());
  spdlog::info("import dicom: wrote {}: {} train / {} val / {} test cases, channels [{}]{}", out.string(),
               summary.train, summary.val, summary.test, fmt::join(info.channel_names, ", "),
               summary.skipped.empty() ? "" : fmt::format(", {} patient(s) skipped", summary.skipped.size()));
  return summary;
}

}  // namespace u3d

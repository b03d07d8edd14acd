// `trainer import dicom` (io/dicom/dicom_import.h): walk, group, read, rasterise, resample, write.
#include "u3d/io/dicom/dicom_import.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <set>

#include <unistd.h>

#include "../import_layout.h"
#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/output_guard.h"
#include "u3d/core/parallel.h"
#include "u3d/core/text.h"
#include "u3d/io/dicom/dicom.h"
#include "u3d/io/dicom/dicom_grid.h"
#include "u3d/io/dicom/dicom_seg.h"
#include "u3d/io/h5/h5.h"

namespace u3d {
namespace {

namespace fs = std::filesystem;

struct Patient {
  std::string id, name;
  std::map<std::string, std::vector<DicomFileInfo>> series;  // series UID -> its files
};

std::string modality_of(const std::vector<DicomFileInfo>& files) { return files.front().modality; }

// Every DICOM file under `source` (any depth, hidden entries skipped), grouped by patient and series.
std::map<std::string, Patient> walk(const fs::path& source) {
  std::vector<fs::path> files;
  int64_t dicomdirs = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(source, fs::directory_options::skip_permission_denied, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) throw DataError(fmt::format("{}: cannot list the folder: {}", source.string(), ec.message()));
    if (it->path().filename().string().rfind('.', 0) == 0) {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file()) continue;
    if (to_lower(it->path().filename().string()) == "dicomdir") {  // a File-set's index: every file is read itself
      ++dicomdirs;
      continue;
    }
    files.push_back(it->path());
  }
  if (dicomdirs > 0) {
    spdlog::info("import dicom: {} DICOMDIR file(s) under {} ignored (each image file is read by itself)", dicomdirs,
                 source.string());
  }
  std::sort(files.begin(), files.end());
  std::vector<std::optional<DicomFileInfo>> infos(files.size());
  parallel_for(static_cast<int64_t>(files.size()), resolve_threads(0),
               [&](int64_t i) { infos[static_cast<size_t>(i)] = dicom_file_info(files[static_cast<size_t>(i)]); });
  std::map<std::string, Patient> patients;
  int64_t other = 0, bare = 0, copies = 0;
  std::set<std::string> instances;
  for (auto& info : infos) {
    if (!info || (!info->sop_uid.empty() && !instances.insert(info->sop_uid).second)) {  // a copy: read once
      ++(info ? copies : other);
      continue;
    }
    bare += info->bare ? 1 : 0;
    Patient& p = patients[info->patient_id];
    p.id = info->patient_id;
    p.name = info->patient_name;
    p.series[info->series_uid].push_back(std::move(*info));
  }
  if (other > 0) spdlog::info("import dicom: {} file(s) under {} are not DICOM; skipped", other, source.string());
  if (bare > 0) {
    spdlog::info("import dicom: {} file(s) under {} without DICOM file meta read as bare datasets", bare,
                 source.string());
  }
  if (copies > 0) {
    spdlog::info("import dicom: {} file(s) under {} repeat a SOP Instance UID (copies); each instance read once",
                 copies, source.string());
  }
  return patients;
}

// The channel (index into `map`) each structure name fills, or -1.
int64_t channel_of(const StructureMap& map, const std::string& name) {
  for (size_t c = 0; c < map.size(); ++c) {
    for (const auto& n : map[c].second) {
      if (structure_key(n) == structure_key(name)) return static_cast<int64_t>(c);
    }
  }
  return -1;
}

std::string case_id_of(const std::string& patient_id) { return import_detail::case_id_from(patient_id, "patient"); }

struct PatientPlan {
  const Patient* patient;
  std::string case_id, series_uid;
  std::vector<fs::path> image_files;
  std::optional<DicomFileInfo> rtstruct, rtdose;
  std::vector<DicomFileInfo> rtplans;  // the patient's RT Plans; the one the RT Dose references is used
  std::vector<std::pair<DicomFileInfo, DicomSeg>> segs;  // DICOM SEGs on the series (or referencing none)
};

// What the case was read from: source_<key> attributes of /cases/<id> (docs/dicom.md).
struct Provenance {
  std::vector<std::pair<std::string, std::string>> uids;  // (attribute, UID), only those known
  double prescription_gy = 0;                             // 0: no RT Plan with a target prescription
};

std::vector<fs::path> paths_of(const std::vector<DicomFileInfo>& files) {
  std::vector<fs::path> out;
  for (const auto& f : files) out.push_back(f.file);
  return out;
}

// Which series and RT objects make the patient's case (DataError naming the patient when unclear).
PatientPlan plan_patient(const Patient& p, const DicomImportOptions& o) {
  PatientPlan plan{&p, "", "", {}, std::nullopt, std::nullopt, {}, {}};
  std::vector<std::string> images;
  std::vector<DicomFileInfo> structs, doses;
  std::vector<std::pair<DicomFileInfo, DicomSeg>> segs;
  for (const auto& [uid, files] : p.series) {
    const std::string m = modality_of(files);
    if (m == "CT" || m == "MR") images.push_back(uid);
    for (const auto& f : files) {
      if (m == "SEG") segs.emplace_back(f, read_seg_info(f.file));
      if (m == "RTSTRUCT") structs.push_back(f);
      if (m == "RTDOSE") doses.push_back(f);
      if (m == "RTPLAN") plan.rtplans.push_back(f);
    }
  }
  const std::string who = fmt::format("patient {}", p.id);
  if (images.empty()) {
    std::vector<std::string> found;
    for (const auto& [uid, files] : p.series) found.push_back(modality_of(files).empty() ? "?" : modality_of(files));
    throw DataError(fmt::format("{}: no CT or MR image series (found: {})", who, fmt::join(found, ", ")));
  }
  std::vector<RtStructureSet> sets;
  for (const auto& f : structs) sets.push_back(read_rtstruct(f.file));
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
    std::vector<std::string> refs;
    for (const auto& s : sets) refs.push_back(s.referenced_series_uid);
    for (const auto& s : segs) refs.push_back(s.second.referenced_series_uid);
    for (const auto& ref : refs) {
      if (std::find(images.begin(), images.end(), ref) != images.end()) referenced.insert(ref);
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
    if (!ref.empty() && p.series.count(ref) == 0) {
      spdlog::warn(
          "import dicom: {}: RT Structure Set {} references series {}, which is not in the folder; its structures "
          "are not used",
          who, structs[i].file.string(), ref);
    }
  }
  for (size_t i = 0; i < structs.size(); ++i) {
    const std::string& ref = sets[i].referenced_series_uid;
    if (ref.empty() || ref == plan.series_uid) {
      if (plan.rtstruct) {
        throw DataError(fmt::format("{}, series {}: several RT Structure Sets ({} and {}); keep one", who,
                                    plan.series_uid, plan.rtstruct->file.string(), structs[i].file.string()));
      }
      plan.rtstruct = structs[i];
    }
  }
  for (auto& s : segs) {
    if (s.second.referenced_series_uid.empty() || s.second.referenced_series_uid == plan.series_uid) {
      plan.segs.push_back(std::move(s));
    }
  }
  if (doses.size() > 1) {
    std::vector<std::string> names;
    for (const auto& f : doses) names.push_back(f.file.string());
    throw DataError(
        fmt::format("{}: {} RT Dose files ({}); keep the plan's one", who, doses.size(), fmt::join(names, ", ")));
  }
  if (!doses.empty()) plan.rtdose = doses[0];
  return plan;
}

// The RT Plan of the case: the one the RT Dose references, else the patient's only one.
std::optional<DicomFileInfo> plan_of(const PatientPlan& plan, const std::string& referenced, const std::string& who) {
  for (const auto& f : plan.rtplans) {
    if (!referenced.empty() && f.sop_uid == referenced) return f;
  }
  if (plan.rtplans.size() == 1) return plan.rtplans[0];
  if (plan.rtplans.size() > 1) {
    spdlog::info("import dicom: {}: {} RT Plans and none referenced by an RT Dose; no prescription recorded", who,
                 plan.rtplans.size());
  }
  return std::nullopt;
}

CaseData load_case(const PatientPlan& plan, const StructureMap& map, const DicomImportOptions& o, bool& labelled,
                   Provenance& provenance) {
  const std::string who = fmt::format("patient {}, series {}", plan.patient->id, plan.series_uid);
  try {
    ImageSeries img = read_image_series(plan.image_files, who);
    const auto [depth, rows, cols] = img.grid.shape;
    std::vector<torch::Tensor> masks(map.size());
    for (auto& m : masks) m = torch::zeros({depth, rows, cols}, torch::kUInt8);
    std::vector<std::string> unmapped, present;
    std::vector<std::pair<std::string, int64_t>> empty;  // structures without contours, their channel
    if (plan.rtstruct) {
      const RtStructureSet set = read_rtstruct(plan.rtstruct->file);
      for (const RtStructure& s : set.structures) {
        const int64_t c = channel_of(map, s.name);
        if (c < 0) {
          unmapped.push_back(s.name);
          continue;
        }
        int64_t off = 0;
        const torch::Tensor mask = rasterize_structure(s, img.grid, &off);
        masks[static_cast<size_t>(c)] |= mask;
        present.push_back(map[static_cast<size_t>(c)].first);
        if (s.contours.empty()) {
          empty.emplace_back(s.name, c);
        } else if (!mask.any().item<bool>()) {  // 500 mm to the side: an all-zero channel
          spdlog::warn(
              "import dicom: {}: structure '{}': its {} contour(s) lie entirely off the image; nothing of it "
              "in channel '{}'",
              who, s.name, s.contours.size(), map[static_cast<size_t>(c)].first);
        } else if (off > 0) {
          spdlog::warn("import dicom: {}: structure '{}': {} contour(s) off the image grid", who, s.name, off);
        }
      }
    }
    for (const auto& [file, seg] : plan.segs) {  // DICOM SEG segments, by SegmentLabel
      const std::vector<torch::Tensor> segments = read_seg_masks(file.file, img.grid);
      for (size_t k = 0; k < segments.size(); ++k) {
        const int64_t c = channel_of(map, seg.labels[k]);
        if (c < 0) {
          unmapped.push_back(seg.labels[k]);
          continue;
        }
        masks[static_cast<size_t>(c)] |= segments[k];
        present.push_back(map[static_cast<size_t>(c)].first);
      }
    }
    for (const auto& [name, c] : empty) {  // planning systems export a structure nobody drew without contours
      const auto& channel = map[static_cast<size_t>(c)].first;
      spdlog::warn(
          "import dicom: {}: structure '{}' has no contours{}", who, name,
          masks[static_cast<size_t>(c)].any().item<bool>() ? "" : fmt::format("; channel '{}' is all zeros", channel));
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
    std::string referenced_plan;
    if (o.task == Task::kDose) {
      for (const auto& m : masks) channels.push_back(m.to(torch::kFloat32));
      labelled = plan.rtdose.has_value() && !o.inputs_only;
      if (labelled) {
        int64_t outside = 0;
        const RtDose dose = read_rtdose(plan.rtdose->file);
        referenced_plan = dose.referenced_plan_uid;
        c.target = resample_dose(dose, img.grid, &outside);
        if (outside == depth * rows * cols) {  // an all-zero target: another frame of reference, a wrong file
          throw DataError(fmt::format(
              "{}: the RT Dose grid does not overlap the image (its first frame at ({:.1f}, {:.1f}, {:.1f}) mm); "
              "expected a dose on the image's frame of reference",
              plan.rtdose->file.string(), dose.origin[0], dose.origin[1], dose.origin[2]));
        }
        if (outside > 0) spdlog::info("import dicom: {}: {} voxels outside the RT Dose grid (dose 0)", who, outside);
      }
    } else {
      labelled = (plan.rtstruct.has_value() || !plan.segs.empty()) && !o.inputs_only;
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
    const std::optional<DicomFileInfo> rtplan = plan_of(plan, referenced_plan, who);
    provenance = {};
    if (rtplan) provenance.prescription_gy = read_rtplan(rtplan->file).prescription_gy;
    if (!o.anonymize) {  // absolute: prediction reads them back (io/dicom/dicom_write.h) from any folder
      for (const auto& f : img.files) g.files.push_back(fs::absolute(f).string());
      for (const auto* rt : {&plan.rtstruct, &plan.rtdose, &rtplan}) {
        if (*rt) g.files.push_back(fs::absolute((*rt)->file).string());
      }
      std::string seg_uids;
      for (const auto& [file, seg] : plan.segs) {
        g.files.push_back(fs::absolute(file.file).string());
        seg_uids += (seg_uids.empty() ? "" : "\\") + file.sop_uid;
      }
      provenance.uids = {{"source_study_uid", img.study_uid},
                         {"source_series_uid", plan.series_uid},
                         {"source_frame_of_reference_uid", img.frame_of_reference_uid}};
      if (plan.rtstruct) provenance.uids.emplace_back("source_rtstruct_uid", plan.rtstruct->sop_uid);
      if (plan.rtdose) provenance.uids.emplace_back("source_rtdose_uid", plan.rtdose->sop_uid);
      if (rtplan) provenance.uids.emplace_back("source_rtplan_uid", rtplan->sop_uid);
      if (!seg_uids.empty()) provenance.uids.emplace_back("source_seg_uid", seg_uids);
    }
    c.source = g;
    return c;
  } catch (const DataError& e) {
    const std::string m = e.what();
    throw DataError(m.rfind("patient ", 0) == 0 ? m : fmt::format("{}: {}", who, m));
  }
}

// A file built as ".<name>.partial.<pid>.dicom" beside `path` (remove_stale_temporaries' pattern)
// and renamed into place by commit(); removed when not committed.
class StagedPath {
 public:
  explicit StagedPath(fs::path path)
      : path_(std::move(path)),
        tmp_(path_.parent_path() / fmt::format(".{}.partial.{}.dicom", path_.filename().string(), ::getpid())) {}
  ~StagedPath() {
    std::error_code ec;
    if (!committed_) fs::remove(tmp_, ec);
  }
  StagedPath(const StagedPath&) = delete;
  StagedPath& operator=(const StagedPath&) = delete;
  const fs::path& path() const { return tmp_; }
  void commit() {
    commit_staged_file(tmp_, path_);
    committed_ = true;
  }

 private:
  fs::path path_, tmp_;
  bool committed_ = false;
};

// Each case's Provenance as attributes of /cases/<id> in the closed dataset file `file`.
void write_provenance(const fs::path& file, const std::map<std::string, Provenance>& cases) {
  h5::Handle f(H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
  if (f.get() < 0) throw IoError(fmt::format("{}: cannot reopen the staged dataset file", file.string()));
  for (const auto& [id, p] : cases) {
    const h5::Handle group = h5::open_group(f.get(), "cases/" + id, file.string());
    for (const auto& [name, uid] : p.uids) {
      if (!uid.empty()) h5::write_string_attribute(group.get(), name, uid);
    }
    if (p.prescription_gy > 0)
      h5::write_double_list_attribute(group.get(), "source_prescription_gy", {p.prescription_gy});
  }
}

}  // namespace

DicomImportSummary import_dicom(const DicomImportOptions& o, const fs::path& out) {
  StructureMap map;  // first: a bad map is a configuration error before any DICOM is read
  if (!o.structures.empty()) {
    map = read_structure_map(o.structures);
  } else if (o.structure_map) {
    map = *o.structure_map;
  }
  const std::map<std::string, Patient> patients = walk(o.source);
  if (patients.empty()) throw DataError(fmt::format("{}: no DICOM files found (any depth)", o.source.string()));
  DicomImportSummary summary;
  std::vector<PatientPlan> plans;
  int64_t index = 0;
  std::set<std::string> ids;
  const auto leave_out = [&](const DataError& e) {  // every unusable patient: one line, then go on
    spdlog::warn("import dicom: {}: {}", o.strict ? "unusable" : "left out", e.what());
    summary.skipped.push_back(e.what());
  };
  for (const auto& [pid, p] : patients) {
    try {
      PatientPlan plan = plan_patient(p, o);
      std::string id = o.anonymize ? fmt::format("case_{:03d}", index++) : case_id_of(pid);
      for (int n = 2; ids.count(id); ++n) id = fmt::format("{}_{}", case_id_of(pid), n);
      ids.insert(id);
      plan.case_id = id;
      plans.push_back(std::move(plan));
    } catch (const DataError& e) {
      leave_out(e);
    }
  }
  for (const auto& plan : plans) {
    refuse_output_over_input("import dicom", "--out", out, plan.image_files);
  }
  if (o.structures.empty() && !o.structure_map) {  // every structure name found, each a channel
    std::set<std::string> names;
    for (const auto& plan : plans) {
      for (const auto& s : plan.segs) names.insert(s.second.labels.begin(), s.second.labels.end());
      if (!plan.rtstruct) continue;
      for (const auto& s : read_rtstruct(plan.rtstruct->file).structures) names.insert(s.name);
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
  // Staged twice: the dataset writer's file, then the provenance attributes added to it, then renamed.
  StagedPath staged(out);
  DatasetWriter writer(staged.path(), info, wo);
  std::vector<std::string> labelled_ids, test_ids;
  std::map<std::string, Provenance> provenance;
  for (const auto& plan : plans) {
    try {
      bool labelled = false;
      Provenance p;
      writer.write_case(load_case(plan, map, o, labelled, p));
      provenance[plan.case_id] = p;
      (labelled ? labelled_ids : test_ids).push_back(plan.case_id);
      spdlog::info("import dicom: {} <- patient {}{}", plan.case_id, o.anonymize ? "(anonymized)" : plan.patient->id,
                   labelled ? "" : " (no target: split 'test')");
    } catch (const DataError& e) {
      leave_out(e);
    }
  }
  if (o.strict && !summary.skipped.empty()) {
    throw DataError(fmt::format("{}: {} of {} patient(s) unusable (--strict), nothing written: {}", o.source.string(),
                                summary.skipped.size(), patients.size(), fmt::join(summary.skipped, "; ")));
  }
  if (labelled_ids.empty() && test_ids.empty()) {
    throw DataError(
        fmt::format("{}: no patient could be imported: {}", o.source.string(), fmt::join(summary.skipped, "; ")));
  }
  import_detail::commit_import(writer, import_detail::labelled_splits(labelled_ids, test_ids, o.val_fraction, o.seed),
                               normalization, summary);
  write_provenance(staged.path(), provenance);
  staged.commit();
  spdlog::info("import dicom: wrote {}: {} train / {} val / {} test cases, channels [{}]{}", out.string(),
               summary.train, summary.val, summary.test, fmt::join(info.channel_names, ", "),
               summary.skipped.empty() ? "" : fmt::format(", {} patient(s) left out", summary.skipped.size()));
  return summary;
}

}  // namespace u3d

// A folder of files written as a whole (trainer synth --format nnunet | tiff): the files go to a
// staged folder beside it, ".<name>.tmp.<pid>"; commit() moves a previous folder of that name aside
// (".<name>.old.<pid>"), renames the staged one into place and removes the old one. Destroyed
// without commit() (a full disk, a stop signal, any error), the staged folder is removed: a failed
// write leaves no folder, no empty one, and a previous folder untouched. A process killed outright
// leaves the staged folder for remove_stale_temporaries() (core/files.h).
//
//   StagedFolder out("Dataset001_Phantom");
//   write_nifti(out.path() / "imagesTr" / "case_000_0000.nii.gz", ...);
//   out.commit();
#pragma once
#include <filesystem>

namespace u3d {

class StagedFolder {
 public:
  // IoError naming `dir` when the staged folder cannot be made.
  explicit StagedFolder(std::filesystem::path dir);
  // Where the files go until commit().
  const std::filesystem::path& path() const { return staged_; }
  // The staged folder becomes `dir` (replacing a previous one); IoError naming `dir` when it cannot.
  void commit();
  // Without commit(): the staged folder and all it holds are removed.
  ~StagedFolder();
  StagedFolder(const StagedFolder&) = delete;
  StagedFolder& operator=(const StagedFolder&) = delete;

 private:
  std::filesystem::path dir_, staged_;
  bool committed_ = false;
};

}  // namespace u3d

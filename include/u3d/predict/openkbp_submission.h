// The OpenKBP challenge's submission files, written by `trainer --predict-only` for an OpenKBP
// dataset: <run>/predictions/openkbp/<patient>.csv in the challenge's sparse format
// (io/openkbp/openkbp.h: write_dose_csv), prediction x possible-dose mask, in Gy.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <string>

namespace u3d::openkbp {

// Writes a folder of submission files for `--predict-only`: files are built in a temporary folder
// beside `dir` and moved into place by commit(), which replaces what `dir` held (the files of one
// prediction run, never a mix of two). Without commit() the temporary folder is removed.
class SubmissionWriter {
 public:
  explicit SubmissionWriter(std::filesystem::path dir);
  ~SubmissionWriter();
  SubmissionWriter(const SubmissionWriter&) = delete;
  SubmissionWriter& operator=(const SubmissionWriter&) = delete;
  // prediction (128, 128, 128) in Gy (any device); mask (128, 128, 128) or (1, 128, 128, 128).
  // A prediction of another shape (e.g. a down-sampled dataset) has no submission form: it is
  // skipped with a warning and write() returns false.
  bool write(const std::string& id, const torch::Tensor& prediction, const torch::Tensor& possible_dose_mask);
  // Moves the files into place; without any file written it leaves `dir` as it was.
  void commit();
  int64_t files() const { return files_; }

 private:
  std::filesystem::path dir_, staging_;
  int64_t files_ = 0;
  bool committed_ = false;
};

}  // namespace u3d::openkbp

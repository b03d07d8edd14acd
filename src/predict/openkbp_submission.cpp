#include "u3d/predict/openkbp_submission.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/io/openkbp/openkbp.h"

namespace u3d::openkbp {

namespace fs = std::filesystem;

SubmissionWriter::SubmissionWriter(fs::path dir) : dir_(std::move(dir)) {
  staging_ = dir_.parent_path() / fmt::format(".{}.tmp.{}", dir_.filename().string(), ::getpid());
  std::error_code ec;
  fs::remove_all(staging_, ec);
  ensure_writable_directory(staging_);
}

SubmissionWriter::~SubmissionWriter() {
  if (!committed_) {
    std::error_code ec;
    fs::remove_all(staging_, ec);
  }
}

bool SubmissionWriter::write(const std::string& id, const torch::Tensor& prediction,
                             const torch::Tensor& possible_dose_mask) {
  if (!is_valid_case_id(id)) throw DataError(fmt::format("submission: case id '{}' is not a file name", id));
  if (prediction.sizes() != torch::IntArrayRef{kGridSize, kGridSize, kGridSize}) {
    spdlog::warn("submission: case '{}' is ({}), not the OpenKBP grid 128^3; no submission file for it", id,
                 fmt::join(prediction.sizes(), ", "));
    return false;
  }
  write_dose_csv(staging_ / (id + ".csv"), prediction, possible_dose_mask);
  ++files_;
  return true;
}

void SubmissionWriter::commit() {
  std::error_code ec;
  if (files_ == 0) {
    fs::remove_all(staging_, ec);
    committed_ = true;
    return;
  }
  if (fs::exists(dir_, ec)) {
    // Replace the previous prediction run's folder: move it aside first, so a failure leaves one
    // complete folder in place.
    const fs::path old = dir_.parent_path() / fmt::format(".{}.old.{}", dir_.filename().string(), ::getpid());
    fs::remove_all(old, ec);
    fs::rename(dir_, old, ec);
    if (ec)
      throw IoError(fmt::format("{}: cannot move the previous predictions aside: {}", dir_.string(), ec.message()));
    fs::rename(staging_, dir_, ec);
    if (ec) {
      std::error_code ec2;
      fs::rename(old, dir_, ec2);
      throw IoError(fmt::format("{}: cannot move the predictions into place: {}", dir_.string(), ec.message()));
    }
    fs::remove_all(old, ec);
  } else {
    fs::rename(staging_, dir_, ec);
    if (ec) throw IoError(fmt::format("{}: cannot move the predictions into place: {}", dir_.string(), ec.message()));
  }
  fsync_directory(dir_.parent_path());
  committed_ = true;
}

}  // namespace u3d::openkbp

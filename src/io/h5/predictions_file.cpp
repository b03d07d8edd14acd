#include "u3d/io/h5/predictions_file.h"

#include <fmt/format.h>

#include "u3d/core/errors.h"

namespace u3d {

PredictionsReader::PredictionsReader(const std::filesystem::path& path) : path_(path) {
  std::error_code ec;
  const std::string ctx = path.string();
  if (!std::filesystem::is_regular_file(path, ec)) throw IoError(fmt::format("{}: no such predictions file", ctx));
  h5::silence_errors();
  if (H5Fis_hdf5(path.c_str()) <= 0) throw DataError(fmt::format("{}: not an HDF5 predictions file", ctx));
  file_ = h5::Handle(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file_.valid()) throw DataError(fmt::format("{}: cannot open HDF5 file", ctx));
  const h5::Handle root = h5::open_group(file_.get(), "/", ctx);
  if (!h5::has_attribute(root.get(), "format") ||
      h5::read_string_attribute(root.get(), "format", ctx) != "u3d-predictions") {
    throw DataError(
        fmt::format("{}: not a predictions file of `trainer --predict-only` (format=\"u3d-predictions\")", ctx));
  }
  task_ = task_from_string(h5::read_string_attribute(root.get(), "task", ctx));
  const h5::Handle cases = h5::open_group(file_.get(), "cases", ctx);
  H5G_info_t info{};
  U3D_CHECK_H5(H5Gget_info(cases.get(), &info), ctx);
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t len = H5Lget_name_by_idx(cases.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    std::string name(static_cast<size_t>(std::max<ssize_t>(len, 0)) + 1, '\0');
    H5Lget_name_by_idx(cases.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT);
    name.resize(static_cast<size_t>(std::max<ssize_t>(len, 0)));
    ids_.insert(name);
  }
}

std::string PredictionsReader::describe(const std::string& id) const {
  return fmt::format("{}: case '{}'", path_.string(), id);
}

bool PredictionsReader::has_probabilities(const std::string& id) const {
  return has(id) && h5::exists(file_.get(), "cases/" + id + "/probabilities");
}

torch::Tensor PredictionsReader::prediction(const std::string& id, torch::ScalarType dtype) const {
  if (!has(id)) throw DataError(fmt::format("{}: no such case", describe(id)));
  return h5::read_tensor(file_.get(), "cases/" + id + "/prediction", dtype, describe(id));
}

torch::Tensor PredictionsReader::probabilities(const std::string& id) const {
  if (!has_probabilities(id))
    throw DataError(fmt::format("{}: no probabilities (predict.probabilities)", describe(id)));
  return h5::read_tensor(file_.get(), "cases/" + id + "/probabilities", torch::kFloat, describe(id));
}

}  // namespace u3d

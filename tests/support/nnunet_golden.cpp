#include "nnunet_golden.h"

#include "test_support.h"

namespace u3d::test {

nlohmann::json nnunet_golden(const std::string& dataset, const std::string& kind) {
  return nlohmann::json::parse(read_text(source_dir() / "tests/data/nnunet_plans" / (dataset + "." + kind + ".json")));
}

std::vector<Shape3> nnunet_triples(const nlohmann::json& list, bool two_d) {
  std::vector<Shape3> out;
  for (const auto& t : list) {
    out.push_back(two_d ? Shape3{1, t.at(0).get<int64_t>(), t.at(1).get<int64_t>()}
                        : Shape3{t.at(0).get<int64_t>(), t.at(1).get<int64_t>(), t.at(2).get<int64_t>()});
  }
  return out;
}

std::string nnunet_phantoms_command(const std::filesystem::path& python, const std::filesystem::path& out,
                                    const std::string& which) {
  return python.string() + " " + (source_dir() / "tests/python/nnunet_phantoms.py").string() + " " + out.string() +
         (which.empty() ? "" : " --which " + which) + " --quiet";
}

}  // namespace u3d::test

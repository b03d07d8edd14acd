// The structure map of `trainer import dicom --structures` (io/dicom/dicom_import.h): read and checked.
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <set>

#include "u3d/core/errors.h"
#include "u3d/core/text.h"
#include "u3d/io/dicom/dicom_import.h"

namespace u3d {
namespace {

namespace fs = std::filesystem;

// What a YAML node that is not a name is, for a message: "a list", "a map", "empty".
std::string kind_of(const YAML::Node& n) {
  return n.IsSequence() ? "a list" : n.IsMap() ? "a map" : n.IsNull() ? "empty" : "not text";
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
  std::set<std::string> seen;
  for (const auto& kv : root) {
    if (!kv.first.IsScalar()) {
      throw ConfigError(fmt::format("{}: a key is {}; expected a channel name, e.g. 'PTV70: [PTV_70, ptv70]'",
                                    file.string(), kind_of(kv.first)));
    }
    const std::string target = kv.first.Scalar();
    if (structure_key(target).empty()) {
      throw ConfigError(
          fmt::format("{}: an empty channel name (key '{}'); expected a name such as PTV70", file.string(), target));
    }
    if (!seen.insert(structure_key(target)).second) {
      throw ConfigError(
          fmt::format("{}: channel '{}' is given twice; expected each channel once, with all its names "
                      "in one list",
                      file.string(), target));
    }
    if (structure_key(target) == "ct" || structure_key(target) == "mr") {
      throw ConfigError(fmt::format("{}: channel '{}' is named like the image channel (CT, MR); expected another name",
                                    file.string(), target));
    }
    // A plain (unquoted) number where a structure name is expected: a slip, e.g. 'PTV70: 70'.
    const auto name_of = [&](const YAML::Node& n) {
      const std::string v = n.Scalar();
      char* end = nullptr;
      const bool number = n.Tag() == "?" && !v.empty() && (std::strtod(v.c_str(), &end), *end == '\0');
      if (number || structure_key(v).empty()) {
        throw ConfigError(
            fmt::format("{}: '{}': '{}' is {}; expected a structure name or a list of names (quote a "
                        "name that is a number)",
                        file.string(), target, v, number ? "a number" : "empty"));
      }
      return v;
    };
    std::vector<std::string> names;
    if (kv.second.IsScalar()) {
      names.push_back(name_of(kv.second));
    } else if (kv.second.IsSequence()) {
      for (const auto& n : kv.second) {
        if (!n.IsScalar()) {
          throw ConfigError(fmt::format("{}: '{}': an entry of its list is {}; expected a structure name",
                                        file.string(), target, kind_of(n)));
        }
        names.push_back(name_of(n));
      }
    } else {
      throw ConfigError(fmt::format("{}: '{}' is {}; expected a structure name or a list of names", file.string(),
                                    target, kind_of(kv.second)));
    }
    map.emplace_back(target, names);
  }
  return map;
}

std::string structure_key(const std::string& name) {
  std::string s = to_lower(name);
  const auto b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

}  // namespace u3d

// Lookups over the option table (config_options.h): a key, a section's first key, the sections.
#include <algorithm>

#include "config_options.h"

namespace u3d::config_detail {

const Option* find_option(const std::string& key) {
  for (const auto& o : option_table()) {
    if (o.key == key) return &o;
  }
  return nullptr;
}

std::string first_key_of(const std::string& section) {
  for (const auto& o : option_table()) {
    if (o.key.compare(0, section.size() + 1, section + ".") == 0) return o.key;
  }
  return section + ".KEY";
}

std::vector<std::string> section_names() {
  std::vector<std::string> out;
  for (const auto& o : option_table()) {
    const auto s = o.key.substr(0, o.key.find('.'));
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  }
  return out;
}

}  // namespace u3d::config_detail

#include "daemon/requests/job_text.h"

#include "core/strings.h"

namespace gpuslice::daemon {

std::string RedactEnvironment(std::string text, const std::vector<std::string>& env,
                              std::string_view owner) {
  if (text.size() < 6) return text;  // Nothing to find; most reasons are empty.
  for (const std::string& e : env) {
    size_t eq = e.find('=');
    if (eq == std::string::npos || e.size() - eq - 1 < 6 || e.size() - eq - 1 > text.size()) {
      continue;
    }
    const std::string_view value = std::string_view(e).substr(eq + 1);
    if (!owner.empty() && owner.find(value) != std::string_view::npos) continue;
    for (size_t at; (at = text.find(value)) != std::string::npos;) {
      text.replace(at, value.size(), "$" + e.substr(0, eq));
    }
  }
  return text;
}

std::string LabelsText(const std::map<std::string, std::string>& labels) {
  std::vector<std::string> parts;
  for (const auto& [k, v] : labels) parts.push_back(k + "=" + v);
  return core::Join(parts, ", ");
}

}  // namespace gpuslice::daemon

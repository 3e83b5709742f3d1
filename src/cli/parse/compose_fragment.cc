#include "cli/parse/compose_fragment.h"

#include <cstdint>
#include <cstdio>
#include <set>

namespace gpuslice::cli {
namespace {

using nlohmann::json;

bool IsAsciiAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

// How the character `c` is shown in an error message.
std::string Shown(char c) {
  auto u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7f) return std::string("'") + c + "'";
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02X", u);
  return buf;
}

// The code point that starts at text[*i], advancing *i past it; -1 when the
// bytes there are not UTF-8 (truncated, overlong, a surrogate, > U+10FFFF).
int32_t NextCodePoint(std::string_view text, size_t* i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  unsigned char b0 = byte(*i);
  if (b0 < 0x80) {
    ++*i;
    return b0;
  }
  size_t len;
  int32_t cp;
  int32_t min;
  if ((b0 & 0xe0) == 0xc0) {
    len = 2, cp = b0 & 0x1f, min = 0x80;
  } else if ((b0 & 0xf0) == 0xe0) {
    len = 3, cp = b0 & 0x0f, min = 0x800;
  } else if ((b0 & 0xf8) == 0xf0) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return -1;
  }
  if (*i + len > text.size()) return -1;
  for (size_t k = 1; k < len; ++k) {
    unsigned char b = byte(*i + k);
    if ((b & 0xc0) != 0x80) return -1;
    cp = (cp << 6) | (b & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return -1;
  *i += len;
  return cp;
}

// A compose value: '$' doubled (compose reads "$$" as a literal '$'), then
// quoted. `what` names the value in errors.
core::Result<std::string> ComposeScalar(const std::string& what, std::string_view value) {
  // Checked before '$' is doubled, so that an error's byte offset is the
  // value's own.
  if (auto q = YamlQuoted(value); !q.ok()) return q.status().WithContext(what);
  std::string escaped;
  for (char c : value) {
    escaped += c;
    if (c == '$') escaped += '$';
  }
  return YamlQuoted(escaped);
}

// A device node or a path of a short-syntax volume ("HOST:CONTAINER:ro").
core::Status CheckPath(const std::string& what, const std::string& path) {
  if (path.empty()) return core::InvalidArgumentError(what + " is empty");
  if (path.find(':') != std::string::npos) {
    return core::FailedPreconditionError(
        what + " '" + path +
        "' holds ':', which compose's short syntax cannot carry; use the CDI device instead "
        "(container-args --cdi)");
  }
  return core::Status::Ok();
}

core::Status CheckEnvName(const std::string& entry, std::string_view name) {
  bool ok = !name.empty() && !(name[0] >= '0' && name[0] <= '9');
  for (char c : name) ok = ok && (IsAsciiAlnum(c) || c == '_');
  if (!ok) {
    return core::InvalidArgumentError("environment entry '" + entry +
                                      "': the name must be letters, digits and '_', not "
                                      "starting with a digit");
  }
  return core::Status::Ok();
}

// The array `container[key]`, or an error naming the field.
core::Result<const json*> ArrayField(const json& container, const char* key) {
  auto it = container.find(key);
  if (it == container.end() || !it->is_array()) {
    return core::InvalidArgumentError(std::string("the daemon's answer has no '") + key + "' list");
  }
  return &*it;
}

core::Result<std::string> StringOf(const json& value, const std::string& what) {
  if (!value.is_string()) return core::InvalidArgumentError(what + " is not a string");
  return value.get<std::string>();
}

}  // namespace

core::Status CheckComposeServiceName(std::string_view name) {
  if (name.empty()) return core::InvalidArgumentError("--compose: the service name is empty");
  for (char c : name) {
    if (!IsAsciiAlnum(c) && c != '.' && c != '_' && c != '-') {
      return core::InvalidArgumentError("--compose: '" + std::string(name) +
                                        "' is not a compose service name (" + Shown(c) +
                                        "); use letters, digits, '.', '_' and '-'");
    }
  }
  return core::Status::Ok();
}

core::Result<std::string> YamlQuoted(std::string_view text) {
  std::string out = "\"";
  char buf[16];
  for (size_t i = 0; i < text.size();) {
    size_t start = i;
    int32_t cp = NextCodePoint(text, &i);
    if (cp < 0) {
      // The text itself is left out: it is not fit for a terminal.
      return core::InvalidArgumentError("not valid UTF-8 (byte " + std::to_string(start) + ")");
    }
    if (cp == '"' || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp >= 0x20 && cp < 0x7f) {
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp < 0x80) {  // Other control characters and DEL.
      std::snprintf(buf, sizeof buf, "\\x%02X", static_cast<unsigned>(cp));
      out += buf;
    } else if (cp <= 0xffff) {
      std::snprintf(buf, sizeof buf, "\\u%04X", static_cast<unsigned>(cp));
      out += buf;
    } else {
      std::snprintf(buf, sizeof buf, "\\U%08X", static_cast<unsigned>(cp));
      out += buf;
    }
  }
  out += '"';
  return out;
}

core::Result<std::string> ComposeFragment(std::string_view service, const json& container) {
  GPUSLICE_RETURN_IF_ERROR(CheckComposeServiceName(service));
  if (!container.is_object()) {
    return core::InvalidArgumentError("the daemon's answer is not a JSON object");
  }
  GPUSLICE_ASSIGN_OR_RETURN(const json* devices, ArrayField(container, "device_nodes"));
  GPUSLICE_ASSIGN_OR_RETURN(const json* mounts, ArrayField(container, "mounts"));
  GPUSLICE_ASSIGN_OR_RETURN(const json* env, ArrayField(container, "env"));

  std::string out;
  if (auto it = container.find("job");
      it != container.end() && it->is_number_integer() && (it->is_number_unsigned() || *it >= 0)) {
    std::string id = std::to_string(it->get<uint64_t>());
    out += "# gpuslice job " + id + "'s slice (gpuslice container-args --compose " +
           std::string(service) + " " + id + "); valid while the job runs.\n";
  }
  out += "services:\n";
  // The name is checked: quoting only keeps YAML from reading "1" or "true"
  // as a number or a boolean.
  out += "  \"" + std::string(service) + "\":\n";

  out += devices->empty() ? "    devices: []\n" : "    devices:\n";
  for (const json& d : *devices) {
    GPUSLICE_ASSIGN_OR_RETURN(std::string node, StringOf(d, "a device node"));
    GPUSLICE_RETURN_IF_ERROR(CheckPath("device node", node));
    GPUSLICE_ASSIGN_OR_RETURN(std::string q, ComposeScalar("device node", node));
    out += "      - " + q + "\n";
  }

  out += mounts->empty() ? "    volumes: []\n" : "    volumes:\n";
  for (const json& m : *mounts) {
    if (!m.is_object() || !m.contains("host_path") || !m.contains("container_path")) {
      return core::InvalidArgumentError("a mount lacks host_path or container_path");
    }
    GPUSLICE_ASSIGN_OR_RETURN(std::string host, StringOf(m["host_path"], "a mount's host_path"));
    GPUSLICE_ASSIGN_OR_RETURN(std::string inside,
                              StringOf(m["container_path"], "a mount's container_path"));
    // Read-only unless the daemon says otherwise, as with the plain flags.
    bool read_only = true;
    if (auto it = m.find("read_only"); it != m.end()) {
      if (!it->is_boolean())
        return core::InvalidArgumentError("a mount's read_only is not true/false");
      read_only = it->get<bool>();
    }
    GPUSLICE_RETURN_IF_ERROR(CheckPath("mount path", host));
    GPUSLICE_RETURN_IF_ERROR(CheckPath("mount path", inside));
    GPUSLICE_ASSIGN_OR_RETURN(
        std::string q, ComposeScalar("mount", host + ":" + inside + (read_only ? ":ro" : "")));
    out += "      - " + q + "\n";
  }

  out += env->empty() ? "    environment: {}\n" : "    environment:\n";
  std::set<std::string> names;
  for (const json& e : *env) {
    GPUSLICE_ASSIGN_OR_RETURN(std::string entry, StringOf(e, "an environment entry"));
    size_t eq = entry.find('=');
    if (eq == std::string::npos) {
      return core::InvalidArgumentError("environment entry '" + entry + "' has no '='");
    }
    std::string name = entry.substr(0, eq);
    GPUSLICE_RETURN_IF_ERROR(CheckEnvName(entry, name));
    if (!names.insert(name).second) {
      return core::InvalidArgumentError("environment variable " + name + " is given twice");
    }
    GPUSLICE_ASSIGN_OR_RETURN(std::string value,
                              ComposeScalar("environment variable " + name, entry.substr(eq + 1)));
    out += "      \"" + name + "\": " + value + "\n";
  }

  if (auto it = container.find("cgroup_parent"); it != container.end() && !it->is_null()) {
    GPUSLICE_ASSIGN_OR_RETURN(std::string parent, StringOf(*it, "cgroup_parent"));
    if (!parent.empty()) {
      GPUSLICE_ASSIGN_OR_RETURN(std::string q, ComposeScalar("cgroup_parent", parent));
      out += "    cgroup_parent: " + q + "\n";
    }
  }
  return out;
}

}  // namespace gpuslice::cli

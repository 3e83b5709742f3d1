#include "daemon/config/access.h"

#include <algorithm>

namespace gpuslice::daemon {
namespace {

core::Result<std::vector<std::string>> NameList(std::string_view key, std::string_view value) {
  std::vector<std::string> out;
  while (true) {
    size_t comma = value.find(',');
    std::string_view item = value.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.empty()) {
      return core::InvalidArgumentError(std::string(key) + ": expected a list of names such as "
                                        "'alice,bob', got '" + std::string(value) + "'");
    }
    out.emplace_back(item);
    if (comma == std::string_view::npos) return out;
    value.remove_prefix(comma + 1);
  }
}

std::string Join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

bool Contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

core::Status ApplyAccessValue(AccessConfig* c, std::string_view key, std::string_view value,
                              bool* known) {
  *known = true;
  for (std::string_view prefix : {"pool_users.", "pool_groups."}) {
    if (key.substr(0, prefix.size()) != prefix) continue;
    std::string pool(key.substr(prefix.size()));
    if (pool.empty()) return core::InvalidArgumentError(std::string(key) + ": no pool name");
    GPUSLICE_ASSIGN_OR_RETURN(std::vector<std::string> names, NameList(key, value));
    PoolAccess& a = c->pools[pool];
    (prefix == "pool_users." ? a.users : a.groups) = std::move(names);
    return core::Status::Ok();
  }
  if (key == "max_priority" || key.substr(0, 13) == "max_priority.") {
    auto p = core::ParsePriority(value);
    if (!p.ok()) return p.status().WithContext(key);
    if (key == "max_priority") {
      c->max_priority = *p;
    } else if (key.size() == 13) {
      return core::InvalidArgumentError(std::string(key) + ": no group name");
    } else {
      c->group_max_priority[std::string(key.substr(13))] = *p;
    }
    return core::Status::Ok();
  }
  *known = false;
  return core::Status::Ok();
}

core::Status CheckAccess(const AccessConfig& c, const std::string& user, uint32_t uid,
                         const std::vector<std::string>& groups, const std::string& pool,
                         core::Priority priority) {
  if (uid == 0) return core::Status::Ok();
  auto it = c.pools.find(pool);
  if (it != c.pools.end()) {
    const PoolAccess& a = it->second;
    bool allowed = Contains(a.users, user);
    for (const std::string& g : groups) allowed = allowed || Contains(a.groups, g);
    if (!allowed) {
      std::string who;
      if (!a.users.empty()) who = "users " + Join(a.users);
      if (!a.groups.empty()) who += (who.empty() ? "" : " and ") + ("members of " + Join(a.groups));
      return core::PermissionDeniedError("pool '" + pool + "' is only for " + who + "; user " +
                                         user + " is not one of them (docs/CONFIG.md, Access)");
    }
  }
  core::Priority limit = c.max_priority;
  std::string because = "the machine's limit";
  for (const std::string& g : groups) {
    auto gp = c.group_max_priority.find(g);
    if (gp != c.group_max_priority.end() && gp->second > limit) {
      limit = gp->second;
      because = "the limit of group " + g;
    }
  }
  if (priority > limit) {
    return core::PermissionDeniedError(
        "--priority " + std::string(core::PriorityName(priority)) + ": user " + user +
        " may ask at most " + std::string(core::PriorityName(limit)) + " (" + because +
        "; docs/CONFIG.md, Access)");
  }
  return core::Status::Ok();
}

}  // namespace gpuslice::daemon

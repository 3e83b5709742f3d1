#pragma once

// Who may use which pool, and how high a priority each may ask
// (docs/CONFIG.md, "Access"): read from the configuration file, checked when
// a job is submitted. Pure: the caller supplies the user's groups.
//
//   pool_users.NAME  = alice,bob   only these users (and the groups below)
//   pool_groups.NAME = ml,ops      only members of these groups (and the users above)
//   max_priority       = normal    the highest priority anyone may ask (default high)
//   max_priority.GROUP = high      ... members of GROUP may ask up to this
//
// A pool with neither list is open to all. A user's limit is the highest of
// `max_priority` and those of their groups. Root (uid 0) is never limited.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/units.h"

namespace gpuslice::daemon {

struct PoolAccess {
  std::vector<std::string> users;
  std::vector<std::string> groups;
};

struct AccessConfig {
  std::map<std::string, PoolAccess> pools;  // Pool name -> who may use it.
  core::Priority max_priority = core::Priority::kHigh;
  std::map<std::string, core::Priority> group_max_priority;
};

// Applies one `key = value` if `key` is an access setting; *known = false
// (and Ok) when it is not. Errors name the key and the value.
core::Status ApplyAccessValue(AccessConfig* config, std::string_view key, std::string_view value,
                              bool* known);

// kPermissionDenied, saying who may, when `user` (uid, in `groups`) may not
// submit to `pool` or ask `priority`.
core::Status CheckAccess(const AccessConfig& config, const std::string& user, uint32_t uid,
                         const std::vector<std::string>& groups, const std::string& pool,
                         core::Priority priority);

}  // namespace gpuslice::daemon

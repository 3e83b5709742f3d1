#include "daemon/requests/job_query.h"

#include <algorithm>
#include <charconv>
#include <tuple>

namespace gpuslice::daemon {
namespace {

constexpr core::JobState kLive[] = {core::JobState::kQueued, core::JobState::kRunning,
                                    core::JobState::kSuspended};
constexpr core::JobState kEnded[] = {core::JobState::kExited, core::JobState::kCancelled,
                                     core::JobState::kTimedOut, core::JobState::kFailed};

std::vector<std::string> SplitList(std::string_view text) {
  std::vector<std::string> out;
  while (true) {
    size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    if (!item.empty()) out.emplace_back(item);
    if (comma == std::string_view::npos) return out;
    text.remove_prefix(comma + 1);
  }
}

bool ParseCount(std::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 19) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

// A glob where '*' matches any run of characters (and nothing else is
// special: '[' is part of array names).
bool Glob(std::string_view pattern, std::string_view text) {
  size_t p = 0, t = 0, star = std::string_view::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (p < pattern.size() && pattern[p] == text[t]) {
      ++p;
      ++t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

// The index of an array member's name ("train[3]" -> 3), if it is one.
std::optional<uint64_t> ArrayIndex(std::string_view name) {
  const std::string_view base = ArrayBase(name);
  if (base.size() == name.size()) return std::nullopt;
  std::string_view digits = name.substr(base.size() + 1, name.size() - base.size() - 2);
  uint64_t index = 0;
  if (!ParseCount(digits, &index)) return std::nullopt;
  return index;
}

}  // namespace

core::Result<JobQuery> ParseJobQuery(const std::map<std::string, std::string>& params) {
  JobQuery q;
  for (const auto& [key, value] : params) {
    if (key == "all") {
      q.include_finished = value != "0" && value != "false";
    } else if (key == "state") {
      for (const std::string& token : SplitList(value)) {
        if (token == "live") {
          q.states.insert(std::begin(kLive), std::end(kLive));
        } else if (token == "ended") {
          q.states.insert(std::begin(kEnded), std::end(kEnded));
        } else {
          auto s = core::ParseJobState(token);
          if (!s.ok()) return s.status().WithContext("state");
          q.states.insert(*s);
        }
      }
      if (q.states.empty()) return core::InvalidArgumentError("state: no state given");
    } else if (key == "user") {
      q.users = SplitList(value);
      if (q.users.empty()) return core::InvalidArgumentError("user: no user given");
    } else if (key == "name") {
      q.names = SplitList(value);
      if (q.names.empty()) return core::InvalidArgumentError("name: no name given");
    } else if (key == "pool") {
      if (auto s = core::ValidatePoolName(value); !s.ok()) return s.WithContext("pool");
      q.pool = value;
    } else if (key == "held") {
      if (value != "0" && value != "1") {
        return core::InvalidArgumentError("held: expected 1 or 0, got '" + value.substr(0, 64) +
                                          "'");
      }
      q.held = value == "1";
    } else if (key == "limit") {
      uint64_t n = 0;
      if (!ParseCount(value, &n)) {
        return core::InvalidArgumentError("limit: expected a count of jobs (0: all), got '" +
                                          value.substr(0, 64) + "'");
      }
      q.limit = static_cast<size_t>(n);
    } else if (key == "cursor") {
      if (!ParseCount(value, &q.after_id)) {
        return core::InvalidArgumentError(
            "cursor: expected the next_cursor of the previous page, got '" + value.substr(0, 64) +
            "'");
      }
    } else {
      return core::InvalidArgumentError(
          "unknown parameter '" + key.substr(0, 64) +
          "' (jobs are listed by state, user, name, pool, held, limit, cursor and all; "
          "docs/API.md)");
    }
  }
  for (core::JobState s : q.states) q.include_finished = q.include_finished || core::IsTerminal(s);
  return q;
}

std::string_view ArrayBase(std::string_view name) {
  if (name.size() < 3 || name.back() != ']') return name;
  const size_t open = name.rfind('[');
  if (open == std::string_view::npos || open == 0 || open + 2 == name.size()) return name;
  for (size_t i = open + 1; i + 1 < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return name;
  }
  return name.substr(0, open);
}

bool NameMatches(std::string_view pattern, std::string_view name) {
  if (pattern.find('*') != std::string_view::npos) return Glob(pattern, name);
  return name == pattern || ArrayBase(name) == pattern;
}

bool JobMatches(const core::Job& job, const JobQuery& q, const std::string& default_pool) {
  if (q.states.empty()) {
    if (!q.include_finished && !job.IsLive()) return false;
  } else if (!q.states.count(job.state)) {
    return false;
  }
  if (!q.users.empty() && std::find(q.users.begin(), q.users.end(), job.user) == q.users.end()) {
    return false;
  }
  if (!q.names.empty() && std::none_of(q.names.begin(), q.names.end(), [&](const std::string& n) {
        return NameMatches(n, job.request.name);
      })) {
    return false;
  }
  if (!q.pool.empty() && (job.request.pool.empty() ? default_pool : job.request.pool) != q.pool) {
    return false;
  }
  if (q.held && *q.held != (job.hold != core::HoldKind::kNone)) return false;
  return true;
}

std::string FormatIdRanges(const std::vector<uint64_t>& ids, size_t max_ranges) {
  std::string out;
  size_t ranges = 0;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (ranges == max_ranges) {
      size_t rest = 0;
      for (size_t k = i; k < ids.size();) {
        size_t e = k;
        while (e + 1 < ids.size() && ids[e + 1] == ids[e] + 1) ++e;
        ++rest;
        k = e + 1;
      }
      out += ",... (" + std::to_string(rest) + " more)";
      return out;
    }
    if (!out.empty()) out += ",";
    out += std::to_string(ids[i]);
    if (j > i) out += "-" + std::to_string(ids[j]);
    ++ranges;
    i = j + 1;
  }
  return out;
}

std::string JobGroup::DisplayName() const {
  if (indices.empty()) return name;
  return name + "[" + FormatIdRanges(indices, 4) + "]";
}

void JobSummaryBuilder::Add(const core::Job& job, const std::string& pool) {
  const std::string state(core::JobStateName(job.state));
  ++counts_[state];
  const std::string_view name = job.request.name;
  const std::optional<uint64_t> index = ArrayIndex(name);
  const std::string base(index ? ArrayBase(name) : name);
  const std::string request = job.request.Describe();
  const std::string priority(core::PriorityName(job.request.priority));
  const bool held = job.hold != core::HoldKind::kNone;
  // Fields joined by a byte no name, user or pool can hold.
  std::string key = state + '\x1f' + job.user + '\x1f' + base + '\x1f' + (index ? "a" : "-") +
                    '\x1f' + request + '\x1f' + priority + '\x1f' + pool + '\x1f' +
                    (held ? "h" : "-");
  auto [it, added] = index_.emplace(std::move(key), groups_.size());
  if (added) {
    JobGroup g;
    g.state = job.state;
    g.user = job.user;
    g.name = base;
    g.request = request;
    g.priority = priority;
    g.pool = pool;
    g.held = held;
    groups_.push_back(std::move(g));
  }
  JobGroup& g = groups_[it->second];
  g.ids.push_back(job.id);
  if (index) g.indices.push_back(*index);
}

std::vector<JobGroup> JobSummaryBuilder::Take() {
  for (JobGroup& g : groups_) {
    std::sort(g.indices.begin(), g.indices.end());
    g.indices.erase(std::unique(g.indices.begin(), g.indices.end()), g.indices.end());
  }
  index_.clear();
  // Groups were opened in id order, so they are sorted by their first id.
  return std::move(groups_);
}

}  // namespace gpuslice::daemon

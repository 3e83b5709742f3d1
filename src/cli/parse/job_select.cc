#include "cli/parse/job_select.h"

#include <charconv>

#include "core/jobs/job.h"

namespace gpuslice::cli {
namespace {

constexpr std::string_view kEnded[] = {"exited", "cancelled", "timed_out", "failed"};

std::vector<std::string_view> Split(std::string_view text) {
  std::vector<std::string_view> out;
  while (true) {
    size_t comma = text.find(',');
    out.push_back(text.substr(0, comma));
    if (comma == std::string_view::npos) return out;
    text.remove_prefix(comma + 1);
  }
}

bool ParseIndex(std::string_view s, uint32_t* out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return !s.empty() && ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

core::Result<std::set<std::string>> ParseStates(std::string_view text) {
  std::set<std::string> out;
  for (std::string_view t : Split(text)) {
    if (t == "ended") {
      out.insert(std::begin(kEnded), std::end(kEnded));
      continue;
    }
    auto s = core::ParseJobState(t);
    if (!s.ok()) return s.status().WithContext("--state");
    out.insert(std::string(t));
  }
  return out;
}

bool WantsEndedJobs(const std::set<std::string>& states) {
  for (std::string_view e : kEnded) {
    if (states.count(std::string(e))) return true;
  }
  return false;
}

std::string UrlEncode(std::string_view text) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string JobsTarget(std::string_view path, const JobFilter& filter) {
  std::string query;
  auto add = [&](std::string_view key, std::string_view value) {
    query += (query.empty() ? "?" : "&") + std::string(key) + "=" + UrlEncode(value);
  };
  if (!filter.states.empty()) {
    std::string states;
    for (const std::string& s : filter.states) states += (states.empty() ? "" : ",") + s;
    add("state", states);
  }
  if (filter.user) add("user", *filter.user);
  if (!filter.names.empty()) {
    std::string names;
    for (const std::string& n : filter.names) names += (names.empty() ? "" : ",") + n;
    add("name", names);
  }
  if (filter.pool) add("pool", *filter.pool);
  if (filter.finished) add("all", "1");
  add("limit", std::to_string(filter.limit));
  return std::string(path) + query;
}

core::Result<std::vector<uint32_t>> ParseArrayIndices(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return core::InvalidArgumentError("--array '" + std::string(text.substr(0, 64)) + "': " +
                                      std::string(why));
  };
  std::set<uint32_t> indices;
  for (std::string_view item : Split(text)) {
    size_t dash = item.find('-');
    uint32_t lo = 0, hi = 0;
    bool ok = dash == std::string_view::npos
                  ? ParseIndex(item, &lo) && (hi = lo, true)
                  : ParseIndex(item.substr(0, dash), &lo) && ParseIndex(item.substr(dash + 1), &hi);
    if (!ok) return bad("expected indices such as '1-20' or '0,3,5'");
    if (hi < lo) return bad("'" + std::string(item) + "' ends below its start");
    if (hi - lo >= kMaxArrayJobs) {
      return bad("more than " + std::to_string(kMaxArrayJobs) + " jobs");
    }
    for (uint32_t i = lo; i <= hi; ++i) indices.insert(i);
    if (indices.size() > kMaxArrayJobs) {
      return bad("more than " + std::to_string(kMaxArrayJobs) + " jobs");
    }
  }
  return std::vector<uint32_t>(indices.begin(), indices.end());
}

}  // namespace gpuslice::cli

#pragma once

// Which jobs a list asks for (GET /v1/jobs, GET /v1/jobs/summary; docs/API.md,
// "Listing jobs"): filters by state, user, name and pool, a page size and a
// cursor, and the summary that collapses arrays and identical waiting jobs.
// Pure: the Service applies a JobQuery to its job table (ordered by id), so
// a page costs the jobs on it, not the jobs in the table.
//
// Paging: jobs come in ascending id order; a page ends after `limit` jobs
// and names the last id as `next_cursor`; the next page is asked with
// `cursor=` that id. Ids never change and new jobs get larger ones, so a
// walk through the pages sees every job that matched throughout it once.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/jobs/job.h"
#include "core/status.h"

namespace gpuslice::daemon {

// Jobs on a page unless the caller asks otherwise (`limit=0`: all of them).
inline constexpr size_t kDefaultJobLimit = 100;

struct JobQuery {
  // Only these states; empty: the live ones (queued, running, suspended),
  // and every state with include_finished.
  std::set<core::JobState> states;
  bool include_finished = false;   // `all=1`, or an ended state asked for.
  std::vector<std::string> users;  // Any of these owners; empty: anyone's.
  // Any of these names (NameMatches); empty: any name.
  std::vector<std::string> names;
  std::string pool;  // The pool the job asked for ("" = any).
  // Only jobs held (`gpuslice hold`), or only jobs not held; unset: both.
  std::optional<bool> held;
  size_t limit = kDefaultJobLimit;  // 0: no limit.
  uint64_t after_id = 0;            // The cursor: only ids above it.
};

// From a request's query parameters: `state` (comma-separated states, `live`
// or `ended`), `user`, `name` (each comma-separated), `pool`, `held`
// (`1`/`0`), `limit` (0 = all), `cursor` (a job id), `all` (`1`: finished
// jobs too). Unknown parameters are refused, so a typo is not silently a
// list of everything; errors name the parameter and the bad token.
core::Result<JobQuery> ParseJobQuery(const std::map<std::string, std::string>& params);

// Whether `name` is what `pattern` asks for: the same name; a member of an
// array of that name (`train` finds `train[3]`); or, when `pattern` holds
// `*`, a glob in which `*` stands for any run of characters.
bool NameMatches(std::string_view pattern, std::string_view name);

// The name of the array a job of an array belongs to ("train[3]" ->
// "train"), or the name itself.
std::string_view ArrayBase(std::string_view name);

// Whether `job` passes every filter of `query` (not the cursor or the
// limit). `default_pool` is the pool of a job that named none.
bool JobMatches(const core::Job& job, const JobQuery& query, const std::string& default_pool);

// "3-5,7,9-12" for the sorted, distinct `ids`; past `max_ranges` ranges the
// rest is said as "... (N more)".
std::string FormatIdRanges(const std::vector<uint64_t>& ids, size_t max_ranges = 8);

// `ps --summary`: jobs alike collapsed into one group each (the members of
// an array, and identical waiting jobs): same state, owner, name (arrays by
// their base name), request, priority, pool and hold. Counts by state over
// every job added.
struct JobGroup {
  core::JobState state = core::JobState::kQueued;
  std::string user;
  std::string name;  // The base name; "train[0-9]" shown with `indices`.
  std::string request;
  std::string priority;
  std::string pool;
  bool held = false;
  std::vector<uint64_t> ids;      // Ascending.
  std::vector<uint64_t> indices;  // Array indices of its members (ascending, distinct).
  // The name as shown: "train[0-999]" for an array, else the name.
  std::string DisplayName() const;
};

class JobSummaryBuilder {
 public:
  // Jobs must come in ascending id order (as the job table holds them).
  void Add(const core::Job& job, const std::string& pool);
  const std::map<std::string, uint64_t>& counts() const { return counts_; }
  // The groups, by their first id.
  std::vector<JobGroup> Take();

 private:
  std::map<std::string, uint64_t> counts_;  // By state name.
  std::map<std::string, size_t> index_;     // Group key -> groups_ position.
  std::vector<JobGroup> groups_;
};

}  // namespace gpuslice::daemon

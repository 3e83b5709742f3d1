#include "core/jobs/usage.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "core/units.h"

namespace gpuslice::core {

namespace {

constexpr double kMsPerHour = 3600.0 * 1000.0;
constexpr int64_t kMsPerDay = 86400LL * 1000;

// Milliseconds of [a, b) inside [lo, hi).
int64_t Overlap(int64_t a, int64_t b, int64_t lo, int64_t hi) {
  int64_t s = std::max(a, lo), e = std::min(b, hi);
  return e > s ? e - s : 0;
}

// Days since 1970-01-01 of a proleptic Gregorian date (the usual era-based
// conversion: years counted from March so February's length comes last).
int64_t DaysFromCivil(int64_t y, int m, int d) {
  y -= m <= 2;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  int64_t yoe = y - era * 400;
  int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

void CivilFromDays(int64_t z, int64_t* y, int* m, int* d) {
  z += 719468;
  int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  int64_t doe = z - era * 146097;
  int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  int64_t mp = (5 * doy + 2) / 153;
  *d = static_cast<int>(doy - (153 * mp + 2) / 5 + 1);
  *m = static_cast<int>(mp < 10 ? mp + 3 : mp - 9);
  *y = yoe + era * 400 + (*m <= 2);
}

bool IsLeap(int64_t y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

int DaysInMonth(int64_t y, int m) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && IsLeap(y) ? 29 : kDays[m - 1];
}

// Reads exactly `n` digits at `*pos`.
bool Digits(std::string_view s, size_t* pos, size_t n, int64_t* out) {
  if (*pos + n > s.size()) return false;
  int64_t v = 0;
  for (size_t i = 0; i < n; ++i) {
    char c = s[*pos + i];
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *pos += n;
  *out = v;
  return true;
}

Result<int64_t> ParseDateTime(std::string_view text) {
  auto bad = [&](const std::string& why) {
    return InvalidArgumentError("bad date '" + std::string(text) + "': " + why +
                                " (expected YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS][Z], UTC)");
  };
  size_t p = 0;
  int64_t y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0;
  if (!Digits(text, &p, 4, &y) || p >= text.size() || text[p++] != '-' ||
      !Digits(text, &p, 2, &mo) || p >= text.size() || text[p++] != '-' ||
      !Digits(text, &p, 2, &d)) {
    return bad("not a date");
  }
  if (mo < 1 || mo > 12) return bad("month " + std::to_string(mo) + " out of range");
  if (d < 1 || d > DaysInMonth(y, static_cast<int>(mo))) {
    return bad("day " + std::to_string(d) + " out of range");
  }
  if (p < text.size()) {
    if (text[p] != 'T' && text[p] != 't' && text[p] != ' ')
      return bad("unexpected text after date");
    ++p;
    if (!Digits(text, &p, 2, &h) || p >= text.size() || text[p++] != ':' ||
        !Digits(text, &p, 2, &mi)) {
      return bad("bad time of day");
    }
    if (p < text.size() && text[p] == ':') {
      ++p;
      if (!Digits(text, &p, 2, &sec)) return bad("bad seconds");
    }
    if (p < text.size() && (text[p] == 'Z' || text[p] == 'z')) ++p;
    if (p != text.size()) return bad("only UTC times are accepted (no offsets)");
    if (h > 23 || mi > 59 || sec > 59) return bad("time of day out of range");
  }
  int64_t days = DaysFromCivil(y, static_cast<int>(mo), static_cast<int>(d));
  return days * kMsPerDay + ((h * 60 + mi) * 60 + sec) * 1000;
}

std::string FormatUtc(int64_t ms) {
  int64_t days = ms >= 0 ? ms / kMsPerDay : -((-ms + kMsPerDay - 1) / kMsPerDay);
  int64_t rem = (ms - days * kMsPerDay) / 1000;
  int64_t y;
  int m, d;
  CivilFromDays(days, &y, &m, &d);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%04lld-%02d-%02d %02lld:%02lld UTC", static_cast<long long>(y), m,
                d, static_cast<long long>(rem / 3600), static_cast<long long>(rem / 60 % 60));
  return buf;
}

std::string Fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string KeyOf(const UsageRecord& r, UsageGroupBy by) {
  switch (by) {
    case UsageGroupBy::kUser:
      return r.user.empty() ? std::to_string(r.uid) : r.user;
    case UsageGroupBy::kGroup:
      return r.group.empty() ? std::to_string(r.gid) : r.group;
    case UsageGroupBy::kJob:
      return std::to_string(r.job_id);
    case UsageGroupBy::kSlurmJob:
      return r.slurm_job;
  }
  return "";
}

void Add(UsageTotals* into, const UsageTotals& v) {
  into->jobs += v.jobs;
  into->gpu_hours += v.gpu_hours;
  into->memory_gib_hours += v.memory_gib_hours;
  into->compute_share_hours += v.compute_share_hours;
  into->idle_hours += v.idle_hours;
  into->idle_gpu_hours += v.idle_gpu_hours;
  into->suspended_hours += v.suspended_hours;
}

// The header of the key columns.
std::vector<std::string> KeyHeader(UsageGroupBy by) {
  switch (by) {
    case UsageGroupBy::kUser:
      return {"USER"};
    case UsageGroupBy::kGroup:
      return {"GROUP"};
    case UsageGroupBy::kJob:
      return {"JOB", "USER", "NAME"};
    case UsageGroupBy::kSlurmJob:
      return {"SLURM_JOB", "USER"};
  }
  return {};
}

std::vector<std::string> KeyCells(const UsageTotals& t, UsageGroupBy by) {
  if (by == UsageGroupBy::kJob) return {t.key, t.user, t.name};
  if (by == UsageGroupBy::kSlurmJob) return {t.key, t.user};
  return {t.key};
}

}  // namespace

Result<UsageGroupBy> ParseUsageGroupBy(std::string_view text) {
  if (text == "user") return UsageGroupBy::kUser;
  if (text == "group") return UsageGroupBy::kGroup;
  if (text == "job") return UsageGroupBy::kJob;
  if (text == "slurm-job") return UsageGroupBy::kSlurmJob;
  return InvalidArgumentError("--by: '" + std::string(text) +
                              "' is not one of user, group, job, slurm-job");
}

std::string_view UsageGroupByName(UsageGroupBy by) {
  switch (by) {
    case UsageGroupBy::kUser:
      return "user";
    case UsageGroupBy::kGroup:
      return "group";
    case UsageGroupBy::kJob:
      return "job";
    case UsageGroupBy::kSlurmJob:
      return "slurm-job";
  }
  return "?";
}

double ComputeShare(const UsageRecord& r) {
  if (r.whole_gpu) return 1.0;
  if (r.mig_compute_slices > 0) {
    return std::min(kMigSlicesPerGpu, r.mig_compute_slices) / static_cast<double>(kMigSlicesPerGpu);
  }
  return std::min(1000u, r.compute_milli) / 1000.0;
}

double GpuWeight(const UsageRecord& r) {
  if (r.whole_gpu || r.mig_compute_slices > 0 || r.compute_milli > 0) return ComputeShare(r);
  if (r.gpu_memory_total == 0) return 0.0;
  return std::min(1.0,
                  static_cast<double>(r.memory_bytes) / static_cast<double>(r.gpu_memory_total));
}

Result<UsageReport> AggregateUsage(const std::vector<UsageRecord>& records, int64_t since_ms,
                                   int64_t until_ms, int64_t now_ms, UsageGroupBy by) {
  if (since_ms >= until_ms) {
    return InvalidArgumentError("the window is empty: --since " + FormatUtc(since_ms) +
                                " is not before --until " + FormatUtc(until_ms));
  }
  UsageReport report;
  report.since_ms = since_ms;
  // Nothing has happened after now: a window reaching into the future ends now.
  report.until_ms = std::max(since_ms, std::min(until_ms, now_ms));
  report.by = by;
  const int64_t lo = since_ms, hi = report.until_ms;

  std::map<std::string, UsageTotals> groups;
  std::set<uint64_t> jobs_seen;
  for (const UsageRecord& r : records) {
    int64_t end = r.released_ms > 0 ? r.released_ms : now_ms;
    const bool suspended_only = r.suspension_only;
    int64_t ms = suspended_only ? 0 : Overlap(r.allocated_ms, end, lo, hi);
    if (ms == 0 && !(suspended_only && r.suspended_in_window_ms > 0)) continue;
    if (by == UsageGroupBy::kSlurmJob && r.slurm_job.empty()) continue;
    double hours = ms / kMsPerHour;
    // The job's idle fraction over its whole run so far.
    int64_t run_end = r.job_ended_ms > 0 ? r.job_ended_ms : now_ms;
    int64_t run_start = r.job_started_ms > 0 ? r.job_started_ms : r.allocated_ms;
    int64_t run_ms = run_end - run_start;
    double idle_frac =
        run_ms > 0
            ? std::min(1.0, static_cast<double>(std::max<int64_t>(r.job_idle_ms, 0)) / run_ms)
            : 0.0;

    UsageTotals& g = groups[KeyOf(r, by)];
    g.key = KeyOf(r, by);
    if (by == UsageGroupBy::kJob || by == UsageGroupBy::kSlurmJob) {
      g.user = r.user.empty() ? std::to_string(r.uid) : r.user;
    }
    if (by == UsageGroupBy::kJob) g.name = r.name;
    double weight = GpuWeight(r);
    double share = ComputeShare(r);
    g.gpu_hours += weight * hours;
    g.memory_gib_hours += static_cast<double>(r.memory_bytes) / kGiB * hours;
    g.compute_share_hours += share * hours;
    g.idle_gpu_hours += weight * hours * idle_frac;
    // Per job, once: its job count and its idle and suspended time inside
    // the window.
    if (jobs_seen.insert(r.job_id).second) {
      g.jobs += 1;
      const double in_window = Overlap(run_start, run_end, lo, hi) / kMsPerHour;
      if (!suspended_only) g.idle_hours += in_window * idle_frac;
      if (r.suspended_in_window_ms >= 0) {
        g.suspended_hours += static_cast<double>(r.suspended_in_window_ms) / kMsPerHour;
      } else if (run_ms > 0 && r.job_suspended_ms > 0) {
        g.suspended_hours +=
            in_window * std::min(1.0, static_cast<double>(r.job_suspended_ms) / run_ms);
      }
    }
  }
  for (auto& [key, t] : groups) {
    report.rows.push_back(t);
    Add(&report.total, t);
  }
  report.total.key = "TOTAL";
  if (by == UsageGroupBy::kJob) {
    std::sort(report.rows.begin(), report.rows.end(),
              [](const UsageTotals& a, const UsageTotals& b) {
                return std::stoull(a.key) < std::stoull(b.key);
              });
  } else if (by == UsageGroupBy::kSlurmJob) {
    // Slurm job ids are numbers ("123", or "123_4" for an array task):
    // shorter first, then as text, is numeric order for both.
    std::sort(report.rows.begin(), report.rows.end(),
              [](const UsageTotals& a, const UsageTotals& b) {
                if (a.key.size() != b.key.size()) return a.key.size() < b.key.size();
                return a.key < b.key;
              });
  } else {
    std::sort(report.rows.begin(), report.rows.end(),
              [](const UsageTotals& a, const UsageTotals& b) {
                if (a.gpu_hours != b.gpu_hours) return a.gpu_hours > b.gpu_hours;
                return a.key < b.key;
              });
  }
  return report;
}

Result<int64_t> ParseUsageTime(std::string_view text, int64_t now_ms) {
  if (text.empty()) return InvalidArgumentError("empty time (expected e.g. 7d, 12h or 2026-11-01)");
  if (text == "now") return now_ms;
  // A date starts with four digits and a dash; anything else is a duration.
  if (text.size() >= 5 && text[4] == '-') return ParseDateTime(text);
  auto d = ParseDuration(text);
  if (!d.ok()) {
    return InvalidArgumentError("bad time '" + std::string(text) +
                                "': neither a duration back from now (7d, 12h, 30m) nor a date "
                                "(2026-11-01): " +
                                d.status().message());
  }
  return now_ms - d->count();
}

std::string CsvField(std::string_view field) {
  if (field.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(field);
  std::string out = "\"";
  for (char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string RenderUsageTable(const UsageReport& report) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header = KeyHeader(report.by);
  for (const char* h :
       {"JOBS", "GPU-H", "MEM-GiB-H", "COMPUTE-H", "IDLE-H", "IDLE-GPU-H", "SUSPENDED-H"}) {
    header.push_back(h);
  }
  auto cells = [&](const UsageTotals& t) {
    std::vector<std::string> c = KeyCells(t, report.by);
    c.push_back(std::to_string(t.jobs));
    for (double v : {t.gpu_hours, t.memory_gib_hours, t.compute_share_hours, t.idle_hours,
                     t.idle_gpu_hours, t.suspended_hours}) {
      c.push_back(Fixed(v, 2));
    }
    return c;
  };
  rows.push_back(header);
  for (const UsageTotals& t : report.rows) rows.push_back(cells(t));
  std::vector<std::string> total = cells(report.total);
  for (size_t i = 1; i < KeyHeader(report.by).size(); ++i) total[i] = "";
  rows.push_back(total);

  std::vector<size_t> width(header.size(), 0);
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  const size_t keys = KeyHeader(report.by).size();
  std::string out = "Usage by " + std::string(UsageGroupByName(report.by)) + " from " +
                    FormatUtc(report.since_ms) + " to " + FormatUtc(report.until_ms) + "\n";
  for (size_t ri = 0; ri < rows.size(); ++ri) {
    std::string line;
    for (size_t i = 0; i < rows[ri].size(); ++i) {
      const std::string& c = rows[ri][i];
      std::string pad(width[i] - c.size(), ' ');
      // Key columns are text (left-aligned); figures are right-aligned.
      line += i < keys ? c + pad : pad + c;
      if (i + 1 < rows[ri].size()) line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  if (report.rows.empty()) out += "(no allocations in this window)\n";
  return out;
}

std::string RenderUsageCsv(const UsageReport& report) {
  std::vector<std::string> header;
  switch (report.by) {
    case UsageGroupBy::kUser:
      header = {"user"};
      break;
    case UsageGroupBy::kGroup:
      header = {"group"};
      break;
    case UsageGroupBy::kJob:
      header = {"job", "user", "name"};
      break;
    case UsageGroupBy::kSlurmJob:
      header = {"slurm_job", "user"};
      break;
  }
  for (const char* h : {"jobs", "gpu_hours", "memory_gib_hours", "compute_share_hours",
                        "idle_hours", "idle_gpu_hours", "suspended_hours"}) {
    header.push_back(h);
  }
  auto line = [](const std::vector<std::string>& fields) {
    std::string out;
    for (size_t i = 0; i < fields.size(); ++i) {
      if (i) out += ',';
      out += CsvField(fields[i]);
    }
    return out + "\r\n";
  };
  std::string out = line(header);
  for (const UsageTotals& t : report.rows) {
    std::vector<std::string> f = KeyCells(t, report.by);
    f.push_back(std::to_string(t.jobs));
    for (double v : {t.gpu_hours, t.memory_gib_hours, t.compute_share_hours, t.idle_hours,
                     t.idle_gpu_hours, t.suspended_hours}) {
      f.push_back(Fixed(v, 6));
    }
    out += line(f);
  }
  return out;
}

}  // namespace gpuslice::core

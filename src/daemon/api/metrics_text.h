#pragma once

// Writes the Prometheus text exposition format, version 0.0.4: families of
// samples, each family introduced by its HELP and TYPE lines and all of its
// samples together (the format requires it). Label values and help texts
// are escaped here, so callers pass raw strings (job names, users, GPU
// models).
//
//   MetricsText t;
//   t.Family("gpuslice_daemon_up", MetricType::kGauge, "1 while the daemon answers.");
//   t.Sample({}, 1);
//   t.Family("gpuslice_job_memory_used_bytes", ...);
//   t.Sample({{"job", "42"}, {"user", "ada"}}, 1.5e9);
//   std::string body = t.Take();
//
// Not thread-safe; one per rendering.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpuslice::daemon {

enum class MetricType { kGauge, kCounter, kHistogram };

// Label name and (unescaped) value, in the order they are written.
using MetricLabels = std::vector<std::pair<std::string_view, std::string>>;

// The Content-Type of the format.
inline constexpr char kMetricsContentType[] = "text/plain; version=0.0.4; charset=utf-8";

class MetricsText {
 public:
  // Starts a family. Names must match [a-zA-Z_:][a-zA-Z0-9_:]* (they are
  // constants of the caller; checked in debug builds only).
  void Family(std::string_view name, MetricType type, std::string_view help);
  // A sample of the current family (gauge or counter).
  void Sample(const MetricLabels& labels, double value);
  void Sample(const MetricLabels& labels, uint64_t value);
  // The samples of one histogram of the current family: `bounds` and their
  // cumulative counts (same length), then +Inf, _sum and _count.
  void Histogram(const MetricLabels& labels, const std::vector<double>& bounds,
                 const std::vector<uint64_t>& cumulative, uint64_t count, double sum);

  // Everything written so far; leaves the writer empty.
  std::string Take() { return std::move(out_); }
  const std::string& text() const { return out_; }

 private:
  void Name(std::string_view suffix, const MetricLabels& labels, std::string_view extra_name = {},
            std::string_view extra_value = {});

  std::string out_;
  std::string family_;
};

// Escapes a label value: backslash, double quote and line feed.
std::string EscapeLabelValue(std::string_view value);
// Formats a sample value: integers exactly, others with up to 17 significant
// digits; NaN and infinities as the format spells them.
std::string FormatMetricValue(double value);

}  // namespace gpuslice::daemon

#include "daemon/api/metrics_text.h"

#include <cassert>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace gpuslice::daemon {

namespace {

std::string_view TypeName(MetricType type) {
  switch (type) {
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kCounter:
      return "counter";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

// HELP text escapes only backslash and line feed (the 0.0.4 format).
std::string EscapeHelp(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

[[maybe_unused]] bool ValidName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!letter && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

}  // namespace

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::floor(value) && std::fabs(value) < 9.007199254740992e15) {
    return std::to_string(static_cast<int64_t>(value));
  }
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  return ec == std::errc() ? std::string(buf, end) : "NaN";
}

void MetricsText::Family(std::string_view name, MetricType type, std::string_view help) {
  assert(ValidName(name));
  family_ = std::string(name);
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  out_ += EscapeHelp(help);
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += ' ';
  out_ += TypeName(type);
  out_ += '\n';
}

void MetricsText::Name(std::string_view suffix, const MetricLabels& labels,
                       std::string_view extra_name, std::string_view extra_value) {
  out_ += family_;
  out_ += suffix;
  if (labels.empty() && extra_name.empty()) return;
  out_ += '{';
  bool first = true;
  for (const auto& [name, value] : labels) {
    if (!first) out_ += ',';
    first = false;
    out_ += name;
    out_ += "=\"";
    out_ += EscapeLabelValue(value);
    out_ += '"';
  }
  if (!extra_name.empty()) {
    if (!first) out_ += ',';
    out_ += extra_name;
    out_ += "=\"";
    out_ += extra_value;
    out_ += '"';
  }
  out_ += '}';
}

void MetricsText::Sample(const MetricLabels& labels, double value) {
  Name("", labels);
  out_ += ' ';
  out_ += FormatMetricValue(value);
  out_ += '\n';
}

void MetricsText::Sample(const MetricLabels& labels, uint64_t value) {
  Name("", labels);
  out_ += ' ';
  out_ += std::to_string(value);
  out_ += '\n';
}

void MetricsText::Histogram(const MetricLabels& labels, const std::vector<double>& bounds,
                            const std::vector<uint64_t>& cumulative, uint64_t count, double sum) {
  for (size_t i = 0; i < bounds.size() && i < cumulative.size(); ++i) {
    Name("_bucket", labels, "le", FormatMetricValue(bounds[i]));
    out_ += ' ';
    out_ += std::to_string(cumulative[i]);
    out_ += '\n';
  }
  Name("_bucket", labels, "le", "+Inf");
  out_ += ' ';
  out_ += std::to_string(count);
  out_ += "\n";
  Name("_sum", labels);
  out_ += ' ';
  out_ += FormatMetricValue(sum);
  out_ += '\n';
  Name("_count", labels);
  out_ += ' ';
  out_ += std::to_string(count);
  out_ += '\n';
}

}  // namespace gpuslice::daemon

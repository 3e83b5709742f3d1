#pragma once

// Plain-text tables for the CLI's human output (aligned columns, a header).

#include <string>
#include <vector>

namespace gpuslice::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : rows_{std::move(header)} {}
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string Render() const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

// "3s", "5m12s", "2h03m", "4d02h".
std::string FormatAge(int64_t ms);

}  // namespace gpuslice::cli

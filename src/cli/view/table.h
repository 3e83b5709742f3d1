#pragma once

// Plain-text tables for the CLI's human output (aligned columns, a header),
// and how the CLI shows text it did not write. Every cell goes through
// Shown(): a table's cells are job and user text (argv, names, reasons,
// event messages), never the CLI's own escape codes.

#include <string>
#include <string_view>
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

// Whether the terminal's locale is UTF-8: the first of LC_ALL, LC_CTYPE and
// LANG that is set names UTF-8 (none set: the C locale, not UTF-8).
bool LocaleIsUtf8();

// Text from the daemon that a job or a user chose, as a human view prints
// it: core::TerminalSafe for this process's locale (read once). Every
// human-readable view prints such text through it (tables do it for their
// cells); --json output never does, and `logs` prints a job's output as it
// is (the owner's own bytes).
std::string Shown(std::string_view text);

// "3s", "5m12s", "2h03m", "4d02h".
std::string FormatAge(int64_t ms);

}  // namespace gpuslice::cli

#include "core/placement/trace.h"

#include <charconv>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>

#include "core/placement/placement_model.h"

namespace gpuslice::core {
namespace {

// Columns are found by their header name, in any order; others are ignored.
constexpr std::string_view kNodeColumns[] = {"sn", "cpu_milli", "memory_mib", "gpu", "model"};
// What a task row must have; gpu_spec (any model when absent) is optional.
constexpr std::string_view kTaskColumns[] = {"name", "cpu_milli", "memory_mib", "num_gpu",
                                             "gpu_milli"};
constexpr std::string_view kTaskSpecColumn = "gpu_spec";
// Optional, for the queue replay: when the task was created and deleted
// (seconds from the trace's start). Empty fields mean unknown.
constexpr std::string_view kTaskCreatedColumn = "creation_time";
constexpr std::string_view kTaskDeletedColumn = "deletion_time";

// Splits one CSV line on commas. Quoting is not part of the format.
std::vector<std::string_view> SplitFields(std::string_view line) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t comma = line.find(',', start);
    out.push_back(line.substr(start, comma - start));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

// Walks the lines of a text, handling \n and \r\n, with 1-based numbers.
class LineReader {
 public:
  explicit LineReader(std::string_view text) : text_(text) {}
  bool Next(std::string_view* line, int* number) {
    if (pos_ >= text_.size()) return false;
    size_t end = text_.find('\n', pos_);
    if (end == std::string_view::npos) end = text_.size();
    *line = text_.substr(pos_, end - pos_);
    if (!line->empty() && line->back() == '\r') line->remove_suffix(1);
    pos_ = end + 1;
    *number = ++line_;
    return true;
  }

 private:
  std::string_view text_;
  size_t pos_ = 0;
  int line_ = 0;
};

class RowError {
 public:
  RowError(std::string_view file, int line) : prefix_(std::string(file) + ":" + std::to_string(line)) {}
  Status At(size_t column, std::string_view name, std::string_view what) const {
    return InvalidArgumentError(prefix_ + ": column " + std::to_string(column + 1) + " (" +
                                std::string(name) + "): " + std::string(what));
  }
  Status Row(std::string_view what) const { return InvalidArgumentError(prefix_ + ": " + std::string(what)); }

 private:
  std::string prefix_;
};

// Where each named column is in a file: its index, from the header row.
class Columns {
 public:
  // Reads the header; every name in `required` must be there, once.
  static Result<Columns> FromHeader(std::string_view file, std::string_view line,
                                    std::span<const std::string_view> required) {
    Columns c;
    c.fields_ = SplitFields(line);
    for (size_t i = 0; i < c.fields_.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (c.fields_[j] == c.fields_[i] && !c.fields_[i].empty()) {
          return InvalidArgumentError(std::string(file) + ":1: column " + std::to_string(i + 1) +
                                      ": header '" + std::string(c.fields_[i]) +
                                      "' is given twice");
        }
      }
    }
    for (std::string_view name : required) {
      if (!c.Find(name)) {
        std::string list;
        for (std::string_view r : required) list += (list.empty() ? "" : ",") + std::string(r);
        return InvalidArgumentError(std::string(file) + ":1: the header has no '" +
                                    std::string(name) + "' column (needed: " + list +
                                    "; found: " + std::string(line) + ")");
      }
    }
    return c;
  }

  // The index of column `name`, if the header has it.
  std::optional<size_t> Find(std::string_view name) const {
    for (size_t i = 0; i < fields_.size(); ++i) {
      if (fields_[i] == name) return i;
    }
    return std::nullopt;
  }
  size_t Index(std::string_view name) const { return *Find(name); }
  size_t size() const { return fields_.size(); }

 private:
  std::vector<std::string_view> fields_;
};

Status ParseUint(const RowError& err, const std::vector<std::string_view>& fields,
                 const Columns& columns, std::string_view name, uint64_t* out) {
  size_t column = columns.Index(name);
  std::string_view f = fields[column];
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(f.data(), f.data() + f.size(), value);
  if (f.empty() || ec != std::errc() || ptr != f.data() + f.size()) {
    return err.At(column, name, "'" + std::string(f) + "' is not a non-negative integer");
  }
  *out = value;
  return Status::Ok();
}

Status CheckModelList(const RowError& err, size_t column, std::string_view name,
                      std::string_view spec) {
  if (spec.empty()) return Status::Ok();
  size_t start = 0;
  while (true) {
    size_t bar = spec.find('|', start);
    if (spec.substr(start, bar - start).empty()) {
      return err.At(column, name, "empty GPU model name in '" + std::string(spec) + "'");
    }
    if (bar == std::string_view::npos) return Status::Ok();
    start = bar + 1;
  }
}

}  // namespace

Result<std::vector<TraceNode>> ParseTraceNodes(std::string_view text, std::string_view file) {
  LineReader reader(text);
  std::string_view line;
  int number = 0;
  if (!reader.Next(&line, &number)) return InvalidArgumentError(std::string(file) + ": empty file");
  GPUSLICE_ASSIGN_OR_RETURN(Columns col, Columns::FromHeader(file, line, kNodeColumns));
  const size_t sn = col.Index("sn"), cpu = col.Index("cpu_milli"), gpu = col.Index("gpu"),
               model = col.Index("model");
  std::vector<TraceNode> nodes;
  std::set<std::string, std::less<>> names;
  while (reader.Next(&line, &number)) {
    if (line.empty()) continue;
    RowError err(file, number);
    std::vector<std::string_view> f = SplitFields(line);
    if (f.size() != col.size()) {
      return err.Row("expected " + std::to_string(col.size()) + " columns, found " +
                     std::to_string(f.size()));
    }
    TraceNode n;
    n.line = number;
    n.name = std::string(f[sn]);
    if (n.name.empty()) return err.At(sn, "sn", "node name is empty");
    if (names.count(n.name)) return err.At(sn, "sn", "duplicate node name '" + n.name + "'");
    uint64_t gpus = 0;
    GPUSLICE_RETURN_IF_ERROR(ParseUint(err, f, col, "cpu_milli", &n.cpu_milli));
    GPUSLICE_RETURN_IF_ERROR(ParseUint(err, f, col, "memory_mib", &n.memory_mib));
    GPUSLICE_RETURN_IF_ERROR(ParseUint(err, f, col, "gpu", &gpus));
    if (n.cpu_milli == 0) return err.At(cpu, "cpu_milli", "a node needs CPU");
    if (gpus > kMaxGpusPerNode) {
      return err.At(gpu, "gpu", std::to_string(gpus) + " GPUs exceed the limit of " +
                                    std::to_string(kMaxGpusPerNode) + " per node");
    }
    n.gpus = static_cast<uint32_t>(gpus);
    n.model = std::string(f[model]);
    if (n.gpus > 0 && n.model.empty()) return err.At(model, "model", "a GPU node needs a model");
    if (n.gpus == 0 && !n.model.empty()) {
      return err.At(model, "model", "model '" + n.model + "' given for a node without GPUs");
    }
    names.insert(n.name);
    nodes.push_back(std::move(n));
  }
  if (nodes.empty()) return InvalidArgumentError(std::string(file) + ": no node rows");
  return nodes;
}

Result<std::vector<TraceTask>> ParseTraceTasks(std::string_view text, std::string_view file) {
  LineReader reader(text);
  std::string_view line;
  int number = 0;
  if (!reader.Next(&line, &number)) return InvalidArgumentError(std::string(file) + ": empty file");
  GPUSLICE_ASSIGN_OR_RETURN(Columns col, Columns::FromHeader(file, line, kTaskColumns));
  const size_t name_col = col.Index("name"), num_gpu_col = col.Index("num_gpu"),
               milli_col = col.Index("gpu_milli");
  const std::optional<size_t> spec_col = col.Find(kTaskSpecColumn);
  const std::optional<size_t> created_col = col.Find(kTaskCreatedColumn);
  const std::optional<size_t> deleted_col = col.Find(kTaskDeletedColumn);
  const size_t header_columns = col.size();
  std::vector<TraceTask> tasks;
  std::set<std::string, std::less<>> names;
  while (reader.Next(&line, &number)) {
    if (line.empty()) continue;
    RowError err(file, number);
    std::vector<std::string_view> f = SplitFields(line);
    if (f.size() != header_columns) {
      return err.Row("expected " + std::to_string(header_columns) + " columns, found " +
                     std::to_string(f.size()));
    }
    TraceTask t;
    t.line = number;
    t.name = std::string(f[name_col]);
    if (t.name.empty()) return err.At(name_col, "name", "task name is empty");
    if (names.count(t.name)) {
      return err.At(name_col, "name", "duplicate task name '" + t.name + "'");
    }
    uint64_t num_gpu = 0, gpu_milli = 0;
    GPUSLICE_RETURN_IF_ERROR(ParseUint(err, f, col, "cpu_milli", &t.cpu_milli));
    GPUSLICE_RETURN_IF_ERROR(ParseUint(err, f, col, "memory_mib", &t.memory_mib));
    GPUSLICE_RETURN_IF_ERROR(ParseUint(err, f, col, "num_gpu", &num_gpu));
    GPUSLICE_RETURN_IF_ERROR(ParseUint(err, f, col, "gpu_milli", &gpu_milli));
    if (num_gpu > kMaxGpusPerNode) {
      return err.At(num_gpu_col, "num_gpu", std::to_string(num_gpu) + " GPUs exceed the limit of " +
                                                std::to_string(kMaxGpusPerNode) + " per node");
    }
    if (num_gpu == 0 && gpu_milli != 0) {
      return err.At(milli_col, "gpu_milli", "must be 0 for a task without GPUs, found " +
                                                std::to_string(gpu_milli));
    }
    if (num_gpu == 1 && (gpu_milli == 0 || gpu_milli > kMilliPerGpu)) {
      return err.At(milli_col, "gpu_milli", "must be 1..1000 for a 1-GPU task, found " +
                                                std::to_string(gpu_milli));
    }
    if (num_gpu > 1 && gpu_milli != kMilliPerGpu) {
      return err.At(milli_col, "gpu_milli", "must be 1000 for a multi-GPU task, found " +
                                                std::to_string(gpu_milli));
    }
    t.num_gpu = static_cast<uint32_t>(num_gpu);
    t.gpu_milli = static_cast<uint32_t>(gpu_milli);
    if (spec_col) {
      t.gpu_spec = std::string(f[*spec_col]);
      GPUSLICE_RETURN_IF_ERROR(CheckModelList(err, *spec_col, kTaskSpecColumn, t.gpu_spec));
      if (t.num_gpu == 0 && !t.gpu_spec.empty()) {
        return err.At(*spec_col, kTaskSpecColumn, "a GPU model constraint on a task without GPUs");
      }
    }
    if (created_col && deleted_col && !f[*created_col].empty() && !f[*deleted_col].empty()) {
      uint64_t created = 0, deleted = 0;
      GPUSLICE_RETURN_IF_ERROR(ParseUint(err, f, col, kTaskCreatedColumn, &created));
      GPUSLICE_RETURN_IF_ERROR(ParseUint(err, f, col, kTaskDeletedColumn, &deleted));
      if (deleted < created) {
        return err.At(
            *deleted_col, kTaskDeletedColumn,
            std::to_string(deleted) + " is before the creation time " + std::to_string(created));
      }
      t.creation_s = static_cast<int64_t>(created);
      t.deletion_s = static_cast<int64_t>(deleted);
    }
    names.insert(t.name);
    tasks.push_back(std::move(t));
  }
  if (tasks.empty()) return InvalidArgumentError(std::string(file) + ": no task rows");
  return tasks;
}

}  // namespace gpuslice::core

#include "core/trace.h"

#include <charconv>
#include <set>
#include <span>
#include <string>
#include <utility>

#include "core/placement_model.h"

namespace gpuslice::core {
namespace {

constexpr std::string_view kNodeColumns[] = {"sn", "cpu_milli", "memory_mib", "gpu", "model"};
constexpr std::string_view kTaskColumns[] = {"name",          "cpu_milli",    "memory_mib",
                                             "num_gpu",       "gpu_milli",    "gpu_spec",
                                             "qos",           "pod_phase",    "creation_time",
                                             "deletion_time", "scheduled_time"};
// Columns a task row must have; later ones (timestamps, phase) are not used.
constexpr size_t kTaskRequiredColumns = 6;

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

Status ParseUint(const RowError& err, const std::vector<std::string_view>& fields, size_t column,
                 std::string_view name, uint64_t* out) {
  std::string_view f = fields[column];
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(f.data(), f.data() + f.size(), value);
  if (f.empty() || ec != std::errc() || ptr != f.data() + f.size()) {
    return err.At(column, name, "'" + std::string(f) + "' is not a non-negative integer");
  }
  *out = value;
  return Status::Ok();
}

Status CheckHeader(std::string_view file, std::string_view line,
                   std::span<const std::string_view> expected) {
  std::vector<std::string_view> fields = SplitFields(line);
  for (size_t i = 0; i < expected.size(); ++i) {
    if (i >= fields.size() || fields[i] != expected[i]) {
      return InvalidArgumentError(std::string(file) + ":1: column " + std::to_string(i + 1) +
                                  ": header must be '" + std::string(expected[i]) + "', found '" +
                                  (i < fields.size() ? std::string(fields[i]) : "") + "'");
    }
  }
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
  GPUSLICE_RETURN_IF_ERROR(CheckHeader(file, line, kNodeColumns));
  std::vector<TraceNode> nodes;
  std::set<std::string, std::less<>> names;
  while (reader.Next(&line, &number)) {
    if (line.empty()) continue;
    RowError err(file, number);
    std::vector<std::string_view> f = SplitFields(line);
    if (f.size() != std::size(kNodeColumns)) {
      return err.Row("expected " + std::to_string(std::size(kNodeColumns)) + " columns, found " +
                     std::to_string(f.size()));
    }
    TraceNode n;
    n.line = number;
    n.name = std::string(f[0]);
    if (n.name.empty()) return err.At(0, "sn", "node name is empty");
    if (names.count(n.name)) return err.At(0, "sn", "duplicate node name '" + n.name + "'");
    uint64_t gpus = 0;
    GPUSLICE_RETURN_IF_ERROR(ParseUint(err, f, 1, "cpu_milli", &n.cpu_milli));
    GPUSLICE_RETURN_IF_ERROR(ParseUint(err, f, 2, "memory_mib", &n.memory_mib));
    GPUSLICE_RETURN_IF_ERROR(ParseUint(err, f, 3, "gpu", &gpus));
    if (n.cpu_milli == 0) return err.At(1, "cpu_milli", "a node needs CPU");
    if (gpus > kMaxGpusPerNode) {
      return err.At(3, "gpu", std::to_string(gpus) + " GPUs exceed the limit of " +
                                  std::to_string(kMaxGpusPerNode) + " per node");
    }
    n.gpus = static_cast<uint32_t>(gpus);
    n.model = std::string(f[4]);
    if (n.gpus > 0 && n.model.empty()) return err.At(4, "model", "a GPU node needs a model");
    if (n.gpus == 0 && !n.model.empty()) {
      return err.At(4, "model", "model '" + n.model + "' given for a node without GPUs");
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
  GPUSLICE_RETURN_IF_ERROR(CheckHeader(file, line, std::span(kTaskColumns, kTaskRequiredColumns)));
  const size_t header_columns = SplitFields(line).size();
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
    t.name = std::string(f[0]);
    if (t.name.empty()) return err.At(0, "name", "task name is empty");
    if (names.count(t.name)) return err.At(0, "name", "duplicate task name '" + t.name + "'");
    uint64_t num_gpu = 0, gpu_milli = 0;
    GPUSLICE_RETURN_IF_ERROR(ParseUint(err, f, 1, "cpu_milli", &t.cpu_milli));
    GPUSLICE_RETURN_IF_ERROR(ParseUint(err, f, 2, "memory_mib", &t.memory_mib));
    GPUSLICE_RETURN_IF_ERROR(ParseUint(err, f, 3, "num_gpu", &num_gpu));
    GPUSLICE_RETURN_IF_ERROR(ParseUint(err, f, 4, "gpu_milli", &gpu_milli));
    if (num_gpu > kMaxGpusPerNode) {
      return err.At(3, "num_gpu", std::to_string(num_gpu) + " GPUs exceed the limit of " +
                                      std::to_string(kMaxGpusPerNode) + " per node");
    }
    if (num_gpu == 0 && gpu_milli != 0) {
      return err.At(4, "gpu_milli", "must be 0 for a task without GPUs, found " +
                                        std::to_string(gpu_milli));
    }
    if (num_gpu == 1 && (gpu_milli == 0 || gpu_milli > kMilliPerGpu)) {
      return err.At(4, "gpu_milli", "must be 1..1000 for a 1-GPU task, found " +
                                        std::to_string(gpu_milli));
    }
    if (num_gpu > 1 && gpu_milli != kMilliPerGpu) {
      return err.At(4, "gpu_milli", "must be 1000 for a multi-GPU task, found " +
                                        std::to_string(gpu_milli));
    }
    t.num_gpu = static_cast<uint32_t>(num_gpu);
    t.gpu_milli = static_cast<uint32_t>(gpu_milli);
    t.gpu_spec = std::string(f[5]);
    GPUSLICE_RETURN_IF_ERROR(CheckModelList(err, 5, "gpu_spec", t.gpu_spec));
    if (t.num_gpu == 0 && !t.gpu_spec.empty()) {
      return err.At(5, "gpu_spec", "a GPU model constraint on a task without GPUs");
    }
    names.insert(t.name);
    tasks.push_back(std::move(t));
  }
  if (tasks.empty()) return InvalidArgumentError(std::string(file) + ": no task rows");
  return tasks;
}

}  // namespace gpuslice::core

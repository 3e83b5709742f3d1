#pragma once

// Loader for the openb GPU-sharing trace (Alibaba cluster-trace-gpu-v2023,
// published with the FGD paper). Pure: it parses text the caller read; the
// file I/O lives in the tools. Every error names the file, the line and the
// column, because these files are edited by hand to make variants.
//
// Node list:  sn,cpu_milli,memory_mib,gpu,model
// Task list:  name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,
//             pod_phase,creation_time,deletion_time,scheduled_time
// The header row must be present and name these columns in this order
// (extra trailing columns are allowed and ignored).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace gpuslice::core {

struct TraceNode {
  std::string name;
  uint64_t cpu_milli = 0;
  uint64_t memory_mib = 0;
  uint32_t gpus = 0;
  std::string model;  // Empty iff gpus == 0.
  int line = 0;       // 1-based line in the file.
};

struct TraceTask {
  std::string name;
  uint64_t cpu_milli = 0;
  uint64_t memory_mib = 0;
  uint32_t num_gpu = 0;
  // Share of each GPU in per-mille. num_gpu == 0: 0; num_gpu == 1: 1..1000;
  // num_gpu > 1: whole GPUs, 1000.
  uint32_t gpu_milli = 0;
  // Allowed GPU models, '|'-separated ("V100M16|V100M32"); empty = any.
  std::string gpu_spec;
  int line = 0;
};

// Parses a node list. `file` only labels errors. Errors (kInvalidArgument):
// missing/unexpected header, wrong column count, a non-integer or negative
// number, a GPU node without model, a duplicate node name, no rows.
Result<std::vector<TraceNode>> ParseTraceNodes(std::string_view text, std::string_view file);

// Parses a task list; same error rules, plus: gpu_milli outside the range
// its num_gpu allows, and a gpu_spec with an empty model name.
Result<std::vector<TraceTask>> ParseTraceTasks(std::string_view text, std::string_view file);

}  // namespace gpuslice::core

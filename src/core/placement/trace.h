#pragma once

// Loader for the openb GPU-sharing trace (Alibaba cluster-trace-gpu-v2023,
// published with the FGD paper). Pure: it parses text the caller read; the
// file I/O lives in the tools. Every error names the file, the line and the
// column, because these files are edited by hand to make variants.
//
// Node list:  sn,cpu_milli,memory_mib,gpu,model
// Task list:  name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec]
//             [,creation_time,deletion_time]
//             (the full files also carry qos, pod_phase and scheduled_time;
//             some of the same release only the first five)
// The header row must be present; columns are found by their header name,
// in any order. The node list needs all five; a task list needs the first
// five and takes gpu_spec when present (absent: any model). Other columns are
// ignored. Every row has as many fields as the header.

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
  // Seconds from the trace's start when it was created and deleted (the
  // queue replay's arrival and run time); -1 when the file has no such
  // columns or the row leaves them empty. After `line`, so that a task
  // written as {name, cpu, memory, gpus, milli, spec, line} means what it
  // did before these existed.
  int64_t creation_s = -1;
  int64_t deletion_s = -1;
};

// Parses a node list. `file` only labels errors. Errors (kInvalidArgument):
// a header without a needed column or with one twice, wrong column count, a non-integer or negative
// number, a GPU node without model, a duplicate node name, no rows.
Result<std::vector<TraceNode>> ParseTraceNodes(std::string_view text, std::string_view file);

// Parses a task list; same error rules, plus: gpu_milli outside the range
// its num_gpu allows, a gpu_spec with an empty model name, and a deletion
// time before the creation time.
Result<std::vector<TraceTask>> ParseTraceTasks(std::string_view text, std::string_view file);

}  // namespace gpuslice::core

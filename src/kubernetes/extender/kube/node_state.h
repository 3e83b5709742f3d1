#pragma once

// What the extender knows of each node: the last report of the node's
// gpusliced (GET /v1/node, src/daemon/api/node_state_route.h), when it came and
// whether the last poll failed. The poller (node_poller.h) publishes a whole
// Snapshot at a time; readers hold a shared_ptr to an immutable one, so the
// request path never waits for I/O.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace gpuslice::kubernetes {

struct GpuReport {
  uint32_t index = 0;
  std::string uuid;
  std::string model;
  uint64_t memory_total = 0;
  uint64_t memory_allocated = 0;
  uint32_t compute_allocated_milli = 0;
  bool whole = false;  // Held by a whole-GPU job.
  bool healthy = true;
  bool mig_enabled = false;
  std::map<std::string, uint32_t> mig_free;  // Profile -> free instances.
};

struct NodeReport {
  std::vector<GpuReport> gpus;
  bool degraded = false;
  std::string degraded_reason;
};

// Parses the body of GET /v1/node. Errors on a version this build does not
// know, or a malformed body, naming the field.
core::Result<NodeReport> ParseNodeReport(std::string_view body);

// One node as the extender sees it.
struct NodeEntry {
  std::string url;          // Where its daemon's /v1/node is ("" = unknown).
  bool has_report = false;  // A report was ever received.
  NodeReport report;        // The last good one.
  int64_t received_ms = 0;  // When (extender's clock).
  std::string last_error;   // Of the last poll; "" when it succeeded.
};

struct Snapshot {
  // Increases with every publication, so derived views can be cached.
  uint64_t generation = 0;
  std::unordered_map<std::string, NodeEntry> nodes;
};

using SnapshotPtr = std::shared_ptr<const Snapshot>;

}  // namespace gpuslice::kubernetes

#pragma once

// Polls every node's gpusliced (GET <base>/v1/node) once a second on a
// background thread and publishes a fresh Snapshot after each round, so the
// extender's filter and prioritize never wait on a node. Nodes come from the
// --nodes-file (name -> base URL) and, for the others, from the InternalIP
// of the Node objects kube-scheduler sends (http://IP:--daemon-port).
// A failed poll keeps the node's last good report with its time, so the
// extender can call it stale.
//
// Thread-safe. Polls run on up to kMaxParallel threads per round, each
// bounded by the request timeout, so one dead node delays nothing else.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/status.h"
#include "kubernetes/extender/kube/node_state.h"

namespace gpuslice::kubernetes {

struct PollerOptions {
  std::chrono::milliseconds interval{1000};
  std::chrono::milliseconds timeout{800};
  // Port of the daemons' metrics listener, for nodes known by address
  // only; 0 = such nodes are not polled.
  int daemon_port = 0;
};

// The --nodes-file: a JSON object {"node-a": "http://10.0.0.5:9400", ...}
// or the same as YAML lines "node-a: http://10.0.0.5:9400" ('#' comments).
// Errors name the line or say it is neither.
core::Result<std::map<std::string, std::string>> ParseNodesFile(std::string_view text);

// The URL of a node's state from its base URL ("http://h:p" -> ".../v1/node";
// a URL ending in /v1/node is kept).
std::string NodeStateUrl(const std::string& base);

class NodePoller {
 public:
  using Publish = std::function<void(SnapshotPtr)>;
  using NowFn = std::function<int64_t()>;
  NodePoller(PollerOptions options, std::map<std::string, std::string> nodes, Publish publish,
             NowFn now);
  ~NodePoller();

  // Adds nodes seen in a NodeList, by InternalIP (ignored when the node has
  // a URL already or daemon_port is 0). Cheap; the next round polls them.
  // True when a node was new.
  bool Learn(const std::vector<std::string>& names, const std::vector<std::string>& ips);
  // One round now, on the caller's thread (tests; the loop calls it).
  void PollOnce();
  void Start();
  void Stop();

  static constexpr int kMaxParallel = 16;

 private:
  const PollerOptions options_;
  const Publish publish_;
  const NowFn now_;

  std::mutex mu_;
  std::map<std::string, std::string> urls_;  // Node -> state URL.
  Snapshot current_;                         // Last published (copied).
  std::mutex round_mu_;                      // One round at a time.

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace gpuslice::kubernetes

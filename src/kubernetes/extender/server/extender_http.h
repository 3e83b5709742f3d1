#pragma once

// The extender's HTTP face: a route table (POST /filter, /prioritize, /bind;
// GET /healthz) over Extender, and a small Boost.Beast TCP server for it.
// kube-scheduler keeps connections alive and sends one request at a time
// per connection; each connection gets a thread (at most kMaxConnections at
// once), given back when the peer closes or sends nothing for two minutes.
// A peer that stops in the middle of a request holds its thread until it
// closes: the extender is meant to be reached by kube-scheduler only (a
// cluster-internal Service or localhost).

#include <atomic>
#include <memory>
#include <string>
#include <utility>

#include "core/status.h"
#include "kubernetes/extender/placement/extender.h"
#include "kubernetes/extender/kube/node_poller.h"

namespace gpuslice::kubernetes {

struct HttpAnswer {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
};

// Answers one request. `poller` (may be null) learns nodes' addresses from
// NodeList bodies, and polls the nodes it did not know before answering. Malformed bodies get 400
// with the verb's own error shape (ExtenderFilterResult.Error, ExtenderBindingResult.Error,
// {"error"} for prioritize, whose answer has no error field); unknown paths 404, a known path with
// another method 405.
HttpAnswer HandleExtenderRequest(Extender& extender, NodePoller* poller, const std::string& method,
                                 const std::string& path, const std::string& body);

// "HOST:PORT" ("[::1]:PORT" for IPv6) as the host and port; `flag` names
// the option in errors. The host must be an IP address.
core::Result<std::pair<std::string, int>> SplitListenAddress(const std::string& host_port,
                                                             const std::string& flag);

class ExtenderServer {
 public:
  static constexpr int kMaxConnections = 256;
  ExtenderServer(Extender& extender, NodePoller* poller);
  ~ExtenderServer();

  // Binds HOST:PORT ("[::1]:PORT" for IPv6; port 0 picks one) and returns
  // the bound "HOST:PORT".
  core::Result<std::string> Listen(const std::string& host_port);
  // Accepts until Stop(); returns then.
  void Run();
  void Stop();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpuslice::kubernetes

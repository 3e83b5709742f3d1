#pragma once

// The extender's second listener, on the pod's address: HTTPS for the API
// server's admission calls (POST /mutate, webhook.h) and for the kubelet's
// readiness probe (GET /healthz, the same answer as the verbs' listener). The
// verbs are not served here: bind acts with the extender's credentials, so
// they stay on the listener only kube-scheduler beside it reaches.
//
// The key and certificate are PEM files (a kubernetes.io/tls Secret mounted
// as a volume); when either file changes (the kubelet swaps a Secret's files
// when it is updated) the next connection is served with the new ones, and
// a pair that does not load keeps the old one in use (logged once).
//
// Each connection gets a thread (at most kMaxConnections at once) and serves
// one request (the answer says `Connection: close`): a peer has
// kRequestTimeoutMs for the handshake, its request and the answer; past
// that its connection is shut down, so stalled peers cannot hold every
// thread for long.

#include <memory>
#include <string>

#include "core/status.h"
#include "kubernetes/extender/placement/extender.h"

namespace gpuslice::kubernetes {

struct WebhookServerOptions {
  std::string cert_file;
  std::string key_file;
  std::string scheduler_name = "gpuslice-scheduler";
};

class WebhookServer {
 public:
  static constexpr int kMaxConnections = 64;
  static constexpr int kRequestTimeoutMs = 10000;

  WebhookServer(Extender& extender, WebhookServerOptions options);
  ~WebhookServer();

  // Loads the key and certificate (an error names the file and OpenSSL's
  // reason), binds HOST:PORT (port 0 picks one) and returns the bound
  // "HOST:PORT".
  core::Result<std::string> Listen(const std::string& host_port);
  // Accepts until Stop(); returns then.
  void Run();
  void Stop();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpuslice::kubernetes

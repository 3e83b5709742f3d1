#pragma once

// The few Kubernetes API server calls gpuslice needs, over http_client.h:
// bind a pod to a node (the extender's bind verb), merge-patch a pod's
// annotations, and read a pod (the device plugin reads the annotations the
// extender wrote). Credentials are a bearer token read from a file at each
// call (the kubelet rotates projected service-account tokens) and a CA file.
//
// Thread-safe: every call opens its own connection.

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"

namespace gpuslice::kubernetes {

struct KubeApiOptions {
  std::string base_url;    // "https://10.96.0.1:443"; http:// for tests.
  std::string token_file;  // "" = no Authorization header.
  std::string ca_file;     // "" = the system's CAs.
  bool insecure_skip_verify = false;
  std::chrono::milliseconds timeout{5000};
};

// The in-cluster defaults: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT
// and the service account's token and CA under
// /var/run/secrets/kubernetes.io/serviceaccount/. base_url is "" outside a
// cluster (the variables are unset).
KubeApiOptions InClusterOptions();

// The Binding object that binds pod `ns`/`name` (uid `uid`, "" to leave it
// out) to `node`, as POST .../pods/{name}/binding takes it.
nlohmann::json BindingBody(const std::string& ns, const std::string& name, const std::string& uid,
                           const std::string& node);

class KubeApi {
 public:
  explicit KubeApi(KubeApiOptions options) : options_(std::move(options)) {}
  virtual ~KubeApi() = default;

  // POST /api/v1/namespaces/{ns}/pods/{name}/binding. Errors carry the API
  // server's status and message (e.g. 409 "pod is already assigned").
  virtual core::Status Bind(const std::string& ns, const std::string& name, const std::string& uid,
                            const std::string& node);
  // PATCH the pod's metadata.annotations (JSON merge patch: the keys given
  // are set, others are kept).
  virtual core::Status AnnotatePod(const std::string& ns, const std::string& name,
                                   const std::map<std::string, std::string>& annotations);
  // GET the pod object.
  virtual core::Result<nlohmann::json> GetPod(const std::string& ns, const std::string& name);

  const KubeApiOptions& options() const { return options_; }

 private:
  core::Result<std::string> Call(const std::string& method, const std::string& path,
                                 const std::string& content_type, const std::string& body);

  KubeApiOptions options_;
};

}  // namespace gpuslice::kubernetes

#pragma once

// gpuslice-device-plugin's command line (pure parsing; main.cc acts on it).

#include <chrono>
#include <string>
#include <vector>

#include "core/status.h"

namespace gpuslice::kubernetes {

struct Flags {
  std::string socket;  // gpusliced's; "" = $GPUSLICE_SOCKET or the default.
  std::string device_plugin_dir = "/var/lib/kubelet/device-plugins/";
  std::string pod_resources_socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
  bool cdi = true;
  std::chrono::milliseconds poll_interval{5000};   // GET /v1/gpus.
  std::chrono::milliseconds release_grace{30000};  // reconcile.h.
  std::string node_name;                           // "" = $NODE_NAME, else the host name.
  // The API server, for pods' gpuslice.dev/priority annotation: "" = the
  // in-cluster one when KUBERNETES_SERVICE_HOST is set, else none.
  std::string kube_api;
  std::string kube_token_file;  // "" = the in-cluster service account's.
  std::string kube_ca_file;     // "" = the in-cluster service account's.
  bool no_kube_api = false;
  bool help = false;
};

// Accepts "--flag value" and "--flag=value"; errors name the flag.
core::Result<Flags> ParseFlags(const std::vector<std::string>& args);

// --help's text.
std::string Usage();

}  // namespace gpuslice::kubernetes

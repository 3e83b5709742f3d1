// gpuslice-device-plugin: the Kubernetes device plugin of gpuslice
// (docs/KUBERNETES-device-plugin.md). Runs on each node beside gpusliced,
// usually as a DaemonSet with the kubelet's folders mounted.

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "kubernetes/device_plugin/daemon/daemon_client.h"
#include "kubernetes/device_plugin/base/flags.h"
#include "kubernetes/device_plugin/kubelet/kubelet.h"
#include "kubernetes/device_plugin/base/log.h"
#include "kubernetes/device_plugin/plugin.h"
#include "kubernetes/device_plugin/kubelet/pod_annotations.h"

namespace {

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop.store(true); }

std::string NodeName(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = getenv("NODE_NAME"); env != nullptr && *env != '\0') return env;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') return "node";
  return host;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gpuslice::kubernetes;
  auto flags = ParseFlags(std::vector<std::string>(argv + 1, argv + argc));
  if (!flags.ok()) {
    fprintf(stderr, "gpuslice-device-plugin: %s\n", flags.status().message().c_str());
    return 2;
  }
  if (flags->help) {
    fputs(Usage().c_str(), stdout);
    return 0;
  }
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  const std::string socket = gpuslice::client::DefaultSocketPath(flags->socket);
  HttpDaemonClient allocate_daemon(socket);
  HttpDaemonClient poll_daemon(socket);
  GrpcPodResources pods(flags->pod_resources_socket);
  PluginOptions options;
  options.device_plugin_dir = flags->device_plugin_dir;
  options.node = NodeName(flags->node_name);
  options.cdi = flags->cdi;
  options.poll_interval = flags->poll_interval;
  options.decide.release_grace = flags->release_grace;
  LogInfo("starting: node " + options.node + ", gpusliced at " + socket + ", kubelet folder " +
          options.device_plugin_dir + (options.cdi ? ", CDI" : ", no CDI"));
  // Pods' gpuslice.dev/priority from the API server (kube_api.h).
  KubeApiOptions kube = InClusterOptions();
  if (!flags->kube_api.empty()) kube.base_url = flags->kube_api;
  if (!flags->kube_token_file.empty()) kube.token_file = flags->kube_token_file;
  if (!flags->kube_ca_file.empty()) kube.ca_file = flags->kube_ca_file;
  std::unique_ptr<KubeApi> api;
  std::unique_ptr<ApiPodAnnotations> annotations;
  if (!flags->no_kube_api && !kube.base_url.empty()) {
    api = std::make_unique<KubeApi>(kube);
    annotations = std::make_unique<ApiPodAnnotations>(api.get());
    options.annotations = annotations.get();
    LogInfo("pods' " + std::string(kPriorityAnnotation) + " read from " + kube.base_url);
  } else {
    LogInfo("no API server (--kube-api, or in-cluster): pods' " + std::string(kPriorityAnnotation) +
            " is not read");
  }
  Plugin plugin(options, &allocate_daemon, &poll_daemon, &pods);
  plugin.Run(g_stop);
  LogInfo("stopped");
  return 0;
}

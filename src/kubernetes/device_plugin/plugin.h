#pragma once

// The device plugin as a whole: polls the daemon's GPUs, keeps one
// ResourceServer per resource the node has, registers each with the kubelet
// and registers again when the kubelet restarts, runs the reconciler.
//
// Kubelet restarts: the kubelet deletes every socket in its device plugin
// folder and makes a new kubelet.sock. Each tick (250 ms) the plugin checks
// that its sockets still exist (else it serves again on a new one) and
// whether kubelet.sock is a new file (another inode or change time) since it
// registered (else it registers again): both together are a restart.
//
// Start-up: nothing is served until the daemon answered and the plugin's
// jobs were recovered from it, so a restarted plugin never hands out a
// slice twice.

#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "core/status.h"
#include "kubernetes/device_plugin/daemon/allocator.h"
#include "kubernetes/device_plugin/daemon/daemon_client.h"
#include "kubernetes/device_plugin/kubelet/device_table.h"
#include "kubernetes/device_plugin/daemon/job_book.h"
#include "kubernetes/device_plugin/kubelet/kubelet.h"
#include "kubernetes/device_plugin/kubelet/reconciler.h"
#include "kubernetes/device_plugin/kubelet/resource_server.h"

namespace gpuslice::kubernetes {

struct PluginOptions {
  std::string device_plugin_dir;
  std::string node;
  bool cdi = true;
  std::chrono::milliseconds poll_interval{5000};
  ReconcileOptions decide;
  // Pods' annotations (gpuslice.dev/priority); null: not read.
  PodAnnotationSource* annotations = nullptr;
};

class Plugin {
 public:
  // `allocate_daemon` serves Allocate (gRPC threads); `poll_daemon` the
  // poller and the reconciler, so that Allocate never waits behind them.
  Plugin(PluginOptions options, DaemonClient* allocate_daemon, DaemonClient* poll_daemon,
         PodResourcesSource* pods);
  ~Plugin();

  // Runs until `stop` is set; then stops serving and removes its sockets.
  void Run(const std::atomic<bool>& stop);

 private:
  struct Served {
    std::unique_ptr<ResourceServer> server;
    bool registered = false;
    uint64_t kubelet_identity = 0;  // kubelet.sock's (plugin.cc) when registered.
  };

  void Poll();
  void SyncServers();
  void Serve(const Resource& resource, Served* served);
  std::string KubeletSocket() const;

  PluginOptions options_;
  DaemonClient* poll_daemon_;
  DeviceTable table_;
  JobBook book_;
  Allocator allocator_;
  Reconciler reconciler_;
  ServerDeps deps_;
  std::map<Resource, Served> served_;
  bool daemon_error_logged_ = false;
  std::set<std::string> unhealthy_;  // GPU UUIDs, for logging changes.
};

}  // namespace gpuslice::kubernetes

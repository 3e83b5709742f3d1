#pragma once

// One resource's DevicePlugin gRPC server on its own unix socket in the
// kubelet's device plugin folder: the kubelet's calls become the plugin's
// pure decisions (preferred.h, allocator.h) and back (the one translation
// between gRPC messages and our types lives in resource_server.cc).

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "kubernetes/device_plugin/daemon/allocator.h"
#include "kubernetes/device_plugin/kubelet/device_table.h"
#include "kubernetes/device_plugin/base/devices.h"
#include "kubernetes/device_plugin/daemon/job_book.h"

namespace grpc {
class Server;
}

namespace gpuslice::kubernetes {

struct ServerDeps {
  DeviceTable* table = nullptr;
  Allocator* allocator = nullptr;
  JobBook* book = nullptr;
  DaemonClient* daemon = nullptr;        // To release a multi-container Allocate's jobs on error.
  std::function<void()> after_allocate;  // Wakes the reconciler.
  Clock::duration pairing_window = std::chrono::seconds(10);
};

// "gpuslice-gpu-memory.sock": the socket's file name for `resource`.
std::string SocketName(const Resource& resource);

class ResourceServer {
 public:
  ResourceServer(Resource resource, ServerDeps deps);
  ~ResourceServer();  // Stop().

  // Serves on `socket_path` (a stale file there is replaced).
  core::Status Start(const std::string& socket_path);
  // Ends the streams, shuts the server down and removes its socket file.
  void Stop();

  const Resource& resource() const { return resource_; }
  const std::string& socket_path() const { return socket_path_; }

 private:
  class Service;
  Resource resource_;
  ServerDeps deps_;
  std::string socket_path_;
  std::atomic<bool> stopping_{false};
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace gpuslice::kubernetes

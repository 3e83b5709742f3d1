#pragma once

// The kubelet's side of the device plugin protocol, for tests: no kubelet
// can be installed on the test machines, so the tests play it. A
// Registration server on <dir>/kubelet.sock records what plugins register;
// a PodResourcesLister server answers the pods the test sets; Restart()
// does what a restarting kubelet does to the plugin folder (stops, deletes
// every file in it, serves a new kubelet.sock).

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kubernetes/proto/deviceplugin_v1beta1.grpc.pb.h"
#include "kubernetes/proto/podresources_v1.grpc.pb.h"

namespace gpuslice::kubernetes::testing {

// One container as PodResources lists it: resource name -> device IDs.
struct FakeContainer {
  std::string ns = "default";
  std::string pod;
  std::string container = "main";
  std::map<std::string, std::vector<std::string>> devices;
};

class FakeKubelet {
 public:
  // `plugin_dir`: the device plugin folder; `pod_resources_socket`: where
  // the PodResources API is served.
  FakeKubelet(std::string plugin_dir, std::string pod_resources_socket);
  ~FakeKubelet();

  bool Start();
  void Stop();
  // Stop, delete every file in the plugin folder, Start.
  bool Restart();

  // Registrations received since Start (or the last restart), in order.
  std::vector<v1beta1::RegisterRequest> registrations();
  // Waits until `resource` registered (since the last (re)start).
  bool WaitRegistered(const std::string& resource, std::chrono::seconds timeout);
  // A client of the plugin that registered `resource` (its endpoint).
  std::unique_ptr<v1beta1::DevicePlugin::Stub> Dial(const std::string& resource);

  void SetPods(std::vector<FakeContainer> containers);

  const std::string& plugin_dir() const { return plugin_dir_; }
  std::string kubelet_socket() const { return plugin_dir_ + "/kubelet.sock"; }

 private:
  class Registration;
  class PodResources;

  std::string plugin_dir_;
  std::string pod_resources_socket_;
  std::unique_ptr<Registration> registration_;
  std::unique_ptr<PodResources> pod_resources_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::Server> pod_server_;

  std::mutex mu_;
  std::condition_variable registered_;
  std::vector<v1beta1::RegisterRequest> registrations_;  // Guarded by mu_.
  std::vector<FakeContainer> containers_;                // Guarded by mu_.
};

}  // namespace gpuslice::kubernetes::testing

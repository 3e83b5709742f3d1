#include "fake_kubelet.h"

#include <filesystem>

namespace gpuslice::kubernetes::testing {

namespace fs = std::filesystem;

class FakeKubelet::Registration final : public v1beta1::Registration::Service {
 public:
  explicit Registration(FakeKubelet* k) : k_(k) {}
  grpc::Status Register(grpc::ServerContext*, const v1beta1::RegisterRequest* req,
                        v1beta1::Empty*) override {
    // What the kubelet checks before it accepts a plugin.
    if (req->version() != "v1beta1") {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "unsupported version");
    }
    if (req->endpoint().find('/') != std::string::npos) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "endpoint must be a file name");
    }
    {
      std::lock_guard<std::mutex> lock(k_->mu_);
      k_->registrations_.push_back(*req);
    }
    k_->registered_.notify_all();
    return grpc::Status::OK;
  }

 private:
  FakeKubelet* k_;
};

class FakeKubelet::PodResources final : public v1::PodResourcesLister::Service {
 public:
  explicit PodResources(FakeKubelet* k) : k_(k) {}
  grpc::Status List(grpc::ServerContext*, const v1::ListPodResourcesRequest*,
                    v1::ListPodResourcesResponse* out) override {
    std::lock_guard<std::mutex> lock(k_->mu_);
    for (const FakeContainer& c : k_->containers_) {
      v1::PodResources* pod = out->add_pod_resources();
      pod->set_name(c.pod);
      pod->set_namespace_(c.ns);
      v1::ContainerResources* cr = pod->add_containers();
      cr->set_name(c.container);
      for (const auto& [resource, ids] : c.devices) {
        v1::ContainerDevices* d = cr->add_devices();
        d->set_resource_name(resource);
        for (const std::string& id : ids) d->add_device_ids(id);
      }
      // A device of another vendor, which the plugin must ignore.
      v1::ContainerDevices* other = cr->add_devices();
      other->set_resource_name("example.com/fpga");
      other->add_device_ids("fpga-0");
    }
    return grpc::Status::OK;
  }

 private:
  FakeKubelet* k_;
};

FakeKubelet::FakeKubelet(std::string plugin_dir, std::string pod_resources_socket)
    : plugin_dir_(std::move(plugin_dir)), pod_resources_socket_(std::move(pod_resources_socket)) {
  registration_ = std::make_unique<Registration>(this);
  pod_resources_ = std::make_unique<PodResources>(this);
}

FakeKubelet::~FakeKubelet() { Stop(); }

bool FakeKubelet::Start() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    registrations_.clear();
  }
  grpc::ServerBuilder b;
  b.AddListeningPort("unix://" + kubelet_socket(), grpc::InsecureServerCredentials());
  b.RegisterService(registration_.get());
  server_ = b.BuildAndStart();
  grpc::ServerBuilder p;
  p.AddListeningPort("unix://" + pod_resources_socket_, grpc::InsecureServerCredentials());
  p.RegisterService(pod_resources_.get());
  pod_server_ = p.BuildAndStart();
  return server_ != nullptr && pod_server_ != nullptr;
}

void FakeKubelet::Stop() {
  for (auto* s : {&server_, &pod_server_}) {
    if (*s == nullptr) continue;
    (*s)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    (*s)->Wait();
    s->reset();
  }
}

bool FakeKubelet::Restart() {
  Stop();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(plugin_dir_, ec)) fs::remove_all(e.path(), ec);
  return Start();
}

std::vector<v1beta1::RegisterRequest> FakeKubelet::registrations() {
  std::lock_guard<std::mutex> lock(mu_);
  return registrations_;
}

bool FakeKubelet::WaitRegistered(const std::string& resource, std::chrono::seconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return registered_.wait_for(lock, timeout, [&] {
    for (const auto& r : registrations_) {
      if (r.resource_name() == resource) return true;
    }
    return false;
  });
}

std::unique_ptr<v1beta1::DevicePlugin::Stub> FakeKubelet::Dial(const std::string& resource) {
  std::string endpoint;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& r : registrations_) {
      if (r.resource_name() == resource) endpoint = r.endpoint();
    }
  }
  if (endpoint.empty()) return nullptr;
  return v1beta1::DevicePlugin::NewStub(grpc::CreateChannel(
      "unix://" + plugin_dir_ + "/" + endpoint, grpc::InsecureChannelCredentials()));
}

void FakeKubelet::SetPods(std::vector<FakeContainer> containers) {
  std::lock_guard<std::mutex> lock(mu_);
  containers_ = std::move(containers);
}

}  // namespace gpuslice::kubernetes::testing

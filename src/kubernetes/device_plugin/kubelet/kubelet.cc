#include "kubernetes/device_plugin/kubelet/kubelet.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>

#include "kubernetes/device_plugin/base/grpc_status.h"
#include "kubernetes/proto/deviceplugin_v1beta1.grpc.pb.h"
#include "kubernetes/proto/podresources_v1.grpc.pb.h"

namespace gpuslice::kubernetes {

namespace {

std::shared_ptr<grpc::Channel> UnixChannel(const std::string& path) {
  return grpc::CreateChannel("unix://" + path, grpc::InsecureChannelCredentials());
}

}  // namespace

core::Status RegisterWithKubelet(const std::string& kubelet_socket, const Resource& resource,
                                 const std::string& endpoint, std::chrono::milliseconds timeout) {
  auto stub = v1beta1::Registration::NewStub(UnixChannel(kubelet_socket));
  v1beta1::RegisterRequest req;
  req.set_version("v1beta1");
  req.set_endpoint(endpoint);
  req.set_resource_name(resource.Name());
  req.mutable_options()->set_get_preferred_allocation_available(true);
  v1beta1::Empty reply;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  // Waits for the kubelet's socket to accept rather than failing at once
  // while it starts.
  ctx.set_wait_for_ready(true);
  return FromGrpc(stub->Register(&ctx, req, &reply), "kubelet Register at " + kubelet_socket);
}

class GrpcPodResources::Stub {
 public:
  explicit Stub(const std::string& socket)
      : stub(v1::PodResourcesLister::NewStub(UnixChannel(socket))) {}
  std::unique_ptr<v1::PodResourcesLister::Stub> stub;
};

GrpcPodResources::GrpcPodResources(std::string socket) : socket_(std::move(socket)) {}
GrpcPodResources::~GrpcPodResources() = default;

uint64_t GrpcPodResources::Generation() {
  struct stat st {};
  if (stat(socket_.c_str(), &st) != 0) return 0;
  const uint64_t g = static_cast<uint64_t>(st.st_ino) * 1000003u ^
                     (static_cast<uint64_t>(st.st_ctim.tv_sec) * 1000000000u +
                      static_cast<uint64_t>(st.st_ctim.tv_nsec));
  return g == 0 ? 1 : g;
}

core::Result<std::vector<ContainerHolding>> GrpcPodResources::List() {
  if (stub_ == nullptr) stub_ = std::make_unique<Stub>(socket_);
  v1::ListPodResourcesRequest req;
  v1::ListPodResourcesResponse reply;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  core::Status s =
      FromGrpc(stub_->stub->List(&ctx, req, &reply), "kubelet PodResources List at " + socket_);
  if (!s.ok()) {
    stub_.reset();  // A fresh channel next time.
    return s;
  }
  std::vector<ContainerHolding> out;
  for (const v1::PodResources& pod : reply.pod_resources()) {
    for (const v1::ContainerResources& c : pod.containers()) {
      ContainerHolding h;
      h.key = {pod.namespace_(), pod.name(), c.name()};
      for (const v1::ContainerDevices& d : c.devices()) {
        if (d.resource_name().rfind(kResourceDomain, 0) != 0) continue;
        auto& ids = h.ids[d.resource_name()];
        ids.insert(ids.end(), d.device_ids().begin(), d.device_ids().end());
      }
      if (!h.ids.empty()) out.push_back(std::move(h));
    }
  }
  return out;
}

}  // namespace gpuslice::kubernetes

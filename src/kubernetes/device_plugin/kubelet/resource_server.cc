#include "kubernetes/device_plugin/kubelet/resource_server.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <cstdio>

#include "kubernetes/device_plugin/base/grpc_status.h"
#include "kubernetes/device_plugin/base/log.h"
#include "kubernetes/device_plugin/kubelet/preferred.h"
#include "kubernetes/proto/deviceplugin_v1beta1.grpc.pb.h"

namespace gpuslice::kubernetes {

namespace {

constexpr char kHealthy[] = "Healthy";
constexpr char kUnhealthy[] = "Unhealthy";

std::vector<std::string> Strings(const google::protobuf::RepeatedPtrField<std::string>& in) {
  return std::vector<std::string>(in.begin(), in.end());
}

void FillResponse(const ContainerAnswer& a, v1beta1::ContainerAllocateResponse* out) {
  for (const std::string& name : a.cdi_devices) out->add_cdi_devices()->set_name(name);
  for (const auto& [k, v] : a.envs) (*out->mutable_envs())[k] = v;
  for (const ContainerEdits::Mount& m : a.mounts) {
    v1beta1::Mount* pm = out->add_mounts();
    pm->set_host_path(m.host_path);
    pm->set_container_path(m.container_path);
    pm->set_read_only(m.read_only);
  }
  for (const std::string& node : a.device_nodes) {
    v1beta1::DeviceSpec* d = out->add_devices();
    d->set_host_path(node);
    d->set_container_path(node);
    d->set_permissions("rw");  // CUDA opens its device nodes read-write.
  }
}

}  // namespace

std::string SocketName(const Resource& resource) {
  return "gpuslice-" + resource.ShortName() + ".sock";
}

class ResourceServer::Service final : public v1beta1::DevicePlugin::Service {
 public:
  Service(const Resource& resource, const ServerDeps& deps, const std::atomic<bool>& stopping)
      : resource_(resource), deps_(deps), stopping_(stopping) {}

  grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                      v1beta1::DevicePluginOptions* out) override {
    out->set_pre_start_required(false);
    out->set_get_preferred_allocation_available(true);
    return grpc::Status::OK;
  }

  grpc::Status ListAndWatch(grpc::ServerContext* ctx, const v1beta1::Empty*,
                            grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) override {
    uint64_t seen = 0;
    // Woken by changes; the timeout only bounds how long a stop or a
    // cancelled stream waits to be noticed.
    while (!stopping_.load() && !ctx->IsCancelled()) {
      auto snap = deps_.table->WaitChange(resource_, seen, std::chrono::milliseconds(250));
      if (!snap) continue;
      seen = snap->generation;
      v1beta1::ListAndWatchResponse resp;
      size_t unhealthy = 0;
      for (const Device& d : snap->devices) {
        v1beta1::Device* pd = resp.add_devices();
        pd->set_id(d.id);
        pd->set_health(d.healthy ? kHealthy : kUnhealthy);
        if (!d.healthy) ++unhealthy;
      }
      if (!writer->Write(resp)) break;
      LogInfo(resource_.Name() + ": sent " + std::to_string(snap->devices.size()) + " devices (" +
              std::to_string(unhealthy) + " unhealthy)");
    }
    return grpc::Status::OK;
  }

  grpc::Status GetPreferredAllocation(grpc::ServerContext*,
                                      const v1beta1::PreferredAllocationRequest* req,
                                      v1beta1::PreferredAllocationResponse* out) override {
    // What the daemon holds now: the table's list is up to a poll interval
    // old, and a GPU given away since (whole, or its memory) must not look
    // free. The table's list when the daemon does not answer.
    Inventory inv = deps_.table->inventory();
    if (deps_.daemon != nullptr) {
      if (auto fresh = deps_.daemon->Gpus(); fresh.ok()) inv = std::move(*fresh);
    }
    for (const auto& c : req->container_requests()) {
      PreferenceRequest pr;
      pr.available = Strings(c.available_deviceids());
      pr.must_include = Strings(c.must_include_deviceids());
      pr.size = c.allocation_size();
      const std::vector<std::string> pairing =
          deps_.book->PairingGpus(resource_.kind, Clock::now(), deps_.pairing_window);
      auto ids = PreferredIds(resource_, inv, pr, pairing);
      if (!ids.ok()) return ToGrpc(ids.status());
      auto* r = out->add_container_responses();
      for (const std::string& id : *ids) r->add_deviceids(id);
      // Which GPU, and why: what the kubelet then allocates is this choice.
      LogInfo(resource_.Name() + ": preferred " + std::to_string(ids->size()) + " of " +
              std::to_string(pr.available.size()) + " offered" +
              (ids->empty() ? std::string() : ", first " + ids->front()) +
              (pairing.empty() ? std::string() : " (paired with " + pairing.front() + ")"));
    }
    return grpc::Status::OK;
  }

  grpc::Status Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* req,
                        v1beta1::AllocateResponse* out) override {
    std::vector<uint64_t> created;
    for (const auto& c : req->container_requests()) {
      const auto start = Clock::now();
      auto answer = deps_.allocator->Allocate(resource_, Strings(c.devices_ids()));
      const auto ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
      if (!answer.ok()) {
        // All or nothing: the kubelet fails the pod's admission with this.
        for (uint64_t job : created) {
          (void)deps_.daemon->Cancel(job);
          deps_.book->Remove(job);
        }
        LogWarn(resource_.Name() + ": Allocate refused: " + answer.status().message());
        return ToGrpc(answer.status());
      }
      if (answer->job != 0) {
        created.push_back(answer->job);
        char took[32];
        snprintf(took, sizeof took, " (%.1f ms)", ms);
        LogInfo(resource_.Name() + ": Allocate " + std::to_string(c.devices_ids_size()) +
                " IDs -> job " + std::to_string(answer->job) + took);
      }
      FillResponse(*answer, out->add_container_responses());
    }
    if (deps_.after_allocate) deps_.after_allocate();
    return grpc::Status::OK;
  }

  grpc::Status PreStartContainer(grpc::ServerContext*, const v1beta1::PreStartContainerRequest*,
                                 v1beta1::PreStartContainerResponse*) override {
    return grpc::Status::OK;  // Not asked for (pre_start_required false).
  }

 private:
  const Resource resource_;
  const ServerDeps deps_;
  const std::atomic<bool>& stopping_;
};

ResourceServer::ResourceServer(Resource resource, ServerDeps deps)
    : resource_(std::move(resource)), deps_(std::move(deps)) {}

ResourceServer::~ResourceServer() { Stop(); }

core::Status ResourceServer::Start(const std::string& socket_path) {
  Stop();
  stopping_ = false;
  socket_path_ = socket_path;
  unlink(socket_path_.c_str());  // A stale socket of an earlier run.
  service_ = std::make_unique<Service>(resource_, deps_, stopping_);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("unix://" + socket_path_, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr) {
    service_.reset();
    return core::UnavailableError(resource_.Name() + ": cannot serve on " + socket_path_);
  }
  return core::Status::Ok();
}

void ResourceServer::Stop() {
  if (server_ == nullptr) return;
  stopping_ = true;
  // Streams notice `stopping_` within their wait; the deadline cancels any
  // call still running after it.
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_->Wait();
  server_.reset();
  service_.reset();
  unlink(socket_path_.c_str());
}

}  // namespace gpuslice::kubernetes

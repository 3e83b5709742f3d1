#pragma once

// The device plugin's view of gpusliced: the few calls it makes, as an
// interface so that the plugin's logic is tested against a fake, and one
// implementation over the daemon's HTTP/JSON API on its unix socket (the
// client library, src/client/client.h). The daemon API is docs/API.md plus the
// external jobs (mode "external", labels, paused).
//
// Errors: kUnavailable when the daemon cannot be reached; otherwise the
// daemon's own code and message (e.g. kFailedPrecondition "... does not
// fit"), which the plugin hands on to the kubelet.

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "kubernetes/device_plugin/base/devices.h"

namespace gpuslice::client {
class Client;
}

namespace gpuslice::kubernetes {

using Labels = std::map<std::string, std::string>;

// An external job to create: exactly one of gpus (a count), mem (bytes) and
// mig (a profile), held to `gpu_uuids`.
struct ExternalJobSpec {
  uint32_t gpus = 0;
  uint64_t mem_bytes = 0;
  std::string mig;
  std::vector<std::string> gpu_uuids;
  std::string name;
  Labels labels;
  bool paused = false;
};

// A job as the plugin needs to know it.
struct JobInfo {
  uint64_t id = 0;
  std::string state;  // "running", "exited", ...
  std::string mode;   // "external" for the plugin's jobs.
  Labels labels;
  bool paused = false;
  uint32_t compute_milli = 0;  // The slice's compute share; 0: none.
  std::vector<std::string> gpu_uuids;
};

// What a container joining a job's slice gets (GET /v1/jobs/{id}/container).
struct ContainerEdits {
  std::string cdi_device;  // "gpuslice.dev/slice=12"
  std::vector<std::string> device_nodes;
  struct Mount {
    std::string host_path;
    std::string container_path;
    bool read_only = false;
  };
  std::vector<Mount> mounts;
  std::vector<std::string> env;  // "K=V"
};

class DaemonClient {
 public:
  virtual ~DaemonClient() = default;
  virtual core::Result<Inventory> Gpus() = 0;
  // Live jobs (GET /v1/jobs).
  virtual core::Result<std::vector<JobInfo>> Jobs() = 0;
  virtual core::Result<JobInfo> CreateJob(const ExternalJobSpec& spec) = 0;
  virtual core::Result<ContainerEdits> Container(uint64_t job) = 0;
  // Replaces the job's labels.
  virtual core::Status SetLabels(uint64_t job, const Labels& labels) = 0;
  virtual core::Status ResizeCompute(uint64_t job, uint32_t compute_milli) = 0;
  // "low" | "normal" | "high" (resize with "priority"): live.
  virtual core::Status SetPriority(uint64_t job, const std::string& priority) = 0;
  virtual core::Status Resume(uint64_t job) = 0;
  // Releases an external job.
  virtual core::Status Cancel(uint64_t job) = 0;
};

// The daemon's JSON, both ways (pure; tested without a daemon).
nlohmann::json ExternalJobJson(const ExternalJobSpec& spec);
core::Result<JobInfo> JobFromJson(const nlohmann::json& j);
core::Result<ContainerEdits> ContainerFromJson(const nlohmann::json& j);

// Over the daemon's unix socket. One connection, kept alive; thread-safe
// (calls are serialised on it: give each thread that must not wait behind
// another its own instance).
class HttpDaemonClient final : public DaemonClient {
 public:
  explicit HttpDaemonClient(std::string socket_path);
  ~HttpDaemonClient() override;

  core::Result<Inventory> Gpus() override;
  core::Result<std::vector<JobInfo>> Jobs() override;
  core::Result<JobInfo> CreateJob(const ExternalJobSpec& spec) override;
  core::Result<ContainerEdits> Container(uint64_t job) override;
  core::Status SetLabels(uint64_t job, const Labels& labels) override;
  core::Status ResizeCompute(uint64_t job, uint32_t compute_milli) override;
  core::Status SetPriority(uint64_t job, const std::string& priority) override;
  core::Status Resume(uint64_t job) override;
  core::Status Cancel(uint64_t job) override;

 private:
  core::Result<nlohmann::json> Call(const std::string& method, const std::string& target,
                                    const nlohmann::json* body = nullptr);

  std::mutex mu_;
  std::unique_ptr<client::Client> client_;  // Guarded by mu_.
};

}  // namespace gpuslice::kubernetes

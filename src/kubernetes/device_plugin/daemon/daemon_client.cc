#include "kubernetes/device_plugin/daemon/daemon_client.h"

#include <utility>

#include "client/client.h"
#include "core/units.h"

namespace gpuslice::kubernetes {

using nlohmann::json;

json ExternalJobJson(const ExternalJobSpec& spec) {
  json j = {{"mode", "external"}};
  if (spec.gpus > 0) {
    j["gpus"] = std::to_string(spec.gpus);
  } else if (!spec.mig.empty()) {
    j["mig"] = spec.mig;
  } else {
    // Whole GiB in the plugin's use, but bytes are exact whatever they are.
    j["mem"] = spec.mem_bytes % kGiB == 0 ? std::to_string(spec.mem_bytes / kGiB) + "GiB"
                                          : std::to_string(spec.mem_bytes) + "B";
  }
  if (!spec.gpu_uuids.empty()) j["gpu_uuids"] = spec.gpu_uuids;
  if (!spec.name.empty()) j["name"] = spec.name;
  if (!spec.labels.empty()) j["labels"] = spec.labels;
  if (spec.paused) j["paused"] = true;
  return j;
}

core::Result<JobInfo> JobFromJson(const json& j) {
  if (!j.is_object() || !j.contains("id") || !j["id"].is_number_unsigned()) {
    return core::InternalError("gpusliced sent a job without an id");
  }
  JobInfo job;
  job.id = j["id"].get<uint64_t>();
  job.state = j.value("state", std::string());
  job.mode = j.value("mode", std::string());
  if (j.contains("labels") && j["labels"].is_object()) {
    for (const auto& [k, v] : j["labels"].items()) {
      if (v.is_string()) job.labels[k] = v.get<std::string>();
    }
  }
  if (j.contains("flags") && j["flags"].is_array()) {
    for (const json& f : j["flags"]) {
      if (f.is_string() && f.get<std::string>() == "paused") job.paused = true;
    }
  }
  if (j.contains("allocation") && j["allocation"].is_object()) {
    const json& a = j["allocation"];
    job.compute_milli = a.value("compute_milli", 0u);
    if (a.contains("gpu_uuids") && a["gpu_uuids"].is_array()) {
      for (const json& u : a["gpu_uuids"]) {
        if (u.is_string()) job.gpu_uuids.push_back(u.get<std::string>());
      }
    }
  }
  return job;
}

core::Result<ContainerEdits> ContainerFromJson(const json& j) {
  if (!j.is_object() || !j.contains("cdi_device") || !j["cdi_device"].is_string()) {
    return core::InternalError("gpusliced sent a container answer without cdi_device");
  }
  ContainerEdits c;
  c.cdi_device = j["cdi_device"].get<std::string>();
  if (j.contains("device_nodes") && j["device_nodes"].is_array()) {
    for (const json& n : j["device_nodes"]) {
      if (n.is_string()) c.device_nodes.push_back(n.get<std::string>());
    }
  }
  if (j.contains("mounts") && j["mounts"].is_array()) {
    for (const json& m : j["mounts"]) {
      if (!m.is_object()) continue;
      c.mounts.push_back({m.value("host_path", std::string()),
                          m.value("container_path", std::string()), m.value("read_only", false)});
    }
  }
  if (j.contains("env") && j["env"].is_array()) {
    for (const json& e : j["env"]) {
      if (e.is_string()) c.env.push_back(e.get<std::string>());
    }
  }
  return c;
}

HttpDaemonClient::HttpDaemonClient(std::string socket_path)
    : client_(std::make_unique<client::Client>(std::move(socket_path))) {}

HttpDaemonClient::~HttpDaemonClient() = default;

core::Result<json> HttpDaemonClient::Call(const std::string& method, const std::string& target,
                                          const json* body) {
  std::lock_guard<std::mutex> lock(mu_);
  return client_->Call(method, target, body);
}

core::Result<Inventory> HttpDaemonClient::Gpus() {
  GPUSLICE_ASSIGN_OR_RETURN(json reply, Call("GET", "/v1/gpus"));
  return InventoryFromJson(reply);
}

core::Result<std::vector<JobInfo>> HttpDaemonClient::Jobs() {
  // Every live job, not the first page (docs/API.md: limit=0).
  GPUSLICE_ASSIGN_OR_RETURN(json reply, Call("GET", "/v1/jobs?limit=0"));
  if (!reply.contains("jobs") || !reply["jobs"].is_array()) {
    return core::InternalError("GET /v1/jobs: no 'jobs' list in the daemon's reply");
  }
  std::vector<JobInfo> out;
  for (const json& j : reply["jobs"]) {
    GPUSLICE_ASSIGN_OR_RETURN(JobInfo job, JobFromJson(j));
    out.push_back(std::move(job));
  }
  return out;
}

core::Result<JobInfo> HttpDaemonClient::CreateJob(const ExternalJobSpec& spec) {
  json body = ExternalJobJson(spec);
  GPUSLICE_ASSIGN_OR_RETURN(json reply, Call("POST", "/v1/jobs", &body));
  return JobFromJson(reply);
}

core::Result<ContainerEdits> HttpDaemonClient::Container(uint64_t job) {
  GPUSLICE_ASSIGN_OR_RETURN(json reply,
                            Call("GET", "/v1/jobs/" + std::to_string(job) + "/container"));
  return ContainerFromJson(reply);
}

core::Status HttpDaemonClient::SetLabels(uint64_t job, const Labels& labels) {
  json body = {{"labels", labels}};
  return Call("POST", "/v1/jobs/" + std::to_string(job) + "/labels", &body).status();
}

core::Status HttpDaemonClient::ResizeCompute(uint64_t job, uint32_t compute_milli) {
  json body = {{"compute", core::FormatShareMilli(compute_milli)}};
  return Call("POST", "/v1/jobs/" + std::to_string(job) + "/resize", &body).status();
}

core::Status HttpDaemonClient::SetPriority(uint64_t job, const std::string& priority) {
  json body = {{"priority", priority}};
  return Call("POST", "/v1/jobs/" + std::to_string(job) + "/resize", &body).status();
}

core::Status HttpDaemonClient::Resume(uint64_t job) {
  return Call("POST", "/v1/jobs/" + std::to_string(job) + "/resume").status();
}

core::Status HttpDaemonClient::Cancel(uint64_t job) {
  return Call("POST", "/v1/jobs/" + std::to_string(job) + "/cancel").status();
}

}  // namespace gpuslice::kubernetes

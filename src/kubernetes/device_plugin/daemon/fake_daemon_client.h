#pragma once

// A DaemonClient for tests: jobs in memory, every call recorded, refusals on
// demand. Not thread-safe (tests drive it from one thread).

#include <string>
#include <vector>

#include "kubernetes/device_plugin/daemon/daemon_client.h"

namespace gpuslice::kubernetes {

class FakeDaemonClient final : public DaemonClient {
 public:
  Inventory inventory;
  std::vector<JobInfo> jobs;  // Live jobs.
  std::vector<ExternalJobSpec> created;
  std::vector<std::string> calls;  // "create 1", "cancel 1", "resize 1 300", ...
  core::Status refuse_create;      // Returned by CreateJob when set.
  core::Status refuse_container;   // Returned by Container when set.
  core::Status refuse_resize;      // Returned by ResizeCompute when set.
  core::Status refuse_jobs;        // Returned by Jobs (and Gpus) when set.
  uint64_t next_id = 1;

  core::Result<Inventory> Gpus() override {
    if (!refuse_jobs.ok()) return refuse_jobs;
    return inventory;
  }
  core::Result<std::vector<JobInfo>> Jobs() override {
    if (!refuse_jobs.ok()) return refuse_jobs;
    return jobs;
  }

  core::Result<JobInfo> CreateJob(const ExternalJobSpec& spec) override {
    if (!refuse_create.ok()) return refuse_create;
    JobInfo j;
    j.id = next_id++;
    j.state = "running";
    j.mode = "external";
    j.labels = spec.labels;
    j.paused = spec.paused;
    j.gpu_uuids = spec.gpu_uuids;
    jobs.push_back(j);
    created.push_back(spec);
    calls.push_back("create " + std::to_string(j.id));
    return j;
  }

  core::Result<ContainerEdits> Container(uint64_t job) override {
    if (!refuse_container.ok()) return refuse_container;
    if (Find(job) == nullptr) return core::NotFoundError("no job " + std::to_string(job));
    ContainerEdits c;
    c.cdi_device = "gpuslice.dev/slice=" + std::to_string(job);
    c.device_nodes = {"/dev/nvidia0", "/dev/nvidiactl"};
    c.mounts = {{"/host/libgpuslice.so", "/usr/lib/gpuslice/libgpuslice.so", true}};
    c.env = {"GPUSLICE_JOB_ID=" + std::to_string(job),
             "LD_PRELOAD=/usr/lib/gpuslice/libgpuslice.so"};
    return c;
  }

  core::Status SetLabels(uint64_t job, const Labels& labels) override {
    JobInfo* j = Find(job);
    if (j == nullptr) return core::NotFoundError("no job " + std::to_string(job));
    j->labels = labels;
    calls.push_back("labels " + std::to_string(job));
    return core::Status::Ok();
  }

  core::Status ResizeCompute(uint64_t job, uint32_t milli) override {
    if (!refuse_resize.ok()) return refuse_resize;
    JobInfo* j = Find(job);
    if (j == nullptr) return core::NotFoundError("no job " + std::to_string(job));
    j->compute_milli = milli;
    calls.push_back("resize " + std::to_string(job) + " " + std::to_string(milli));
    return core::Status::Ok();
  }

  core::Status SetPriority(uint64_t job, const std::string& priority) override {
    JobInfo* j = Find(job);
    if (j == nullptr) return core::NotFoundError("no job " + std::to_string(job));
    calls.push_back("priority " + std::to_string(job) + " " + priority);
    return core::Status::Ok();
  }

  core::Status Resume(uint64_t job) override {
    JobInfo* j = Find(job);
    if (j == nullptr) return core::NotFoundError("no job " + std::to_string(job));
    j->paused = false;
    calls.push_back("resume " + std::to_string(job));
    return core::Status::Ok();
  }

  core::Status Cancel(uint64_t job) override {
    JobInfo* j = Find(job);
    if (j == nullptr) return core::NotFoundError("no job " + std::to_string(job));
    std::erase_if(jobs, [&](const JobInfo& x) { return x.id == job; });
    calls.push_back("cancel " + std::to_string(job));
    return core::Status::Ok();
  }

  JobInfo* Find(uint64_t id) {
    for (JobInfo& j : jobs) {
      if (j.id == id) return &j;
    }
    return nullptr;
  }
};

}  // namespace gpuslice::kubernetes

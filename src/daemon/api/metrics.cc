#include "daemon/api/metrics.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <map>

#include "core/units.h"
#include "daemon/api/metrics_text.h"

namespace gpuslice::daemon {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;
// MIG compute slices of a whole GPU (A100/H100/H200 all have 7).
constexpr double kMigSlicesPerGpu = 7.0;

// Family names, also listed by MetricFamilyNames(). dcgm-exporter's names
// are kept exactly (docs/MONITORING.md says where the types differ).
constexpr char kGpuUtil[] = "DCGM_FI_DEV_GPU_UTIL";
constexpr char kMemCopyUtil[] = "DCGM_FI_DEV_MEM_COPY_UTIL";
constexpr char kGrEngineActive[] = "DCGM_FI_PROF_GR_ENGINE_ACTIVE";
constexpr char kFbUsed[] = "DCGM_FI_DEV_FB_USED";
constexpr char kFbFree[] = "DCGM_FI_DEV_FB_FREE";
constexpr char kFbTotal[] = "DCGM_FI_DEV_FB_TOTAL";
constexpr char kGpuTemp[] = "DCGM_FI_DEV_GPU_TEMP";
constexpr char kPowerUsage[] = "DCGM_FI_DEV_POWER_USAGE";
constexpr char kXidLast[] = "DCGM_FI_DEV_XID_ERRORS";
constexpr char kEccSbe[] = "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL";
constexpr char kEccDbe[] = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL";
constexpr char kXidTotal[] = "gpuslice_gpu_xid_errors_total";
constexpr char kGpuInfo[] = "gpuslice_gpu_info";
constexpr char kGpuSimulated[] = "gpuslice_gpu_simulated";
constexpr char kGpuMemAllocBytes[] = "gpuslice_gpu_memory_allocated_bytes";
constexpr char kGpuMemAllocRatio[] = "gpuslice_gpu_memory_allocated_ratio";
constexpr char kGpuComputeAllocRatio[] = "gpuslice_gpu_compute_allocated_ratio";
constexpr char kGpuSlices[] = "gpuslice_gpu_slices";
constexpr char kGpuForeignMem[] = "gpuslice_gpu_foreign_memory_bytes";
constexpr char kGpuForeignProcs[] = "gpuslice_foreign_processes";
constexpr char kJobInfo[] = "gpuslice_job_info";
constexpr char kJobStart[] = "gpuslice_job_start_time_seconds";
constexpr char kJobMemUsed[] = "gpuslice_job_memory_used_bytes";
constexpr char kJobMemLimit[] = "gpuslice_job_memory_limit_bytes";
constexpr char kJobMemPeak[] = "gpuslice_job_memory_peak_bytes";
constexpr char kJobNvmlMem[] = "gpuslice_job_nvml_memory_bytes";
constexpr char kJobShareTarget[] = "gpuslice_job_compute_share_target_ratio";
constexpr char kJobShareAchieved[] = "gpuslice_job_compute_share_achieved_ratio";
constexpr char kJobGpuUtil[] = "gpuslice_job_gpu_utilization_percent";
constexpr char kJobRefused[] = "gpuslice_job_refused_allocations_total";
constexpr char kJobThrottled[] = "gpuslice_job_throttled_seconds_total";
constexpr char kJobIdle[] = "gpuslice_job_idle";
constexpr char kJobLowUse[] = "gpuslice_job_low_use_seconds";
constexpr char kJobIdleTotal[] = "gpuslice_job_idle_seconds_total";
constexpr char kJobPaused[] = "gpuslice_job_launches_paused";
constexpr char kQueueLength[] = "gpuslice_queue_length";
constexpr char kQueuedByUser[] = "gpuslice_queue_length_by_user";
constexpr char kJobsSuspended[] = "gpuslice_jobs_suspended";
constexpr char kJobSuspended[] = "gpuslice_job_suspended_seconds";
constexpr char kQuotaLimit[] = "gpuslice_quota_limit";
constexpr char kQuotaUsed[] = "gpuslice_quota_used";
constexpr char kQueueWait[] = "gpuslice_queue_wait_seconds";
constexpr char kJobsRunning[] = "gpuslice_jobs_running";
constexpr char kEvents[] = "gpuslice_events_total";
constexpr char kUp[] = "gpuslice_daemon_up";
constexpr char kDegraded[] = "gpuslice_daemon_degraded";
constexpr char kStartTime[] = "gpuslice_daemon_start_time_seconds";
constexpr char kBuildInfo[] = "gpuslice_build_info";

std::string Hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) {
    if (!out.empty()) out += ',';
    out += p;
  }
  return out;
}

// The labels every series of one GPU carries, as dcgm-exporter names them,
// except modelName: promtool's lint refuses camelCase label names, so the
// exposition says model_name and deploy/prometheus/prometheus.yml copies it
// to modelName at scrape time (docs/MONITORING.md).
// The GPU's pool follows dcgm-exporter's labels (added, so queries written
// for dcgm-exporter's set keep matching).
MetricLabels GpuLabels(const GpuInfo& g, const std::string& host, const std::string& pool) {
  return {{"gpu", std::to_string(g.index)},
          {"UUID", g.uuid},
          {"device", "nvidia" + std::to_string(g.index)},
          {"model_name", g.model},
          {"Hostname", host},
          {"pool", pool}};
}

// What a running job holds of each GPU it is on.
struct Held {
  uint64_t memory_bytes = 0;
  double compute = 0;  // Share of the GPU's time, 0-1.
};
Held HeldPerGpu(const core::Job& job, uint64_t gpu_memory_total) {
  const core::ResourceRequest& r = job.request;
  switch (r.kind) {
    case core::RequestKind::kWholeGpus:
      return {gpu_memory_total, 1.0};
    case core::RequestKind::kMig:
      return {job.allocation.memory_bytes_per_gpu, double(r.mig.compute_slices) / kMigSlicesPerGpu};
    case core::RequestKind::kFraction:
      return {job.allocation.memory_bytes_per_gpu, job.allocation.compute_milli / 1000.0};
  }
  return {};
}

struct GpuTotals {
  uint64_t memory_bytes = 0;
  double compute = 0;
  uint64_t slices = 0;
};

void RenderGpus(MetricsText& t, Service& service, const InventorySnapshot& inv,
                const std::vector<GpuUsage>& usage, const std::vector<GpuTotals>& totals,
                const std::vector<ForeignProcess>& foreign, const std::string& host) {
  std::vector<MetricLabels> labels;
  for (const GpuInfo& g : inv.gpus)
    labels.push_back(GpuLabels(g, host, service.pools().PoolOf(g.index)));
  // usage().gpus() is in the order of inventory().gpus; it is empty before
  // the first sample (and stays so when NVML cannot be read).
  const bool have_usage = usage.size() == inv.gpus.size();
  auto per_gpu = [&](const char* name, MetricType type, const char* help, auto value_of,
                     auto known) {
    t.Family(name, type, help);
    if (!have_usage) return;
    for (size_t i = 0; i < inv.gpus.size(); ++i) {
      if (known(usage[i])) t.Sample(labels[i], value_of(usage[i], inv.gpus[i]));
    }
  };
  auto always = [](const GpuUsage&) { return true; };
  // A GPU in MIG mode without GPM has no utilisation figure: no sample,
  // never a 0 that reads as idle (and gets the job reclaimed).
  per_gpu(
      kGpuUtil, MetricType::kGauge, "GPU utilization (in %).",
      [](const GpuUsage& u, const GpuInfo&) { return double(u.utilization_pct); },
      [](const GpuUsage& u) { return u.utilization_known; });
  // As dcgm-exporter on MIG GPUs: the graphics engine's activity of the GPU
  // and of each GPU instance (labels GPU_I_PROFILE, GPU_I_ID), from NVML's
  // GPM; instances without a figure have no sample.
  t.Family(kGrEngineActive, MetricType::kGauge,
           "Ratio of time the graphics engine is active (0-1; per GPU instance on MIG GPUs).");
  if (have_usage) {
    for (size_t i = 0; i < inv.gpus.size(); ++i) {
      if (usage[i].utilization_known) t.Sample(labels[i], usage[i].utilization_pct / 100.0);
      for (const MigInstance& mi : inv.gpus[i].mig) {
        const MigUsage* m = MigUsageOf(usage[i], mi.gpu_instance_id);
        if (m == nullptr || !m->known()) continue;
        MetricLabels l = labels[i];
        l.emplace_back("GPU_I_PROFILE", mi.profile);
        l.emplace_back("GPU_I_ID", std::to_string(mi.gpu_instance_id));
        t.Sample(l, m->utilization_pct / 100.0);
      }
    }
  }
  per_gpu(
      kMemCopyUtil, MetricType::kGauge, "Memory utilization (in %).",
      [](const GpuUsage& u, const GpuInfo&) { return double(u.memory_util_pct); }, always);
  auto total_of = [](const GpuUsage& u, const GpuInfo& g) {
    return u.memory_total > 0 ? u.memory_total : g.memory_total;
  };
  per_gpu(
      kFbUsed, MetricType::kGauge, "Framebuffer memory used (in MiB).",
      [](const GpuUsage& u, const GpuInfo&) { return double(u.memory_used / uint64_t(kMiB)); },
      always);
  per_gpu(
      kFbFree, MetricType::kGauge, "Framebuffer memory free (in MiB).",
      [&](const GpuUsage& u, const GpuInfo& g) {
        const uint64_t total = total_of(u, g);
        return double((total > u.memory_used ? total - u.memory_used : 0) / uint64_t(kMiB));
      },
      always);
  per_gpu(
      kFbTotal, MetricType::kGauge, "Framebuffer memory total (in MiB).",
      [&](const GpuUsage& u, const GpuInfo& g) { return double(total_of(u, g) / uint64_t(kMiB)); },
      always);
  per_gpu(
      kGpuTemp, MetricType::kGauge, "GPU temperature (in C).",
      [](const GpuUsage& u, const GpuInfo&) { return double(u.temperature_c); },
      [](const GpuUsage& u) { return u.temperature_c >= 0; });
  per_gpu(
      kPowerUsage, MetricType::kGauge, "Power draw (in W).",
      [](const GpuUsage& u, const GpuInfo&) { return u.power_mw / 1000.0; },
      [](const GpuUsage& u) { return u.power_mw > 0; });
  per_gpu(
      kXidLast, MetricType::kGauge, "Value of the last XID error encountered (0: none yet).",
      [](const GpuUsage& u, const GpuInfo&) { return double(u.last_xid); },
      [](const GpuUsage& u) { return u.xid_watched; });
  // dcgm-exporter's names end in an uppercase _TOTAL; typed gauge, because
  // promtool's lint wants counters to end in a lowercase _total. They only
  // grow (until the driver reloads): use increase() as on a counter.
  per_gpu(
      kEccSbe, MetricType::kGauge, "Total number of single-bit volatile ECC errors.",
      [](const GpuUsage& u, const GpuInfo&) { return double(u.ecc_corrected); },
      [](const GpuUsage& u) { return u.ecc_corrected >= 0; });
  per_gpu(
      kEccDbe, MetricType::kGauge, "Total number of double-bit volatile ECC errors.",
      [](const GpuUsage& u, const GpuInfo&) { return double(u.ecc_uncorrected); },
      [](const GpuUsage& u) { return u.ecc_uncorrected >= 0; });
  per_gpu(
      kXidTotal, MetricType::kCounter,
      "XID errors the GPU reported since the daemon started watching (NVML events).",
      [](const GpuUsage& u, const GpuInfo&) { return double(u.xid_errors); },
      [](const GpuUsage& u) { return u.xid_watched; });

  t.Family(kGpuInfo, MetricType::kGauge,
           "Always 1 per GPU; its labels describe the GPU (PCI bus id, MIG mode, link).");
  for (size_t i = 0; i < inv.gpus.size(); ++i) {
    MetricLabels l = labels[i];
    l.emplace_back("pci_bus_id", inv.gpus[i].pci_bus_id);
    l.emplace_back("mig", inv.gpus[i].mig_enabled ? "enabled" : "disabled");
    l.emplace_back("link", inv.gpus[i].link);
    t.Sample(l, 1.0);
  }
  t.Family(kGpuSimulated, MetricType::kGauge,
           "1 when the GPU is gpuslice's simulated device, 0 when it is real.");
  for (size_t i = 0; i < inv.gpus.size(); ++i) t.Sample(labels[i], inv.simulated() ? 1.0 : 0.0);

  t.Family(kGpuMemAllocBytes, MetricType::kGauge,
           "Memory of the GPU allocated to running jobs (slice limits; whole GPUs count whole).");
  for (size_t i = 0; i < inv.gpus.size(); ++i) t.Sample(labels[i], totals[i].memory_bytes);
  t.Family(kGpuMemAllocRatio, MetricType::kGauge,
           "Share of the GPU's memory allocated to running jobs (0-1).");
  for (size_t i = 0; i < inv.gpus.size(); ++i) {
    const uint64_t total = inv.gpus[i].memory_total;
    t.Sample(labels[i], total > 0 ? double(totals[i].memory_bytes) / double(total) : 0.0);
  }
  t.Family(kGpuComputeAllocRatio, MetricType::kGauge,
           "Compute share of the GPU allocated to running jobs (0-1; slices without a share "
           "count 0, whole GPUs 1, MIG instances their compute slices out of 7).");
  for (size_t i = 0; i < inv.gpus.size(); ++i) t.Sample(labels[i], totals[i].compute);
  t.Family(kGpuSlices, MetricType::kGauge, "Running jobs holding (part of) the GPU.");
  for (size_t i = 0; i < inv.gpus.size(); ++i) t.Sample(labels[i], totals[i].slices);

  // Foreign GPU use (docs/DAEMON.md, "Foreign GPU use"): every GPU has a
  // sample, 0 when nothing outside gpuslice runs there, so alerts can use
  // `> 0` without absent().
  std::vector<uint64_t> foreign_bytes(inv.gpus.size()), foreign_count(inv.gpus.size());
  for (const ForeignProcess& f : foreign) {
    for (size_t i = 0; i < inv.gpus.size(); ++i) {
      if (inv.gpus[i].index != f.gpu_index) continue;
      foreign_bytes[i] += f.used_memory;
      ++foreign_count[i];
    }
  }
  t.Family(kGpuForeignMem, MetricType::kGauge,
           "GPU memory held by processes that belong to no gpuslice job (NVML; bytes). "
           "Charged to the GPU in placement (in MIG mode: their instances are taken).");
  for (size_t i = 0; i < inv.gpus.size(); ++i) t.Sample(labels[i], foreign_bytes[i]);
  t.Family(kGpuForeignProcs, MetricType::kGauge,
           "Processes on the GPU that belong to no gpuslice job (NVML).");
  for (size_t i = 0; i < inv.gpus.size(); ++i) t.Sample(labels[i], foreign_count[i]);
}

// A job's series carry job_id, not job: Prometheus sets `job` on every
// scraped series (the scrape job) and renames an exposed `job` label to
// `exported_job`. A job on several GPUs lists them comma-separated.
MetricLabels JobLabels(const core::Job& job, const InventorySnapshot& inv, const std::string& host,
                       const std::string& default_pool) {
  std::vector<std::string> gpus, uuids;
  for (size_t k = 0; k < job.allocation.gpu_indices.size(); ++k) {
    gpus.push_back(std::to_string(job.allocation.gpu_indices[k]));
    // The GPU's UUID (a MIG job's allocation holds the instance's UUID).
    const uint32_t index = job.allocation.gpu_indices[k];
    uuids.push_back(index < inv.gpus.size()               ? inv.gpus[index].uuid
                    : k < job.allocation.gpu_uuids.size() ? job.allocation.gpu_uuids[k]
                                                          : "");
  }
  MetricLabels out = {{"job_id", std::to_string(job.id)},
                      {"name", job.request.name},
                      {"user", job.user},
                      {"priority", std::string(core::PriorityName(job.request.priority))},
                      {"gpu", Join(gpus)},
                      {"UUID", Join(uuids)},
                      {"Hostname", host},
                      {"pool", job.request.pool.empty() ? default_pool : job.request.pool}};
  // A Kubernetes container's slice (the device plugin labels it): the pod's
  // names under dcgm-exporter's label names, so a Prometheus Adapter rule
  // written for dcgm-exporter drives an HPA from these series unchanged.
  // A Slurm step's slice (the SPANK plugin labels it): its job and step id.
  for (const char* key : {"namespace", "pod", "container", "slurm_job", "slurm_step"}) {
    if (auto it = job.labels.find(key); it != job.labels.end()) out.emplace_back(key, it->second);
  }
  return out;
}

void RenderJobs(MetricsText& t, Service& service, const std::vector<JobView>& jobs,
                const InventorySnapshot& inv, const std::string& host) {
  std::vector<const JobView*> running;
  for (const JobView& v : jobs) {
    if (v.job.state == core::JobState::kRunning) running.push_back(&v);
  }
  const std::string& default_pool = service.options().rules.default_pool;
  std::vector<MetricLabels> labels;
  for (const JobView* v : running) labels.push_back(JobLabels(v->job, inv, host, default_pool));

  t.Family(kJobInfo, MetricType::kGauge,
           "Always 1 per running job; labels say who runs what where, and what it asked for.");
  for (size_t i = 0; i < running.size(); ++i) {
    MetricLabels l = labels[i];
    l.emplace_back("kind", std::string(core::RequestKindName(running[i]->job.request.kind)));
    l.emplace_back("request", running[i]->job.request.Describe());
    t.Sample(l, 1.0);
  }
  t.Family(kJobStart, MetricType::kGauge, "When the job started (Unix time, seconds).");
  for (size_t i = 0; i < running.size(); ++i) {
    t.Sample(labels[i], running[i]->job.started_ms / 1000.0);
  }
  t.Family(kJobShareTarget, MetricType::kGauge,
           "Compute share the job was given, per GPU (0-1; 0: no cap, whole GPUs 1).");
  for (size_t i = 0; i < running.size(); ++i) {
    t.Sample(labels[i], HeldPerGpu(running[i]->job, 0).compute);
  }
  t.Family(kJobPaused, MetricType::kGauge,
           "1 while idle reclaim holds the job's new kernel launches (until gpuslice resume), "
           "else 0.");
  for (size_t i = 0; i < running.size(); ++i) {
    const std::vector<std::string>& flags = running[i]->flags;
    t.Sample(labels[i], std::find(flags.begin(), flags.end(), "paused") != flags.end() ? 1.0 : 0.0);
  }

  // The usage families: running jobs that have been sampled.
  std::vector<std::pair<size_t, JobUsage>> sampled;
  for (size_t i = 0; i < running.size(); ++i) {
    std::optional<JobUsage> u = running[i]->usage;
    if (!u) u = service.usage().Of(running[i]->job.id);
    if (u) sampled.emplace_back(i, *u);
  }
  auto family = [&](const char* name, MetricType type, const char* help, auto value_of) {
    t.Family(name, type, help);
    for (const auto& [i, u] : sampled) t.Sample(labels[i], value_of(u));
  };
  // Utilisation only where NVML measured it (a MIG job on a GPU without GPM
  // has none: no sample rather than a 0 that reads as idle).
  auto measured = [&](const char* name, const char* help, auto value_of) {
    t.Family(name, MetricType::kGauge, help);
    for (const auto& [i, u] : sampled) {
      if (u.gpu_util_known) t.Sample(labels[i], value_of(u));
    }
  };
  family(kJobMemUsed, MetricType::kGauge,
         "Memory the shim charged to the job's slice, summed over its GPUs (bytes).",
         [](const JobUsage& u) { return u.memory_used_bytes; });
  family(kJobMemLimit, MetricType::kGauge, "The job's memory limit, summed over its GPUs (bytes).",
         [](const JobUsage& u) { return u.memory_limit_bytes; });
  family(kJobMemPeak, MetricType::kGauge, "High-water mark of the job's charged memory (bytes).",
         [](const JobUsage& u) { return u.memory_peak_bytes; });
  family(kJobNvmlMem, MetricType::kGauge,
         "Memory NVML says the job's processes hold, CUDA contexts included (bytes).",
         [](const JobUsage& u) { return u.nvml_memory_bytes; });
  measured(kJobShareAchieved,
           "Share of its GPUs' time the job's processes kept busy, averaged over its GPUs (0-1; "
           "a MIG job: its instances' activity).",
           [](const JobUsage& u) { return u.gpu_util_pct / 100.0; });
  measured(kJobGpuUtil,
           "The job's GPU utilization: its processes' SM use, averaged over its GPUs (in %; a MIG "
           "job: its instances' activity).",
           [](const JobUsage& u) { return u.gpu_util_pct; });
  family(kJobRefused, MetricType::kCounter,
         "Allocations the shim refused because the job's slice was at its memory limit.",
         [](const JobUsage& u) { return u.refused_allocs; });
  family(kJobThrottled, MetricType::kCounter,
         "Time the job's launches waited for their compute share (seconds).",
         [](const JobUsage& u) { return double(u.throttled_ns) / 1e9; });
  family(kJobIdle, MetricType::kGauge,
         "1 while the job's GPU use is below the daemon's idle threshold, else 0.",
         [](const JobUsage& u) { return u.low_use_ms > 0 ? 1.0 : 0.0; });
  family(kJobLowUse, MetricType::kGauge,
         "How long the job's GPU use has stayed below the idle threshold (seconds; 0 above).",
         [](const JobUsage& u) { return u.low_use_ms / 1000.0; });
  family(kJobIdleTotal, MetricType::kCounter,
         "Time the job spent below the idle threshold over its life (seconds).",
         [](const JobUsage& u) { return u.idle_ms_total / 1000.0; });

  // Suspended jobs hold no GPU (their GPU state is in host memory): one
  // series each, so a dashboard lists them and an alert finds the old ones.
  t.Family(kJobSuspended, MetricType::kGauge,
           "How long the suspended job has been suspended (seconds); one series per suspended "
           "job (gpuslice resume brings it back).");
  const int64_t now_ms = service.NowMs();
  for (const JobView& v : jobs) {
    if (v.job.state != core::JobState::kSuspended) continue;
    const int64_t since = v.job.suspended_since_ms;
    t.Sample(JobLabels(v.job, inv, host, default_pool),
             since > 0 && now_ms > since ? (now_ms - since) / 1000.0 : 0.0);
  }
}

void RenderScheduler(MetricsText& t, Service& service, const std::vector<JobView>& jobs) {
  std::array<uint64_t, 3> queued{};
  uint64_t running = 0, suspended = 0;
  // Queued jobs by owner and pool, from the job table: counting them needs
  // no view of each (there may be 10,000).
  std::map<std::pair<std::string, std::string>, uint64_t> by_user;
  const std::string& default_pool = service.options().rules.default_pool;
  service.table().ForEachLiveJob([&](const core::Job& job) {
    if (job.state != core::JobState::kQueued) return;
    const size_t p = size_t(job.request.priority);
    if (p < queued.size()) ++queued[p];
    ++by_user[{job.user, job.request.pool.empty() ? default_pool : job.request.pool}];
  });
  for (const JobView& v : jobs) {
    if (v.job.state == core::JobState::kRunning) ++running;
    if (v.job.state == core::JobState::kSuspended) ++suspended;
  }
  t.Family(kQueueLength, MetricType::kGauge, "Jobs waiting in the queue, by priority.");
  for (core::Priority p : {core::Priority::kLow, core::Priority::kNormal, core::Priority::kHigh}) {
    t.Sample({{"priority", std::string(core::PriorityName(p))}}, queued[size_t(p)]);
  }
  t.Family(kQueuedByUser, MetricType::kGauge,
           "Jobs waiting in the queue, by owner and pool (only pairs with jobs waiting).");
  for (const auto& [key, n] : by_user) t.Sample({{"user", key.first}, {"pool", key.second}}, n);
  t.Family(kJobsSuspended, MetricType::kGauge,
           "Jobs suspended now (their GPU state in host memory; they hold no GPU).");
  t.Sample({}, suspended);
  // Quotas: each limit and what its principal holds now, by resource.
  t.Family(kQuotaLimit, MetricType::kGauge,
           "A quota's limit by resource (memory in bytes, gpus, compute in GPUs, jobs); only "
           "the limits that are set.");
  const std::vector<QuotaView> quotas = service.quotas().Quotas();
  for (const QuotaView& q : quotas) {
    MetricLabels base = {{"scope", std::string(core::PrincipalKindName(q.who.kind))},
                         {"name", q.who.name}};
    auto limit = [&](const char* resource, double value) {
      MetricLabels l = base;
      l.emplace_back("resource", resource);
      t.Sample(l, value);
    };
    if (q.quota.memory_bytes) limit("memory_bytes", double(*q.quota.memory_bytes));
    if (q.quota.gpus) limit("gpus", *q.quota.gpus);
    if (q.quota.compute_milli) limit("compute", *q.quota.compute_milli / 1000.0);
    if (q.quota.jobs) limit("jobs", *q.quota.jobs);
  }
  t.Family(kQuotaUsed, MetricType::kGauge,
           "What a quota's principal holds now by resource (its running jobs; same units as "
           "gpuslice_quota_limit).");
  for (const QuotaView& q : quotas) {
    MetricLabels base = {{"scope", std::string(core::PrincipalKindName(q.who.kind))},
                         {"name", q.who.name}};
    auto used = [&](const char* resource, double value) {
      MetricLabels l = base;
      l.emplace_back("resource", resource);
      t.Sample(l, value);
    };
    used("memory_bytes", double(q.in_use.memory_bytes));
    used("gpus", q.in_use.gpus);
    used("compute", q.in_use.compute_milli / 1000.0);
    used("jobs", q.in_use.jobs);
  }
  const WaitHistogram& h = service.usage().queue_waits();
  t.Family(kQueueWait, MetricType::kHistogram,
           "Time started jobs waited in the queue, from submission to start (seconds).");
  t.Histogram({}, h.bounds_s, h.cumulative, h.count, h.sum_s);
  t.Family(kJobsRunning, MetricType::kGauge, "Jobs running now.");
  t.Sample({}, running);
  t.Family(kEvents, MetricType::kCounter,
           "Events by kind since the ledger was created (submitted, started, finished, "
           "preempted, idle_flagged, idle_action, ...).");
  for (const auto& [kind, count] : service.events().Counts()) t.Sample({{"kind", kind}}, count);
}

void RenderDaemon(MetricsText& t, Service& service, const MetricsOptions& options) {
  t.Family(kUp, MetricType::kGauge, "1 while the daemon answers (absent when it does not).");
  t.Sample({}, 1.0);
  t.Family(kDegraded, MetricType::kGauge,
           "1 while the daemon is degraded (serves reads, refuses new work; see gpuslice status).");
  t.Sample({}, service.degraded_mode().degraded() ? 1.0 : 0.0);
  t.Family(kStartTime, MetricType::kGauge, "When the daemon started (Unix time, seconds).");
  t.Sample({}, options.start_time_ms / 1000.0);
  t.Family(kBuildInfo, MetricType::kGauge, "Always 1; labels give the daemon's version.");
  t.Sample({{"version", options.version}, {"gpu_source", service.inventory().source}}, 1.0);
}

}  // namespace

std::string RenderMetrics(Service& service, const MetricsOptions& options) {
  const std::string host = options.hostname.empty() ? Hostname() : options.hostname;
  const InventorySnapshot& inv = service.inventory();
  // Running and suspended jobs with their views; queued ones are counted
  // from the job table (RenderScheduler).
  JobQuery holding;
  holding.states = {core::JobState::kRunning, core::JobState::kSuspended};
  holding.limit = 0;
  const std::vector<JobView> jobs = service.reads().Query(holding).jobs;
  std::vector<GpuTotals> totals(inv.gpus.size());
  for (const JobView& v : jobs) {
    if (v.job.state != core::JobState::kRunning) continue;
    for (uint32_t index : v.job.allocation.gpu_indices) {
      if (index >= totals.size()) continue;
      const Held held = HeldPerGpu(v.job, inv.gpus[index].memory_total);
      totals[index].memory_bytes += held.memory_bytes;
      totals[index].compute += held.compute;
      ++totals[index].slices;
    }
  }
  MetricsText t;
  RenderGpus(t, service, inv, service.usage().gpus(), totals, service.foreign().processes(), host);
  RenderJobs(t, service, jobs, inv, host);
  RenderScheduler(t, service, jobs);
  RenderDaemon(t, service, options);
  return t.Take();
}

void RegisterMetrics(Api& api, Service& service, MetricsOptions options) {
  api.AddRoute("GET", "/metrics", [&service, options](const ApiRequest&) {
    ApiResponse r;
    r.body = RenderMetrics(service, options);
    r.content_type = kMetricsContentType;
    return r;
  });
}

const std::vector<std::string_view>& MetricFamilyNames() {
  static const std::vector<std::string_view> names = {kGpuUtil,
                                                      kGrEngineActive,
                                                      kMemCopyUtil,
                                                      kFbUsed,
                                                      kFbFree,
                                                      kFbTotal,
                                                      kGpuTemp,
                                                      kPowerUsage,
                                                      kXidLast,
                                                      kEccSbe,
                                                      kEccDbe,
                                                      kXidTotal,
                                                      kGpuInfo,
                                                      kGpuSimulated,
                                                      kGpuMemAllocBytes,
                                                      kGpuMemAllocRatio,
                                                      kGpuComputeAllocRatio,
                                                      kGpuSlices,
                                                      kGpuForeignMem,
                                                      kGpuForeignProcs,
                                                      kJobInfo,
                                                      kJobStart,
                                                      kJobShareTarget,
                                                      kJobMemUsed,
                                                      kJobMemLimit,
                                                      kJobMemPeak,
                                                      kJobNvmlMem,
                                                      kJobShareAchieved,
                                                      kJobGpuUtil,
                                                      kJobRefused,
                                                      kJobThrottled,
                                                      kJobIdle,
                                                      kJobLowUse,
                                                      kJobIdleTotal,
                                                      kJobPaused,
                                                      kJobSuspended,
                                                      kQueueLength,
                                                      kQueuedByUser,
                                                      kJobsSuspended,
                                                      kQuotaLimit,
                                                      kQuotaUsed,
                                                      kQueueWait,
                                                      kJobsRunning,
                                                      kEvents,
                                                      kUp,
                                                      kDegraded,
                                                      kStartTime,
                                                      kBuildInfo};
  return names;
}

}  // namespace gpuslice::daemon

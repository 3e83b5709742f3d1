#include "daemon/elastic/elastic_jobs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>
#include <vector>

#include "core/jobs/elastic.h"
#include "daemon/base/log.h"

namespace gpuslice::daemon {

using core::Job;
using core::Status;

bool IsElastic(const Job& job) {
  return job.request.kind == core::RequestKind::kWholeGpus &&
         job.request.gpus_max > job.request.gpus_min;
}

namespace {

// Whether an elastic job asked to grow while it runs (a job that does not catch
// elastic_signal would be killed by a growth it never asked for). The marker
// lives in the job's environment, so the ledger keeps it.
constexpr char kGrowMarker[] = "GPUSLICE_ELASTIC_GROW=1";

bool WantsGrowth(const Job& job) {
  return std::find(job.env.begin(), job.env.end(), kGrowMarker) != job.env.end();
}

}  // namespace

void WriteGpusFile(const Job& job, const std::string& dir) {
  // Atomically (a reader sees the old set or the new one, never half), and
  // readable by the job's user: the job directory is made traversable
  // (0711: files can be opened by name, not listed or created).
  chmod(dir.c_str(), 0711);
  std::string path = dir + "/gpus", tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) {
    LogWarn("job " + std::to_string(job.id) + ": cannot write " + tmp);
    return;
  }
  std::string text;
  for (const std::string& uuid : job.allocation.gpu_uuids) text += uuid + "\n";
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ok = fchmod(fd, 0644) == 0 && ok;
  close(fd);
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    LogWarn("job " + std::to_string(job.id) + ": cannot write " + path);
    unlink(tmp.c_str());
  }
}

void ElasticJobs::Adjust(uint64_t head_id) {
  std::vector<core::ElasticJob> elastic;
  std::set<uint64_t> live;
  jobs_.for_each_live([&](const LiveJob& l) {
    const Job& job = *l.job;
    live.insert(job.id);
    if (!IsElastic(job) || l.ending || job.allocation.empty() || l.suspended() || l.checkpointing) {
      return;
    }
    core::ElasticJob e;
    e.id = job.id;
    e.min = job.request.gpus_min;
    e.max = job.request.gpus_max;
    e.held = static_cast<uint32_t>(job.allocation.gpu_indices.size());
    e.priority = job.request.priority;
    auto changed = changed_ms_.find(job.id);
    e.last_change_ms = std::max(job.started_ms, changed == changed_ms_.end() ? 0 : changed->second);
    elastic.push_back(e);
  });
  std::erase_if(changed_ms_, [&](const auto& c) { return !live.count(c.first); });
  if (elastic.empty()) return;
  int64_t now = clock_.NowMs();
  NodeCapacity& capacity = jobs_.capacity();
  if (head_id != 0) {
    // Shrink only when that makes the head fit, checked on a copy.
    const Job& head = jobs_.job(head_id);
    if (jobs_.preempting(head_id)) return;
    uint32_t idle = capacity.IdleGpus();
    uint32_t wants = head.request.kind == core::RequestKind::kWholeGpus ? head.request.gpus_min : 1;
    if (wants <= idle) return;  // Not for want of idle GPUs (islands, pools): leave it.
    auto steps = core::PlanElasticShrink(elastic, wants - idle, head.request.priority);
    if (steps.empty()) return;
    auto probe = capacity.Clone();
    auto& model = static_cast<NodeCapacity&>(*probe);
    for (const core::ElasticStep& s : steps) {
      uint32_t held = static_cast<uint32_t>(jobs_.job(s.id).allocation.gpu_indices.size());
      if (!model.SetElasticGpus(s.id, held + s.delta).ok()) return;
    }
    if (model.TryPlace(head_id) != core::FitResult::kPlaced) return;
    for (const core::ElasticStep& s : steps) {
      uint32_t held = static_cast<uint32_t>(jobs_.job(s.id).allocation.gpu_indices.size());
      Status st = Apply(jobs_.job(s.id), held + s.delta,
                        s.reason + " (job " + std::to_string(head_id) + ")");
      if (!st.ok()) LogWarn("job " + std::to_string(s.id) + ": shrink failed: " + st.message());
    }
    jobs_.schedule();
    return;
  }
  core::ElasticOptions opt;
  opt.cooldown_ms = rules_.elastic_cooldown_ms;
  std::erase_if(elastic, [&](const core::ElasticJob& e) { return !WantsGrowth(jobs_.job(e.id)); });
  for (const core::ElasticStep& s :
       core::PlanElasticGrowth(elastic, capacity.IdleGpus(), false, now, opt)) {
    Job& job = jobs_.job(s.id);
    uint32_t held = static_cast<uint32_t>(job.allocation.gpu_indices.size());
    // As many of the GPUs planned as its quotas allow and its pool and
    // island hold (SetElasticGpus changes nothing when they do not).
    for (uint32_t more = static_cast<uint32_t>(s.delta); more > 0; --more) {
      if (!jobs_.fits_quotas(job, held + more)) continue;
      if (Apply(job, held + more, s.reason).ok()) break;
    }
  }
}

Status ElasticJobs::Apply(Job& job, uint32_t count, const std::string& why) {
  size_t before = job.allocation.gpu_indices.size();
  SliceLimits given_back = jobs_.limits_of(job);
  GPUSLICE_ASSIGN_OR_RETURN(core::Allocation a, jobs_.capacity().SetElasticGpus(job.id, count));
  job.allocation = a;
  // A region's device list is fixed: a new one at the same path. Running
  // processes keep the old mapping; restarted workers open the new one.
  if (!job.region_path.empty()) {
    // In the old region, which the running processes keep, the GPUs given
    // back get a memory limit of 0: until they restart, those processes can
    // allocate nothing more there (what they hold stays theirs, and their
    // kernels still run: the workers are told to restart).
    std::vector<std::string> gone;
    for (const std::string& u : given_back.uuids) {
      if (std::find(a.gpu_uuids.begin(), a.gpu_uuids.end(), u) == a.gpu_uuids.end()) {
        gone.push_back(u);
      }
    }
    if (!gone.empty() && regions_.Exists(job.region_path)) {
      given_back.uuids = gone;
      given_back.memory_bytes_per_device = 0;
      if (Status s = regions_.Update(job.region_path, given_back); !s.ok()) {
        LogWarn("job " + std::to_string(job.id) +
                ": cannot close the given-back GPUs to new allocations: " + s.message());
      }
    }
    if (regions_.Exists(job.region_path)) (void)regions_.Remove(job.region_path);
    auto region = regions_.Create(jobs_.limits_of(job));
    if (region.ok()) {
      job.region_path = *region;
    } else {
      LogWarn("job " + std::to_string(job.id) +
              ": cannot recreate its slice: " + region.status().message());
      if (region.status().code() == core::StatusCode::kResourceExhausted) {
        jobs_.no_room("no room for job slices on the state disk (" + region.status().message() +
                      ")");
      }
    }
  }
  jobs_.save_resize(job);
  WriteGpusFile(job, jobs_.job_dir(job.id));
  if (job.pid > 0) jobs_.signal_group(job.pid, rules_.elastic_signal);
  Changed(job.id, clock_.NowMs());
  std::string uuids;
  for (const std::string& u : a.gpu_uuids) uuids += (uuids.empty() ? "" : ",") + u;
  jobs_.record(count > before ? "elastic_grow" : "elastic_shrink", job.id, job.user,
               std::to_string(before) + " -> " + std::to_string(count) + " GPUs (" + uuids +
                   "): " + why + "; " + std::string(strsignal(rules_.elastic_signal)) + " sent, " +
                   jobs_.job_dir(job.id) + "/gpus rewritten; workers must restart");
  LogInfo("job " + std::to_string(job.id) + " elastic: " + std::to_string(before) + " -> " +
          std::to_string(count) + " GPUs");
  return Status::Ok();
}

void ElasticJobs::FitToQuotas(Job& job) {
  if (!IsElastic(job)) return;
  NodeCapacity& capacity = jobs_.capacity();
  auto a = capacity.AllocationOf(job.id);
  if (!a) return;
  for (uint32_t n = static_cast<uint32_t>(a->gpu_indices.size()); n > job.request.gpus_min; --n) {
    if (jobs_.fits_quotas_with(job, *a)) return;
    auto smaller = capacity.SetElasticGpus(job.id, n - 1);
    if (!smaller.ok()) return;
    a = *smaller;
  }
}

}  // namespace gpuslice::daemon

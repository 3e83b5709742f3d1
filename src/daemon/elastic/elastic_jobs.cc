#include "daemon/elastic/elastic_jobs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
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
      Status st =
          jobs_.apply(s.id, held + s.delta, s.reason + " (job " + std::to_string(head_id) + ")");
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
    const Job& job = jobs_.job(s.id);
    uint32_t held = static_cast<uint32_t>(job.allocation.gpu_indices.size());
    // As many of the GPUs planned as its quotas allow and its pool and
    // island hold (SetElasticGpus changes nothing when they do not).
    for (uint32_t more = static_cast<uint32_t>(s.delta); more > 0; --more) {
      if (!jobs_.fits_quotas(job, held + more)) continue;
      if (jobs_.apply(s.id, held + more, s.reason).ok()) break;
    }
  }
}

}  // namespace gpuslice::daemon

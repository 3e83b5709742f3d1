#include "daemon/table/job_table.h"

#include <algorithm>
#include <utility>

namespace gpuslice::daemon {

using core::Job;
using core::JobState;

Job* JobTable::Find(uint64_t id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

const Job* JobTable::Find(uint64_t id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

Job& JobTable::Add(Job job) {
  const uint64_t id = job.id;
  if (const Job* old = Find(id)) Unindex(*old);
  ids_by_user_[job.user].insert(id);
  ContinueIdsAfter(id);
  Job& slot = jobs_[id];
  slot = std::move(job);
  return slot;
}

void JobTable::Unindex(const Job& job) {
  auto it = ids_by_user_.find(job.user);
  if (it == ids_by_user_.end()) return;
  it->second.erase(job.id);
  if (it->second.empty()) ids_by_user_.erase(it);
}

void JobTable::Enqueue(const core::QueuedJob& q, uint32_t uid) {
  auto pos = std::upper_bound(queue_.begin(), queue_.end(), q, core::QueueBefore);
  queue_.insert(pos, q);
  ++queued_by_uid_[uid];
}

void JobTable::Dequeue(uint64_t id) {
  auto it = std::find_if(queue_.begin(), queue_.end(),
                         [&](const core::QueuedJob& q) { return q.id == id; });
  if (it == queue_.end()) return;
  queue_.erase(it);
  const Job* job = Find(id);
  if (job == nullptr) return;
  auto n = queued_by_uid_.find(job->uid);
  if (n != queued_by_uid_.end() && --n->second == 0) queued_by_uid_.erase(n);
}

uint32_t JobTable::QueuedOf(uint32_t uid) const {
  auto it = queued_by_uid_.find(uid);
  return it == queued_by_uid_.end() ? 0 : it->second;
}

bool JobTable::IsSuspended(uint64_t id) const {
  const Job* job = Find(id);
  return job != nullptr && job->state == JobState::kSuspended;
}

size_t JobTable::running_count() const {
  size_t n = 0;
  for (const auto& [id, l] : live_) n += IsSuspended(id) ? 0 : 1;
  return n;
}

void JobTable::ForEachLiveJob(const std::function<void(const Job&)>& fn) const {
  for (const auto& [id, job] : jobs_) {
    if (job.IsLive()) fn(job);
  }
}

std::map<uint32_t, std::vector<uint64_t>> JobTable::SlicesByGpu() const {
  std::map<uint32_t, std::vector<uint64_t>> out;
  for (const auto& [id, l] : live_) {
    const Job* job = Find(id);
    if (job == nullptr || job->state == JobState::kSuspended) continue;
    for (uint32_t g : job->allocation.gpu_indices) out[g].push_back(id);
  }
  return out;
}

void JobTable::VisitCandidates(uint64_t after_id, const std::vector<std::string>& users,
                               bool live_only, const std::function<bool(const Job&)>& visit) const {
  auto emit = [&](uint64_t id) {
    const Job* job = Find(id);
    return job == nullptr || visit(*job);
  };
  if (live_only) {
    for (auto it = live_.upper_bound(after_id); it != live_.end(); ++it) {
      if (!emit(it->first)) return;
    }
    return;
  }
  if (!users.empty()) {
    // The owners' id lists merged in id order (a few users at most).
    using It = std::set<uint64_t>::const_iterator;
    std::vector<std::pair<It, It>> runs;
    std::set<std::string> unique(users.begin(), users.end());
    for (const std::string& u : unique) {
      auto ids = ids_by_user_.find(u);
      if (ids != ids_by_user_.end())
        runs.emplace_back(ids->second.upper_bound(after_id), ids->second.end());
    }
    while (true) {
      std::pair<It, It>* next = nullptr;
      for (auto& r : runs) {
        if (r.first != r.second && (next == nullptr || *r.first < *next->first)) next = &r;
      }
      if (next == nullptr) return;
      if (!emit(*next->first++)) return;
    }
  }
  for (auto it = jobs_.upper_bound(after_id); it != jobs_.end(); ++it) {
    if (!visit(it->second)) return;
  }
}

std::vector<uint64_t> JobTable::TrimHistory(size_t keep, int64_t keep_after_ms) {
  // Oldest finished first.
  std::vector<std::pair<int64_t, uint64_t>> finished;
  for (const auto& [id, job] : jobs_) {
    if (!job.IsLive()) finished.emplace_back(job.ended_ms, id);
  }
  std::vector<uint64_t> gone;
  if (finished.size() <= keep) return gone;
  std::sort(finished.begin(), finished.end());
  const size_t excess = finished.size() - keep;
  for (size_t i = 0; i < excess && finished[i].first < keep_after_ms; ++i) {
    auto it = jobs_.find(finished[i].second);
    Unindex(it->second);
    jobs_.erase(it);
    gone.push_back(finished[i].second);
  }
  return gone;
}

}  // namespace gpuslice::daemon

// JobDependencies: the wait-for graph of queued jobs (dependencies.h).

#include "daemon/waits/dependencies.h"

#include <algorithm>

namespace gpuslice::daemon {

using core::Dependency;
using core::DependencyStatus;
using core::Job;
using core::JobState;

namespace {

// How a job ended, when it did: its state and exit code.
struct EndOf {
  JobState state = JobState::kQueued;
  int exit_code = -1;
};

}  // namespace

core::Result<std::vector<uint64_t>> JobDependencies::Check(
    const std::vector<Dependency>& after) const {
  // Every job is visible to every caller (docs/API.md: lists are, as in
  // squeue), so a user may wait for anyone's job; waiting changes nothing
  // for the job waited for.
  std::vector<uint64_t> pending;
  for (const Dependency& d : after) {
    const std::string spec = "--after " + core::FormatDependency(d);
    EndOf end;
    if (const Job* job = jobs_.find(d.job_id)) {
      end = {job->state, job->exit_code};
    } else {
      // Finished long ago (no longer in memory): the ledger has it.
      GPUSLICE_ASSIGN_OR_RETURN(std::optional<Job> old, jobs_.load(d.job_id));
      if (!old) return core::InvalidArgumentError(spec + ": no job " + std::to_string(d.job_id));
      end = {old->state, old->exit_code};
    }
    switch (core::Evaluate(d, end.state, end.exit_code)) {
      case DependencyStatus::kWaiting:
        pending.push_back(d.job_id);
        break;
      case DependencyStatus::kSatisfied:
        break;  // Ended as asked: nothing to wait for.
      case DependencyStatus::kBroken:
        // Queued, it could never start: refused instead.
        return core::InvalidArgumentError(
            spec + ": " + core::BrokenDependencyReason(d, end.state, end.exit_code) +
            " (it has already ended), so this job could never start");
    }
  }
  return pending;
}

void JobDependencies::WaitFor(uint64_t id, const std::vector<uint64_t>& pending) {
  // What it waited for before is dropped: the dependents_ entries left
  // behind are skipped (it no longer waits for them).
  waiting_on_.erase(id);
  if (pending.empty()) return;
  waiting_on_[id] = pending;
  for (uint64_t dep : pending) dependents_[dep].push_back(id);
}

std::optional<std::string> JobDependencies::Rewait(const Job& job) {
  // Jobs are recovered in id order and a job can only wait for an older one,
  // so each dependency is in the job table already, as it stands after
  // recovery.
  std::vector<uint64_t> pending;
  for (const Dependency& d : job.after) {
    const Job* found = jobs_.find(d.job_id);
    if (found == nullptr) {
      // Not in the ledger either (it cannot be otherwise short of an edit).
      if (d.kind == core::DependencyKind::kAny) continue;
      return "dependency job " + std::to_string(d.job_id) + " is not in the ledger";
    }
    const Job& dep = *found;
    switch (core::Evaluate(d, dep.state, dep.exit_code)) {
      case DependencyStatus::kWaiting:
        pending.push_back(d.job_id);
        break;
      case DependencyStatus::kSatisfied:
        break;
      case DependencyStatus::kBroken:
        // It ended while the daemon was down, or just before it stopped.
        return core::BrokenDependencyReason(d, dep.state, dep.exit_code);
    }
  }
  WaitFor(job.id, pending);
  return std::nullopt;
}

void JobDependencies::Release(uint64_t ended_id) {
  ended_to_release_.push_back(ended_id);
  if (releasing_) return;  // A cascade: the loop below takes it.
  releasing_ = true;
  while (!ended_to_release_.empty()) {
    const uint64_t id = ended_to_release_.front();
    ended_to_release_.pop_front();
    waiting_on_.erase(id);  // Itself ended (e.g. cancelled) while waiting.
    auto it = dependents_.find(id);
    if (it == dependents_.end()) continue;
    const std::vector<uint64_t> waiting = std::move(it->second);
    dependents_.erase(it);
    const Job* ended_job = jobs_.find(id);
    if (ended_job == nullptr) continue;
    const Job& ended = *ended_job;
    for (uint64_t w : waiting) {
      auto on = waiting_on_.find(w);
      if (on == waiting_on_.end()) continue;  // No longer waits.
      std::erase(on->second, id);
      const Job* job = jobs_.find(w);
      if (job == nullptr) {  // Gone from the table: it waits for nothing.
        waiting_on_.erase(on);
        continue;
      }
      auto d = std::find_if(job->after.begin(), job->after.end(),
                            [&](const Dependency& x) { return x.job_id == id; });
      if (d != job->after.end() &&
          core::Evaluate(*d, ended.state, ended.exit_code) == DependencyStatus::kBroken) {
        waiting_on_.erase(on);
        jobs_.cancel(w, core::BrokenDependencyReason(*d, ended.state, ended.exit_code));
        continue;
      }
      if (on->second.empty()) {
        waiting_on_.erase(on);
        jobs_.released(w);  // It may start now.
      }
    }
  }
  releasing_ = false;
}

std::string JobDependencies::WaitingText(const Job& job) const {
  auto on = waiting_on_.find(job.id);
  if (on == waiting_on_.end()) return "";
  std::string out;
  for (const Dependency& d : job.after) {
    if (std::find(on->second.begin(), on->second.end(), d.job_id) == on->second.end()) continue;
    const Job* dep = jobs_.find(d.job_id);
    out += (out.empty() ? "after job " : ", job ") + core::FormatDependency(d) + " (" +
           std::string(dep == nullptr ? "?" : core::JobStateName(dep->state)) + ")";
  }
  return out;
}

std::vector<DependencyView> JobDependencies::ViewsOf(const Job& job) const {
  std::vector<DependencyView> out;
  for (const Dependency& d : job.after) {
    DependencyView v{d, std::nullopt, -1};
    if (const Job* dep = jobs_.find(d.job_id)) {
      v.state = dep->state;
      v.exit_code = dep->exit_code;
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace gpuslice::daemon

// JobReads: what a job looks like to users. See job_reads.h.

#include "daemon/reads/job_reads.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "core/strings.h"
#include "daemon/launch/job_log.h"
#include "daemon/requests/job_text.h"
#include "daemon/waits/holds.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;
using core::Result;

namespace {

// "40s", "25m", "2h5m": rounded up to the second under a minute, else to
// the minute (a reason is read by people, not parsed).
std::string RoughDuration(int64_t ms) {
  ms = std::max<int64_t>(ms, 1000);
  const int64_t unit = ms < 60'000 ? 1000 : 60'000;
  return core::FormatDuration(std::chrono::milliseconds((ms + unit - 1) / unit * unit));
}

// Calls `visit` with the jobs of `table` that may pass `q` (JobTable::
// VisitCandidates): running and suspended jobs only come from the live
// jobs alone.
void VisitCandidates(const JobTable& table, const JobQuery& q,
                     const std::function<bool(const Job&)>& visit) {
  const bool held_states_only =
      !q.states.empty() && std::all_of(q.states.begin(), q.states.end(), [](JobState s) {
        return s == JobState::kRunning || s == JobState::kSuspended;
      });
  table.VisitCandidates(q.after_id, q.users, held_states_only, visit);
}

}  // namespace

JobReads::JobReads(const JobTable& table, const Clock& clock, std::string jobs_dir,
                   const std::string& default_pool, Jobs jobs)
    : table_(table),
      clock_(clock),
      jobs_dir_(std::move(jobs_dir)),
      default_pool_(default_pool),
      jobs_(std::move(jobs)) {}

void JobReads::SetPlan(std::vector<core::WaitingJob> waiting, uint64_t head) {
  last_waiting_ = std::move(waiting);
  plan_head_ = head;
  // An index built from the board this replaces would point into it.
  waiting_index_stale_ = true;
}

JobView JobReads::View(const Job& job) {
  JobView v{job, 0, "", std::nullopt, {}, jobs_.dependencies(job), ""};
  if (job.state == JobState::kRunning || job.state == JobState::kSuspended) {
    if (job.state == JobState::kRunning) v.usage = jobs_.usage(job.id);
    v.flags = FlagsOf(job.id);
    v.checkpoint_error = jobs_.checkpoint_error(job.id);
  }
  if (job.IsLive()) {
    if (auto factor = jobs_.fair_share(job)) v.fair_share = *factor;
  }
  // A suspended job waits in the queue too once its processes asked to be
  // resumed (resume on demand).
  const bool resume_demand =
      job.state == JobState::kSuspended && jobs_.resume_asked_ms(job.id) != 0;
  if (job.state != JobState::kQueued && !resume_demand) return v;
  if (waiting_index_stale_) {
    waiting_index_.clear();
    waiting_index_.reserve(last_waiting_.size());
    for (size_t i = 0; i < last_waiting_.size(); ++i) waiting_index_[last_waiting_[i].id] = i;
    waiting_index_stale_ = false;
  }
  auto w = waiting_index_.find(job.id);
  if (w != waiting_index_.end()) Explain(job, last_waiting_[w->second], &v);
  if (resume_demand) {
    v.waiting_for = "waiting for GPU memory to resume on demand" +
                    (v.waiting_for.empty() ? std::string() : ": " + v.waiting_for);
  }
  return v;
}

void JobReads::Explain(const Job& job, const core::WaitingJob& wj, JobView* v) const {
  v->queue_position = wj.position;
  std::string head = std::to_string(plan_head_);
  switch (wj.reason) {
    case core::WaitReason::kHead: {
      v->waiting_for = "first in line: " + jobs_.why_not_now(job.id);
      v->waiting_for += jobs_.preempt_text(job.id);
      if (const std::optional<HeadStart> start = jobs_.head_start();
          job.id == plan_head_ && start) {
        v->expected_start_ms = start->start_ms;
        v->waiting_for +=
            "; expected to start in about " + RoughDuration(start->start_ms - clock_.NowMs()) +
            (start->estimated ? " (by run-time estimates)" : " (by maximum run times)");
      }
      // Last, so that the command a hint names ends the line.
      v->waiting_for += jobs_.defrag_text(job.id);
      break;
    }
    case core::WaitReason::kBehindHead:
      v->waiting_for = "behind job " + head + ": " + jobs_.why_not_now(job.id);
      break;
    case core::WaitReason::kWouldDelayHead:
      v->waiting_for = "fits now, but starting it would delay job " + head + " (first in line)";
      break;
    case core::WaitReason::kNotConsidered:
      v->waiting_for = "behind job " + head + "; not yet considered for backfill";
      break;
    case core::WaitReason::kNeverFits:
      v->waiting_for = "can never fit";
      break;
    case core::WaitReason::kBorrowWait: {
      const std::string* b = jobs_.borrow_reason(job.id);
      v->waiting_for = "borrowing over its group's quota (" +
                       (b == nullptr ? std::string("over quota") : *b) +
                       "): waits for idle capacity: " + jobs_.why_not_now(job.id);
      break;
    }
    case core::WaitReason::kHeld: {
      if (job.hold != core::HoldKind::kNone) {
        v->waiting_for = JobHolds::WaitingText(job);
        break;
      }
      if (jobs_.waits_for_dependencies(job.id)) {
        v->waiting_for = jobs_.dependency_text(job);
        break;
      }
      const std::string* q = jobs_.quota_wait(job.id);
      v->waiting_for = "quota: " + (q == nullptr ? std::string("over quota") : *q);
      break;
    }
  }
}

Result<JobView> JobReads::Get(uint64_t id) {
  jobs_.flush();
  auto it = table_.jobs().find(id);
  if (it == table_.jobs().end()) return core::NotFoundError("no job " + std::to_string(id));
  return View(it->second);
}

std::vector<JobView> JobReads::List(bool include_finished) {
  jobs_.flush();
  std::vector<JobView> out;
  for (const auto& [id, job] : table_.jobs()) {
    if (include_finished || job.IsLive()) out.push_back(View(job));
  }
  return out;
}

JobPage JobReads::Query(const JobQuery& q) {
  jobs_.flush();
  JobPage page;
  VisitCandidates(table_, q, [&](const Job& job) {
    if (!JobMatches(job, q, default_pool_)) return true;
    if (q.limit != 0 && page.jobs.size() == q.limit) {
      // One more matches: the page is full, and the next one starts here.
      page.next_cursor = page.jobs.back().job.id;
      return false;
    }
    page.jobs.push_back(View(job));
    return true;
  });
  return page;
}

JobSummary JobReads::Summary(const JobQuery& q) {
  jobs_.flush();
  JobSummaryBuilder builder;
  JobQuery from_start = q;
  from_start.after_id = 0;
  VisitCandidates(table_, from_start, [&](const Job& job) {
    if (JobMatches(job, q, default_pool_)) {
      builder.Add(job, job.request.pool.empty() ? default_pool_ : job.request.pool);
    }
    return true;
  });
  JobSummary out;
  out.counts = builder.counts();
  out.groups = builder.Take();
  out.groups_total = out.groups.size();
  if (q.limit != 0 && out.groups.size() > q.limit) out.groups.resize(q.limit);
  // Only each group's first member gets a view (its position and reason).
  for (const JobGroup& g : out.groups) out.first.push_back(View(table_.jobs().at(g.ids.front())));
  return out;
}

Result<std::vector<Transition>> JobReads::History(uint64_t id) { return jobs_.transitions(id); }

Result<LogChunk> JobReads::ReadLog(const Caller& caller, uint64_t id, const std::string& stream,
                                   uint64_t offset, uint64_t limit) const {
  auto it = table_.jobs().find(id);
  if (it == table_.jobs().end()) return core::NotFoundError("no job " + std::to_string(id));
  const Job& job = it->second;
  GPUSLICE_RETURN_IF_ERROR(CheckOwner(caller, job));
  if (stream != "stdout" && stream != "stderr") {
    return core::InvalidArgumentError("stream must be stdout or stderr, not '" + stream + "'");
  }
  LogChunk chunk;
  chunk.state = job.state;
  chunk.exit_code = job.exit_code;
  chunk.next_offset = offset;
  // Offsets count the job's output since it started, across trims of a
  // capped log (job_log.h).
  limit = std::min<uint64_t>(limit, 4u << 20);
  GPUSLICE_ASSIGN_OR_RETURN(
      LogRead read, ReadJobLog(jobs_dir_ + "/" + std::to_string(id) + "/" + stream, offset, limit));
  chunk.data = std::move(read.data);
  chunk.next_offset = read.next_offset;
  return chunk;
}

std::string JobReads::PublicText(uint64_t job_id, std::string text) const {
  auto it = table_.jobs().find(job_id);
  if (it == table_.jobs().end()) return text;
  return RedactEnvironment(std::move(text), it->second.env, it->second.user);
}

std::vector<std::string> JobReads::FlagsOf(uint64_t id) const {
  std::vector<std::string> flags;
  auto l = table_.live().find(id);
  if (l == table_.live().end()) return flags;
  flags = jobs_.suspend_flags(id);
  if (jobs_.idle(id)) flags.push_back("idle");
  if (l->second.paused) flags.push_back("paused");
  jobs_.watchdog_flags(id, &flags);
  if (jobs_.borrowing(id)) flags.push_back("borrowing");
  if (l->second.ending && l->second.ending_reason.rfind("preempted", 0) == 0) {
    flags.push_back("preempted");
  }
  if (auto j = table_.jobs().find(id);
      j != table_.jobs().end() && !OutsidePoolText(j->second).empty()) {
    flags.push_back("outside_pool");
  }
  return flags;
}

std::string JobReads::OutsidePoolText(const Job& job) const {
  const std::string& pool = job.request.pool.empty() ? default_pool_ : job.request.pool;
  std::string moved;
  for (uint32_t g : job.allocation.gpu_indices) {
    if (jobs_.pool_of(g) == pool) continue;
    moved += (moved.empty() ? "GPU " : ", GPU ") + std::to_string(g) + " is in pool '" +
             jobs_.pool_of(g) + "'";
  }
  if (moved.empty()) return "";
  return "outside its pool '" + pool + "' since the configuration changed: " + moved +
         "; it runs on where it is, and nothing new of pool '" + pool + "' is placed there";
}

}  // namespace gpuslice::daemon

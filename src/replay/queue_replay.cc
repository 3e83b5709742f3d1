#include "replay/queue_replay.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <queue>
#include <set>
#include <unordered_map>

#include "core/placement/placement_profile.h"
#include "core/placement/placement_random.h"
#include "core/schedule/defrag.h"
#include "core/schedule/fair_share.h"
#include "core/schedule/preemption.h"
#include "core/schedule/queue.h"
#include "core/schedule/quota_pass.h"
#include "core/schedule/runtime_estimate.h"

namespace gpuslice::replay {

using core::Demand;
using core::Placement;
using core::Result;
using core::Status;

namespace {

constexpr int64_t kHourMs = 3600 * 1000;

// The cluster as core::PlanQueue sees it, over core::Place: the contract the
// daemon's NodeCapacity honours, without its pools, MIG and foreign use.
class ClusterCapacity : public core::CapacityModel {
 public:
  ClusterCapacity(core::ClusterState state, core::PlaceOptions options,
                  std::shared_ptr<const std::vector<Demand>> demands)
      : state_(std::move(state)), options_(options), demands_(std::move(demands)) {}

  std::unique_ptr<core::CapacityModel> Clone() const override {
    return std::make_unique<ClusterCapacity>(*this);
  }
  core::FitResult TryPlace(uint64_t id) override {
    if (held_.count(id)) return core::FitResult::kNever;
    const Demand& d = (*demands_)[id];
    Result<Placement> p = core::Place(state_, d, options_);
    if (!p.ok()) {
      return p.status().code() == core::StatusCode::kResourceExhausted ? core::FitResult::kNotNow
                                                                       : core::FitResult::kNever;
    }
    if (!state_.Allocate(d, *p).ok()) return core::FitResult::kNotNow;
    held_[id] = *p;
    return core::FitResult::kPlaced;
  }
  void Release(uint64_t id) override {
    auto it = held_.find(id);
    if (it == held_.end()) return;
    (void)state_.Release((*demands_)[id], it->second);
    held_.erase(it);
  }
  bool Mirror(uint64_t id, const core::CapacityModel& source) override {
    const auto& from = static_cast<const ClusterCapacity&>(source);
    auto it = from.held_.find(id);
    if (it == from.held_.end() || held_.count(id)) return false;
    if (!state_.Allocate((*demands_)[id], it->second).ok()) return false;
    held_[id] = it->second;
    return true;
  }
  // A held task to `to` (a move); false, and nothing changed, when it does
  // not fit there.
  bool Move(uint64_t id, const Placement& to) {
    auto it = held_.find(id);
    if (it == held_.end()) return false;
    const Demand& d = (*demands_)[id];
    if (!state_.Release(d, it->second).ok()) return false;
    if (!state_.Allocate(d, to).ok()) {
      (void)state_.Allocate(d, it->second);
      return false;
    }
    it->second = to;
    return true;
  }
  const core::ClusterState& state() const { return state_; }
  core::PlaceOptions& options() { return options_; }
  const std::unordered_map<uint64_t, Placement>& held() const { return held_; }

 private:
  core::ClusterState state_;
  core::PlaceOptions options_;
  std::shared_ptr<const std::vector<Demand>> demands_;
  std::unordered_map<uint64_t, Placement> held_;
};

struct Task {
  uint64_t id = 0;
  uint32_t user = 0;
  int64_t arrival_ms = 0;
  int64_t duration_ms = 0;
  int64_t start_ms = -1;
  int64_t end_ms = 0;    // While it runs: when it departs.
  bool started = false;  // Ever (a suspended borrower's wait counts once).
  bool whole = false;    // Whole GPUs; else a part of one.
};

double GpusOf(const Demand& d) { return static_cast<double>(d.TotalGpuMilli()) / 1000.0; }

}  // namespace

std::vector<double> MaxMinShares(std::span<const double> demands, double total) {
  const size_t n = demands.size();
  std::vector<size_t> by_demand(n);
  for (size_t u = 0; u < n; ++u) by_demand[u] = u;
  std::stable_sort(by_demand.begin(), by_demand.end(),
                   [&](size_t a, size_t b) { return demands[a] < demands[b]; });
  std::vector<double> out(n, 0);
  double left = std::max(total, 0.0);
  size_t users_left = n;
  for (size_t u : by_demand) {
    const double fair =
        std::min(std::max(demands[u], 0.0), left / static_cast<double>(users_left--));
    left -= fair;
    out[u] = fair;
  }
  return out;
}

std::vector<QueueReplayConfig> QueueReplayVariants(const QueueReplayConfig& base) {
  std::vector<QueueReplayConfig> out;
  QueueReplayConfig today = base;
  today.label = "today";
  today.fair_share = today.estimates = today.defragment = today.pack_fractions = false;
  out.push_back(today);
  QueueReplayConfig all = base;
  all.label = "all-on";
  out.push_back(all);
  QueueReplayConfig c = base;
  c.label = "no-defragment";
  c.defragment = false;
  out.push_back(c);
  c = base;
  c.label = "no-fair-share";
  c.fair_share = false;
  out.push_back(c);
  c = base;
  c.label = "no-estimates";
  c.estimates = false;
  out.push_back(c);
  c = base;
  c.label = "no-packing";
  c.pack_fractions = false;
  out.push_back(c);
  c = base;
  c.label = "quotas";
  c.quotas = true;
  out.push_back(c);
  return out;
}

Result<QueueReplayResult> RunQueueReplay(const ReplayInput& input,
                                         std::span<const core::TraceTask> trace,
                                         const QueueReplayConfig& config) {
  const auto wall0 = std::chrono::steady_clock::now();
  if (trace.size() != input.tasks.size()) {
    return core::InvalidArgumentError("queue replay: task list and demands differ in size");
  }
  if (!(config.arrival_scale > 0) || config.user_mix.empty() || config.sample_ms <= 0 ||
      config.from_s < 0 || config.max_runtime_ms < 0) {
    return core::InvalidArgumentError(
        "queue replay: needs a positive arrival scale, a user mix and a sample step");
  }
  for (uint32_t u : config.task_users) {
    if (u >= config.user_mix.size()) {
      return core::InvalidArgumentError("queue replay: task user " + std::to_string(u) +
                                        " is not one of the " +
                                        std::to_string(config.user_mix.size()) + " users");
    }
  }
  if (config.until_s != 0 && config.until_s <= config.from_s) {
    return core::InvalidArgumentError(
        "queue replay: the window's end (" + std::to_string(config.until_s) +
        " s) is not after its start (" + std::to_string(config.from_s) + " s)");
  }
  double mix_total = 0;
  for (double w : config.user_mix) {
    if (!(w > 0)) return core::InvalidArgumentError("queue replay: user weights must be > 0");
    mix_total += w;
  }
  const core::ClusterState& cluster = input.cluster;
  if (cluster.TotalGpuMilli() == 0) return core::InvalidArgumentError("replay: no GPUs");

  // The tasks: GPU tasks with times that could ever fit here, by arrival.
  // Ids are 1-based (0 is "no head" in a plan).
  QueueReplayResult result;
  result.config = config;
  result.capacity_gpus = static_cast<double>(cluster.TotalGpuMilli()) / core::kMilliPerGpu;
  auto demands = std::make_shared<std::vector<Demand>>(1);
  std::vector<Task> tasks(1);
  core::PlacementRng users_rng(config.seed ^ 0x243f6a8885a308d3ull);
  bool any_times = false;
  for (size_t i = 0; i < trace.size(); ++i) {
    const core::TraceTask& t = trace[i];
    const Demand& d = input.tasks[i];
    if (t.creation_s < 0) continue;
    any_times = true;
    if (d.gpus == 0) continue;  // CPU-only: not the daemon's.
    // Drawn for every GPU task, so the users do not depend on the cluster.
    const double draw = static_cast<double>(users_rng.Uniform(1u << 30)) /
                        static_cast<double>(1u << 30) * mix_total;
    uint32_t user = 0;
    for (double acc = config.user_mix[0]; user + 1 < config.user_mix.size() && draw >= acc;) {
      acc += config.user_mix[++user];
    }
    if (i < config.task_users.size()) user = config.task_users[i];
    if (t.creation_s < config.from_s) continue;  // Before the replay's start.
    if (config.until_s != 0 && t.creation_s >= config.until_s) continue;  // After its end.
    if (!core::CouldEverFit(cluster, d).ok()) {
      ++result.never_fit;
      continue;
    }
    Task task;
    task.id = tasks.size();
    task.user = user;
    task.arrival_ms = static_cast<int64_t>(std::llround(
        static_cast<double>(t.creation_s - config.from_s) * 1000.0 / config.arrival_scale));
    task.duration_ms = std::max<int64_t>((t.deletion_s - t.creation_s) * 1000, 1000);
    if (config.max_runtime_ms > 0) {
      task.duration_ms = std::min(task.duration_ms, config.max_runtime_ms);
    }
    task.whole = d.IsWhole();
    tasks.push_back(task);
    demands->push_back(d);
  }
  if (!any_times) {
    return core::InvalidArgumentError(
        "queue replay: the task list has no creation_time and deletion_time columns (the "
        "openb pod lists have them)");
  }
  result.tasks = tasks.size() - 1;
  if (result.tasks == 0) {
    return core::InvalidArgumentError(
        std::string("queue replay: no GPU task fits here") +
        (config.from_s > 0 || config.until_s > 0 ? " among those created in the window" : ""));
  }

  // Placement as the daemon does it: the policy over the trace's profile.
  GPUSLICE_ASSIGN_OR_RETURN(core::WorkloadProfile profile,
                            core::WorkloadProfile::FromDemands(input.tasks, {.coverage = 1.0}));
  if (config.policy == core::Policy::kFragAware) {
    profile = profile.WithRarity(cluster, core::kDefaultRarityBoost);
  }
  core::PlacementRng place_rng(config.seed ^ 0x5deece66dull);
  ClusterCapacity model(cluster, {config.policy, &profile, &place_rng, nullptr}, demands);

  core::FairShareConfig fs;
  fs.enabled = config.fair_share;
  fs.half_life_ms = config.half_life_ms;
  fs.max_age_ms = config.max_age_ms;
  core::DecayedUsage usage(config.half_life_ms);
  std::vector<core::Principal> principals;
  for (size_t u = 0; u < config.user_mix.size(); ++u) {
    principals.push_back({core::PrincipalKind::kUser, "u" + std::to_string(u)});
    result.users.push_back({principals.back().name, config.user_mix[u]});
  }

  // Deserved quotas: an equal part of the GPUs for each user's group.
  core::QuotaBook quotas;
  std::vector<core::QuotaOwner> owners;
  for (size_t u = 0; u < principals.size(); ++u) {
    owners.push_back({principals[u].name, {"g" + std::to_string(u)}});
    if (config.quotas) {
      core::Quota q;
      q.compute_milli = static_cast<uint32_t>(cluster.TotalGpuMilli() / principals.size());
      quotas.Set({core::PrincipalKind::kGroup, owners.back().groups[0]}, q);
    }
  }
  auto quota_charge = [&](uint64_t id) {
    const Demand& d = (*demands)[id];
    core::QuotaCharge c;
    c.gpus = d.IsWhole() ? d.gpus : 0;
    c.compute_milli = static_cast<uint32_t>(d.TotalGpuMilli());
    c.jobs = 1;
    return c;
  };

  std::vector<uint64_t> order;
  for (uint64_t id = 1; id < tasks.size(); ++id) order.push_back(id);
  std::stable_sort(order.begin(), order.end(), [&](uint64_t a, uint64_t b) {
    return tasks[a].arrival_ms < tasks[b].arrival_ms;
  });
  using Departure = std::pair<int64_t, uint64_t>;
  std::priority_queue<Departure, std::vector<Departure>, std::greater<>> departures;
  std::vector<core::QueuedJob> queue;
  std::map<uint64_t, int64_t> running;  // id -> charged up to (fair share).
  std::unordered_map<uint64_t, std::deque<int64_t>> moved_at;
  std::vector<double> whole_waits, fraction_waits, multi_waits;
  // GPUs each user runs, and asks for in the queue (max-min fairness below).
  std::vector<double> running_gpus(principals.size(), 0), queued_gpus(principals.size(), 0);
  std::vector<uint64_t> queued_tasks(principals.size(), 0);
  double all_busy_stretch_ms = 0;

  const uint64_t capacity = cluster.TotalGpuMilli();
  double alloc_ms = 0, busy_alloc_ms = 0, busy_ms = 0;
  size_t next_arrival = 0;
  const int64_t first = tasks[order.front()].arrival_ms;
  int64_t now = first;
  int64_t next_sample = first;

  auto charge = [&](int64_t at) {
    for (auto& [id, since] : running) {
      if (at > since)
        usage.AddInterval(principals[tasks[id].user], GpusOf((*demands)[id]), since, at);
      since = at;
    }
  };
  auto start = [&](uint64_t id, int64_t at) {
    Task& t = tasks[id];
    t.start_ms = at;
    if (!t.started) {
      const double waited_s = static_cast<double>(at - t.arrival_ms) / 1000.0;
      (t.whole ? whole_waits : fraction_waits).push_back(waited_s);
      if ((*demands)[id].gpus >= 2) multi_waits.push_back(waited_s);
      result.max_wait_s = std::max(result.max_wait_s, waited_s);
      t.started = true;
    }
    t.end_ms = at + t.duration_ms;
    departures.push({t.end_ms, id});
    running[id] = at;
    queued_gpus[t.user] -= GpusOf((*demands)[id]);
    --queued_tasks[t.user];
    running_gpus[t.user] += GpusOf((*demands)[id]);
    result.users[t.user].gpu_hours += GpusOf((*demands)[id]) * t.duration_ms / 3.6e6;
  };

  auto enqueue = [&](uint64_t id) {
    const Task& t = tasks[id];
    const Demand& d = (*demands)[id];
    core::QueuedJob q;
    q.id = id;
    q.seq = id;
    q.shape.gpus = d.gpus;
    q.shape.milli = d.gpu_milli;
    // GPU memory is untracked in the trace; the CPU a task needs takes its
    // place, so a shape only dominates one it needs no less CPU than.
    q.shape.mem = d.cpu_milli;
    q.shape.constraint = d.model_mask;
    if (config.estimates) q.estimate = std::chrono::milliseconds(config.default_runtime_ms);
    queue.push_back(q);
    queued_gpus[t.user] += GpusOf(d);
    ++queued_tasks[t.user];
  };
  // Ends a running task's time on the GPUs: its use charged to fair share.
  auto stop = [&](uint64_t id, int64_t at) {
    if (config.fair_share) {
      const int64_t since = running[id];
      if (at > since)
        usage.AddInterval(principals[tasks[id].user], GpusOf((*demands)[id]), since, at);
    }
    running.erase(id);
    running_gpus[tasks[id].user] -= GpusOf((*demands)[id]);
    model.Release(id);
  };
  // A borrower suspended for a task within its quota: back to the queue
  // with the run time it has left (its stale departure is skipped).
  auto suspend = [&](uint64_t id, int64_t at) {
    Task& t = tasks[id];
    stop(id, at);
    t.duration_ms = std::max<int64_t>(t.end_ms - at, 1);
    result.users[t.user].gpu_hours -= GpusOf((*demands)[id]) * t.duration_ms / 3.6e6;
    t.start_ms = -1;
    t.end_ms = 0;
    enqueue(id);
    ++result.reclaims;
  };

  // Over-quota reclaim, as the daemon's Preemptions::Reclaim does it: a head within
  // its group's quota takes capacity back from borrowers, then the queue is
  // planned again.
  auto reclaim = [&](auto& schedule_again, uint64_t head, const core::QuotaPass& pass,
                     int64_t at) -> Status {
    if (!config.quotas || !core::IsGuaranteed(quotas, owners[tasks[head].user])) {
      return Status::Ok();
    }
    std::vector<core::PreemptCandidate> candidates;
    for (uint64_t id : pass.borrowers()) {
      if (!running.count(id)) continue;
      core::PreemptCandidate c;
      c.id = id;
      c.started_ms = tasks[id].start_ms;
      c.restartable = true;
      c.gpu_weight = GpusOf((*demands)[id]);
      candidates.push_back(c);
    }
    if (candidates.empty()) return Status::Ok();
    Result<core::PreemptionPlan> victims = core::ChooseVictims(head, candidates, at, model);
    if (!victims.ok()) return Status::Ok();  // Even all of them would not make room.
    if (config.fair_share) charge(at);
    for (uint64_t v : victims->victims) suspend(v, at);
    return schedule_again(schedule_again, at, /*after_moves=*/true);
  };

  // One scheduling pass, as Service::Schedule runs it; a second one after
  // moves were made, or borrowers suspended, for the head.
  auto schedule = [&](auto& self, int64_t at, bool after_moves) -> Status {
    if (queue.empty()) return Status::Ok();
    ++result.plans;
    std::map<core::Principal, double> factors;
    if (config.fair_share) {
      charge(at);
      std::set<core::Principal> active;
      for (const core::QueuedJob& q : queue) active.insert(principals[tasks[q.id].user]);
      for (const auto& [id, since] : running) active.insert(principals[tasks[id].user]);
      factors = core::FairShareFactors(usage.All(at), active, fs);
    }
    bool whole_waits_now = false;
    for (core::QueuedJob& q : queue) {
      const Task& t = tasks[q.id];
      q.rank = core::QueueRank(core::JobFairShare(factors, principals[t.user].name, ""),
                               at - t.arrival_ms, fs);
      whole_waits_now = whole_waits_now || t.whole;
    }
    std::stable_sort(queue.begin(), queue.end(), core::QueueBefore);
    model.options().pack_fractions = config.pack_fractions && whole_waits_now;
    std::vector<core::RunningJob> now_running;
    for (const auto& [id, since] : running) {
      core::RunningJob r{id, std::nullopt, std::nullopt};
      if (config.estimates) {
        r.expected_end_ms =
            core::ExpectedEndMs(at, at - tasks[id].start_ms, config.default_runtime_ms);
      }
      now_running.push_back(r);
    }
    core::PlanOptions opt;
    opt.backfill = config.backfill;
    opt.use_estimates = [&](uint64_t id) {
      return at - tasks[id].arrival_ms >= config.reserve_after_ms;
    };
    std::vector<core::RunningCharge> charges;
    if (config.quotas) {
      for (const auto& [id, since] : running) {
        charges.push_back({id, owners[tasks[id].user], quota_charge(id), tasks[id].start_ms});
      }
    }
    core::QuotaPass::Jobs hooks;
    hooks.owner = [&](uint64_t id) { return owners[tasks[id].user]; };
    hooks.ask = quota_charge;
    hooks.started_charge = quota_charge;
    hooks.borrowable = [](uint64_t) { return true; };
    core::QuotaPass quota_pass(quotas, /*borrowing=*/true, std::move(hooks), charges);
    quota_pass.Attach(&opt);
    const core::QueuePlan plan = core::PlanQueue(queue, now_running, at, model, opt);
    for (uint64_t id : plan.start) start(id, at);
    if (!plan.start.empty()) {
      std::erase_if(queue, [&](const core::QueuedJob& q) { return tasks[q.id].start_ms >= 0; });
    }
    if (plan.head == 0 || after_moves) return Status::Ok();
    if (!config.defragment) return reclaim(self, plan.head, quota_pass, at);
    // Moves for the head: running single-GPU tasks, each kept to its GPU's
    // model (a process is restored only onto a GPU of its kind), each moved
    // at most moves_per_hour times an hour.
    std::vector<core::PlacedTask> placed;
    for (const auto& [id, where] : model.held()) {
      core::PlacedTask t;
      t.id = id;
      t.demand = (*demands)[id];
      t.placement = where;
      if (where.gpu_count == 1) {
        t.demand.model_mask = 1ull << model.state().node(where.node).gpus[where.gpus[0]].model;
      }
      auto& times = moved_at[id];
      while (!times.empty() && at - times.front() >= kHourMs) times.pop_front();
      t.movable = t.demand.gpus == 1 && times.size() < config.moves_per_hour;
      placed.push_back(t);
    }
    std::sort(placed.begin(), placed.end(),
              [](const core::PlacedTask& a, const core::PlacedTask& b) { return a.id < b.id; });
    core::DefragOptions dopt;
    dopt.max_moves = config.max_moves;
    core::PlaceOptions popt = model.options();
    GPUSLICE_ASSIGN_OR_RETURN(
        std::optional<core::DefragPlan> moves,
        core::PlanDefrag(model.state(), (*demands)[plan.head], placed, popt, dopt));
    if (!moves) return reclaim(self, plan.head, quota_pass, at);
    for (const core::MoveProposal& m : moves->moves) {
      if (!model.Move(m.task_id, m.to)) {
        return core::InternalError("queue replay: a planned move did not fit");
      }
      moved_at[m.task_id].push_back(at);
      ++result.moves;
    }
    return self(self, at, /*after_moves=*/true);
  };

  while (next_arrival < order.size() || !departures.empty()) {
    int64_t next = INT64_MAX;
    if (next_arrival < order.size()) next = tasks[order[next_arrival]].arrival_ms;
    if (!departures.empty()) next = std::min(next, departures.top().first);
    // Between events nothing changes: integrate up to the next one.
    const double allocated = static_cast<double>(capacity - model.state().FreeGpuMilli());
    const double dt = static_cast<double>(next - now);
    alloc_ms += allocated * dt;
    if (!queue.empty()) {
      busy_ms += dt;
      busy_alloc_ms += allocated * dt;
    }
    if (!queue.empty() && dt > 0) {
      // While tasks wait, each user's max-min fair share of what is
      // allocated: no user more than it asks for (what it runs and what it
      // has queued), the rest shared out equally among the others.
      const size_t n = principals.size();
      std::vector<double> asks(n);
      double allocated_gpus = 0;
      bool all_busy = true;
      for (size_t u = 0; u < n; ++u) {
        asks[u] = running_gpus[u] + std::max(queued_gpus[u], 0.0);
        allocated_gpus += running_gpus[u];
        all_busy = all_busy && queued_tasks[u] > 0;
      }
      const std::vector<double> fair = MaxMinShares(asks, allocated_gpus);
      for (size_t u = 0; u < n; ++u) {
        result.users[u].fair_gpu_hours += fair[u] * dt / 3.6e6;
        result.users[u].contended_gpu_hours += running_gpus[u] * dt / 3.6e6;
        if (all_busy) {
          result.users[u].all_busy_fair_gpu_hours += fair[u] * dt / 3.6e6;
          result.users[u].all_busy_gpu_hours += running_gpus[u] * dt / 3.6e6;
        }
      }
      result.contended_hours += dt / 3.6e6;
      if (all_busy) {
        result.all_busy_hours += dt / 3.6e6;
        all_busy_stretch_ms += dt;
        result.longest_all_busy_hours =
            std::max(result.longest_all_busy_hours, all_busy_stretch_ms / 3.6e6);
      } else {
        all_busy_stretch_ms = 0;
      }
    } else if (dt > 0) {
      all_busy_stretch_ms = 0;
    }
    while (next_sample <= next) {
      result.alloc_series.push_back({static_cast<double>(next_sample - first) / 3.6e6,
                                     allocated / static_cast<double>(capacity)});
      next_sample += config.sample_ms;
    }
    now = next;
    while (!departures.empty() && departures.top().first <= now) {
      const auto [end, id] = departures.top();
      departures.pop();
      // A suspended borrower's departure went with its suspension.
      if (!running.count(id) || tasks[id].end_ms != end) continue;
      stop(id, now);
    }
    while (next_arrival < order.size() && tasks[order[next_arrival]].arrival_ms <= now) {
      const Task& t = tasks[order[next_arrival++]];
      enqueue(t.id);
      ++result.users[t.user].tasks;
    }
    GPUSLICE_RETURN_IF_ERROR(schedule(schedule, now, false));
  }
  if (!queue.empty()) {
    return core::InternalError("queue replay: " + std::to_string(queue.size()) +
                               " task(s) never started on an empty cluster");
  }

  const double span = static_cast<double>(now - first);
  result.simulated_hours = span / 3.6e6;
  result.mean_alloc = span > 0 ? alloc_ms / span / static_cast<double>(capacity) : 0;
  result.busy_hours = busy_ms / 3.6e6;
  result.mean_alloc_busy =
      busy_ms > 0 ? busy_alloc_ms / busy_ms / static_cast<double>(capacity) : 0;
  result.whole_tasks = whole_waits.size();
  result.fraction_tasks = fraction_waits.size();
  result.whole_wait_p50_s = Percentile(whole_waits, 50);
  result.whole_wait_p95_s = Percentile(whole_waits, 95);
  result.fraction_wait_p50_s = Percentile(fraction_waits, 50);
  result.fraction_wait_p95_s = Percentile(fraction_waits, 95);
  result.multi_tasks = multi_waits.size();
  result.multi_wait_p95_s = Percentile(multi_waits, 95);
  auto deviation = [](double got, double fair) { return fair > 0 ? (got - fair) / fair : 0; };
  for (UserShare& u : result.users) {
    u.deviation = deviation(u.contended_gpu_hours, u.fair_gpu_hours);
    result.max_user_deviation = std::max(result.max_user_deviation, std::abs(u.deviation));
    u.all_busy_deviation = deviation(u.all_busy_gpu_hours, u.all_busy_fair_gpu_hours);
    result.max_user_deviation_all_busy =
        std::max(result.max_user_deviation_all_busy, std::abs(u.all_busy_deviation));
  }
  result.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  return result;
}

std::string FormatQueueTable(const std::vector<QueueReplayResult>& runs) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line,
                "%-14s %6s %6s %7s %8s %8s %8s %8s %6s %7s %7s %8s %8s %7s %6s %6s %6s %7s\n",
                "config", "tasks", "moves", "reclaim", "alloc%", "busy%", "whole95", "frac95",
                "ratio", "whole50", "frac50", "multi95", "maxwait", "cont_h", "fair", "all_h",
                "long_h", "fair_ab");
  out += line;
  for (const QueueReplayResult& r : runs) {
    // A p95 wait under a second counts as one second, so that the ratio
    // stays defined when fractions hardly wait.
    const double ratio = r.whole_wait_p95_s / std::max(r.fraction_wait_p95_s, 1.0);
    std::snprintf(
        line, sizeof line,
        "%-14s %6llu %6llu %7llu %8.2f %8.2f %8.0f %8.0f %6.2f %7.0f %7.0f %8.0f %8.0f %7.1f "
        "%5.1f%% %6.2f %6.2f %6.1f%%\n",
        r.config.label.c_str(), static_cast<unsigned long long>(r.tasks),
        static_cast<unsigned long long>(r.moves), static_cast<unsigned long long>(r.reclaims),
        100 * r.mean_alloc, 100 * r.mean_alloc_busy, r.whole_wait_p95_s, r.fraction_wait_p95_s,
        ratio, r.whole_wait_p50_s, r.fraction_wait_p50_s, r.multi_wait_p95_s, r.max_wait_s,
        r.contended_hours, 100 * r.max_user_deviation, r.all_busy_hours, r.longest_all_busy_hours,
        100 * r.max_user_deviation_all_busy);
    out += line;
  }
  out +=
      "\n(waits in seconds; alloc% over the run, busy% while a task waited; ratio = whole-GPU "
      "p95 wait / fractional p95 wait (at least 1 s);\n multi95 = p95 wait of tasks of 2+ GPUs, "
      "maxwait = the longest wait;\n cont_h = hours some task waited; fair = "
      "largest deviation of a user's GPU-hours then from its max-min fair share;\n all_h = hours "
      "every user had a task waiting, long_h = the longest such stretch, fair_ab = fair over "
      "all_h)\n";
  for (const QueueReplayResult& r : runs) {
    out += "\n" + r.config.label +
           ": users (weight, tasks, GPU-h, GPU-h while tasks waited, its max-min fair "
           "share of those, deviation; the same while all users waited)\n";
    for (const UserShare& u : r.users) {
      std::snprintf(line, sizeof line,
                    "  %-4s %5.1f %6llu %9.1f %9.1f %9.1f %+7.1f%% %9.1f %9.1f %+7.1f%%\n",
                    u.name.c_str(), u.weight, static_cast<unsigned long long>(u.tasks), u.gpu_hours,
                    u.contended_gpu_hours, u.fair_gpu_hours, 100 * u.deviation,
                    u.all_busy_gpu_hours, u.all_busy_fair_gpu_hours, 100 * u.all_busy_deviation);
      out += line;
    }
  }
  return out;
}

std::string QueueResultsJson(const std::vector<QueueReplayResult>& runs,
                             const std::string& command) {
  nlohmann::json out = {{"command", command}, {"runs", nlohmann::json::array()}};
  for (const QueueReplayResult& r : runs) {
    const QueueReplayConfig& c = r.config;
    nlohmann::json users = nlohmann::json::array();
    for (const UserShare& u : r.users) {
      users.push_back({{"name", u.name},
                       {"weight", u.weight},
                       {"tasks", u.tasks},
                       {"gpu_hours", u.gpu_hours},
                       {"contended_gpu_hours", u.contended_gpu_hours},
                       {"fair_gpu_hours", u.fair_gpu_hours},
                       {"deviation", u.deviation},
                       {"all_busy_gpu_hours", u.all_busy_gpu_hours},
                       {"all_busy_fair_gpu_hours", u.all_busy_fair_gpu_hours},
                       {"all_busy_deviation", u.all_busy_deviation}});
    }
    nlohmann::json series = nlohmann::json::array();
    for (const auto& [h, a] : r.alloc_series) series.push_back({h, a});
    out["runs"].push_back({{"label", c.label},
                           {"policy", std::string(core::PolicyName(c.policy))},
                           {"seed", c.seed},
                           {"arrival_scale", c.arrival_scale},
                           {"from_s", c.from_s},
                           {"until_s", c.until_s},
                           {"max_runtime_ms", c.max_runtime_ms},
                           {"fair_share", c.fair_share},
                           {"estimates", c.estimates},
                           {"defragment", c.defragment},
                           {"pack_fractions", c.pack_fractions},
                           {"quotas", c.quotas},
                           {"capacity_gpus", r.capacity_gpus},
                           {"tasks", r.tasks},
                           {"never_fit", r.never_fit},
                           {"moves", r.moves},
                           {"reclaims", r.reclaims},
                           {"plans", r.plans},
                           {"simulated_hours", r.simulated_hours},
                           {"mean_alloc", r.mean_alloc},
                           {"busy_hours", r.busy_hours},
                           {"mean_alloc_busy", r.mean_alloc_busy},
                           {"whole_tasks", r.whole_tasks},
                           {"fraction_tasks", r.fraction_tasks},
                           {"whole_wait_p50_s", r.whole_wait_p50_s},
                           {"whole_wait_p95_s", r.whole_wait_p95_s},
                           {"fraction_wait_p50_s", r.fraction_wait_p50_s},
                           {"fraction_wait_p95_s", r.fraction_wait_p95_s},
                           {"multi_tasks", r.multi_tasks},
                           {"multi_wait_p95_s", r.multi_wait_p95_s},
                           {"max_wait_s", r.max_wait_s},
                           {"contended_hours", r.contended_hours},
                           {"max_user_deviation", r.max_user_deviation},
                           {"all_busy_hours", r.all_busy_hours},
                           {"longest_all_busy_hours", r.longest_all_busy_hours},
                           {"max_user_deviation_all_busy", r.max_user_deviation_all_busy},
                           {"users", users},
                           {"alloc_series", series},
                           {"wall_seconds", r.wall_seconds}});
  }
  return out.dump(2) + "\n";
}

}  // namespace gpuslice::replay

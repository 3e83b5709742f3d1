#include "daemon/services/replicas.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <set>

#include "core/units.h"
#include "daemon/api/api_json.h"
#include "daemon/base/log.h"

namespace gpuslice::daemon {

using core::Result;
using core::Status;
using nlohmann::json;

namespace {

constexpr const char* kServiceEnv = "GPUSLICE_SERVICE=";
constexpr const char* kServiceIdEnv = "GPUSLICE_SERVICE_ID=";
constexpr const char* kReplicaEnv = "GPUSLICE_SERVICE_REPLICA=";
// How many of the newest events a restart reads for the last decisions.
constexpr size_t kRecentEvents = 5000;

bool StartsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// The value of `prefix` ("KEY=") in `env`, or "".
std::string EnvValue(const std::vector<std::string>& env, const char* prefix) {
  for (const std::string& e : env) {
    if (StartsWith(e, prefix)) return e.substr(std::char_traits<char>::length(prefix));
  }
  return "";
}

uint32_t ParseIndex(const std::string& s) {
  uint32_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size() ? v : 0;
}

std::string Dur(int64_t ms) { return core::FormatDuration(std::chrono::milliseconds(ms)); }

// How a replica's job ended, for the replace event.
std::string HowItEnded(const core::Job& job) {
  std::string s(core::JobStateName(job.state));
  if (job.state == core::JobState::kExited) s += " with code " + std::to_string(job.exit_code);
  if (!job.reason.empty()) s += " (" + job.reason + ")";
  return s;
}

json SpecJson(const core::AutoscalePolicy& p, const json& request) {
  return {{"request", request},
          {"scale_up_after_ms", p.scale_up_after_ms},
          {"scale_down_after_ms", p.scale_down_after_ms},
          {"cooldown_ms", p.cooldown_ms},
          {"healthy_run_ms", p.healthy_run_ms},
          {"backoff_initial_ms", p.backoff_initial_ms},
          {"backoff_max_ms", p.backoff_max_ms},
          {"crash_loop_after", p.crash_loop_after}};
}

}  // namespace

std::string ServiceOfJob(const core::Job& job) { return EnvValue(job.env, kServiceEnv); }

Status ValidateServiceName(const std::string& name) {
  if (name.empty() || name.size() > 48) {
    return core::InvalidArgumentError("service name must have 1 to 48 characters, got " +
                                      std::to_string(name.size()));
  }
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum && (i == 0 || (c != '-' && c != '_' && c != '.'))) {
      return core::InvalidArgumentError("bad service name '" + name.substr(0, 64) +
                                        "': use letters, digits, '-', '_' and '.', starting "
                                        "with a letter or digit");
    }
  }
  return Status::Ok();
}

ReplicaManager::ReplicaManager(Service& service, Clock& clock) : service_(service), clock_(clock) {}

Result<ReplicaManager::Managed> ReplicaManager::Build(StoredService stored) const {
  Managed m;
  json spec = json::parse(stored.spec, nullptr, /*allow_exceptions=*/false);
  if (!spec.is_object() || !spec.contains("request") || !spec["request"].is_object()) {
    return core::InvalidArgumentError("service spec must be an object with a request object");
  }
  core::AutoscalePolicy& p = m.policy;
  p.replicas = stored.range;
  p.target_milli = stored.target_milli;
  auto ms = [&](const char* key, int64_t* out) {
    if (spec.contains(key) && spec[key].is_number_integer()) *out = spec[key].get<int64_t>();
  };
  ms("scale_up_after_ms", &p.scale_up_after_ms);
  ms("scale_down_after_ms", &p.scale_down_after_ms);
  ms("cooldown_ms", &p.cooldown_ms);
  ms("healthy_run_ms", &p.healthy_run_ms);
  ms("backoff_initial_ms", &p.backoff_initial_ms);
  ms("backoff_max_ms", &p.backoff_max_ms);
  if (spec.contains("crash_loop_after") && spec["crash_loop_after"].is_number_unsigned()) {
    p.crash_loop_after = spec["crash_loop_after"].get<uint32_t>();
  }
  GPUSLICE_RETURN_IF_ERROR(p.Validate());

  // A replica is submitted exactly as POST /v1/jobs would be, so it gets the
  // same validation (and any request field the jobs API learns).
  json body = spec["request"];
  for (const char* reserved : {"argv", "cwd", "env", "name", "mode"}) {
    if (body.contains(reserved)) {
      return core::InvalidArgumentError(std::string("request: '") + reserved +
                                        "' is set by the service");
    }
  }
  body["mode"] = "submit";
  body["argv"] = stored.argv;
  body["cwd"] = stored.cwd;
  std::vector<std::string> env;
  for (const std::string& e : stored.env) {
    if (!StartsWith(e, kServiceEnv) && !StartsWith(e, kServiceIdEnv) &&
        !StartsWith(e, kReplicaEnv)) {
      env.push_back(e);
    }
  }
  body["env"] = env;
  GPUSLICE_ASSIGN_OR_RETURN(m.templ, ParseSubmitBody(body.dump()));
  if (m.templ.argv.empty()) return core::InvalidArgumentError("no command given");
  GPUSLICE_ASSIGN_OR_RETURN(core::ResourceRequest request, core::BuildRequest(m.templ.fields));
  m.describe = request.Describe();
  m.state.desired = std::clamp(stored.desired, p.replicas.min, p.replicas.max);
  stored.desired = m.state.desired;
  m.stored = std::move(stored);
  return m;
}

Status ReplicaManager::Start() {
  GPUSLICE_ASSIGN_OR_RETURN(table_,
                            ServiceTable::Open(service_.options().state_dir + "/ledger.db"));
  auto loaded = table_->LoadLive();
  if (!loaded.ok()) {
    table_.reset();
    return loaded.status();
  }
  std::vector<StoredService> stored = std::move(*loaded);
  int64_t now = clock_.NowMs();
  std::vector<JobView> live_jobs = service_.reads().List(/*include_finished=*/false);
  // The last scaling decision of each service, for `service ls`, from the
  // newest events (a decision older than those shows as none).
  std::vector<Event> recent;
  if (!stored.empty()) {
    EventQuery q;
    q.limit = kRecentEvents;
    if (auto e = service_.events().Query(q); e.ok()) recent = std::move(*e);
  }
  for (StoredService& s : stored) {
    std::string name = s.name;
    std::vector<uint64_t> rows = s.replica_jobs;
    auto built = Build(std::move(s));
    if (!built.ok()) {
      LogError("service " + name + ": cannot be restored: " + built.status().message());
      continue;
    }
    Managed& m = services_[name] = std::move(*built);
    // A restart is judged like a change: decisions wait for one cool-down.
    m.state.last_change_ms = now;
    const std::string prefix = "service " + name + ": ";
    for (auto e = recent.rbegin(); e != recent.rend(); ++e) {
      if (e->kind == "service_scale" && e->message.rfind(prefix, 0) == 0) {
        m.last_decision = e->message.substr(prefix.size());
        m.last_decision_ms = e->at_ms;
        break;
      }
    }
    std::set<uint32_t> used;
    auto adopt = [&](const core::Job& job) {
      uint32_t index = ParseIndex(EnvValue(job.env, kReplicaEnv));
      if (index == 0 || used.count(index)) {
        index = 1;
        while (used.count(index)) ++index;
      }
      used.insert(index);
      m.replicas[job.id] = Replica{index, false};
    };
    for (uint64_t id : rows) {
      auto v = service_.reads().Get(id);
      if (v.ok() && v->job.IsLive()) {
        adopt(v->job);
      } else {
        // Ended while the daemon was down: replaced by the next Tick.
        (void)table_->DropReplica(m.stored.id, id);
      }
    }
    // A replica submitted just before a crash, before its row was written.
    std::string tag = std::to_string(m.stored.id);
    for (const JobView& v : live_jobs) {
      if (m.replicas.count(v.job.id) || v.job.uid != m.stored.uid ||
          EnvValue(v.job.env, kServiceIdEnv) != tag) {
        continue;
      }
      adopt(v.job);
      (void)table_->AddReplica(m.stored.id, v.job.id);
    }
    LogInfo("service " + name + ": restored with " + std::to_string(m.replicas.size()) +
            " live replica(s), desired " + std::to_string(m.state.desired));
  }
  return Status::Ok();
}

Caller ReplicaManager::OwnerOf(const Managed& m) const {
  Caller c;
  c.uid = m.stored.uid;
  c.gid = m.stored.gid;
  c.user = m.stored.user;
  c.admin = false;
  c.local = true;
  return c;
}

Status ReplicaManager::CheckOwner(const Caller& caller, const Managed& m) const {
  if (caller.admin || (caller.local && caller.uid == m.stored.uid)) return Status::Ok();
  return core::PermissionDeniedError("service " + m.stored.name + " belongs to " + m.stored.user +
                                     "; only its owner, root or the admin group may change it");
}

ReplicaManager::Managed* ReplicaManager::Find(const std::string& name) {
  auto it = services_.find(name);
  return it == services_.end() ? nullptr : &it->second;
}

void ReplicaManager::Decided(Managed& m, int64_t now, const std::string& kind, uint64_t job_id,
                             const std::string& message) {
  service_.RecordEvent(kind, job_id, m.stored.user, "service " + m.stored.name + ": " + message);
  if (kind == "service_scale") {
    m.last_decision = message;
    m.last_decision_ms = now;
  }
}

void ReplicaManager::Persist(Managed& m, int64_t now) {
  m.stored.desired = m.state.desired;
  m.stored.range = m.policy.replicas;
  if (!table_) return;
  Status s = table_->Update(m.stored, now);
  if (!s.ok()) LogWarn("service " + m.stored.name + ": not saved: " + s.message());
}

Result<uint64_t> ReplicaManager::SubmitReplica(Managed& m) {
  std::set<uint32_t> used;
  for (const auto& [id, r] : m.replicas) used.insert(r.index);
  uint32_t index = 1;
  while (used.count(index)) ++index;
  SubmitSpec spec = m.templ;
  spec.fields.name = m.stored.name + "-" + std::to_string(index);
  spec.env.push_back(kServiceEnv + m.stored.name);
  spec.env.push_back(kServiceIdEnv + std::to_string(m.stored.id));
  spec.env.push_back(kReplicaEnv + std::to_string(index));
  GPUSLICE_ASSIGN_OR_RETURN(JobView v, service_.intake().Submit(OwnerOf(m), std::move(spec)));
  m.replicas[v.job.id] = Replica{index, false};
  if (table_) {
    // Without the row a restart still finds the job by its tag.
    Status s = table_->AddReplica(m.stored.id, v.job.id);
    if (!s.ok()) LogWarn("service " + m.stored.name + ": replica row not saved: " + s.message());
  }
  return v.job.id;
}

void ReplicaManager::StopReplica(Managed& m, uint64_t job_id, const std::string& why) {
  Replica& r = m.replicas[job_id];
  r.stopping = true;
  Caller owner = OwnerOf(m);
  Status s = service_.Cancel(owner, job_id);
  if (!s.ok() && s.code() != core::StatusCode::kFailedPrecondition &&
      s.code() != core::StatusCode::kNotFound) {
    LogWarn("service " + m.stored.name + ": cannot stop job " + std::to_string(job_id) + ": " +
            s.message());
  }
  Decided(m, clock_.NowMs(), "service_stop", job_id,
          "stopping replica " + m.stored.name + "-" + std::to_string(r.index) + " (job " +
              std::to_string(job_id) + "): " + why);
}

void ReplicaManager::TickOne(Managed& m, int64_t now) {
  const core::AutoscalePolicy& p = m.policy;
  core::ServiceObservation obs;
  obs.now_ms = now;
  double sum = 0;
  uint32_t samples = 0;
  std::vector<core::ReplicaInfo> candidates;
  for (auto it = m.replicas.begin(); it != m.replicas.end();) {
    uint64_t id = it->first;
    Replica r = it->second;
    auto v = service_.reads().Get(id);
    if (!v.ok() || !v->job.IsLive()) {
      core::ReplicaEnd end;
      end.stopped_by_service = r.stopping;
      std::string how = "is gone";
      if (v.ok()) {
        const core::Job& job = v->job;
        if (job.started_ms > 0 && job.ended_ms >= job.started_ms) {
          end.ran_ms = job.ended_ms - job.started_ms;
        }
        how = HowItEnded(job);
      }
      core::RestartDecision d = core::OnReplicaEnded(p, m.state, end, now);
      if (!r.stopping) {
        std::string msg = "replica " + m.stored.name + "-" + std::to_string(r.index) + " (job " +
                          std::to_string(id) + ") " + how + " after " + Dur(end.ran_ms) + "; ";
        if (d.replace_at_ms > now) {
          msg += "replacing it in " + Dur(d.replace_at_ms - now) + " (failure " +
                 std::to_string(m.state.consecutive_failures) + " in a row)";
        } else {
          msg += "replacing it";
        }
        Decided(m, now, "service_replace", id, msg);
        if (d.entered_crash_loop) {
          Decided(m, now, "service_crash_loop", 0,
                  "crash loop: " + std::to_string(m.state.consecutive_failures) +
                      " replicas in a row ended within " + Dur(p.healthy_run_ms) +
                      "; retrying with backoff up to " + Dur(p.backoff_max_ms));
        }
      }
      if (table_) (void)table_->DropReplica(m.stored.id, id);
      it = m.replicas.erase(it);
      continue;
    }
    ++it;
    const core::Job& job = v->job;
    if (r.stopping) {
      ++obs.stopping;
    } else if (job.state == core::JobState::kRunning) {
      ++obs.running;
      if (core::OnReplicaRunning(p, m.state, now - job.started_ms)) {
        Decided(m, now, "service_recovered", id,
                "crash loop over: replica " + m.stored.name + "-" + std::to_string(r.index) +
                    " has run " + Dur(now - job.started_ms));
      }
      auto u = service_.usage().Of(id);
      // A replica NVML has no figure for (a MIG instance without GPM) is
      // left out of the mean, as one not yet sampled: not counted as idle.
      if (u && u->sampled_ms >= job.started_ms && u->gpu_util_known) {
        sum += core::SliceUsePct(u->gpu_util_pct, job.allocation.compute_milli);
        ++samples;
      }
      candidates.push_back({id, true, job.started_ms});
    } else {
      ++obs.pending;
      candidates.push_back({id, false, job.submitted_ms});
    }
  }
  m.mean_use_pct.reset();
  if (samples > 0) m.mean_use_pct = sum / samples;
  obs.mean_use_pct = m.mean_use_pct;

  core::ScaleDecision d = core::DecideScale(p, m.state, obs);
  if (d.action != core::ScaleAction::kNone) {
    Decided(m, now, "service_scale", 0, d.reason);
    Persist(m, now);
  }

  // Match the replicas to the desired count.
  uint32_t live = obs.running + obs.pending;
  while (live > m.state.desired) {
    auto victim = core::ChooseReplicaToStop(candidates);
    if (!victim) break;
    candidates.erase(std::find_if(candidates.begin(), candidates.end(),
                                  [&](const core::ReplicaInfo& c) { return c.id == *victim; }));
    StopReplica(m, *victim, "desired " + std::to_string(m.state.desired));
    --live;
  }
  uint32_t start = core::ReplicasToStart(m.state, live, now);
  for (uint32_t i = 0; i < start; ++i) {
    auto id = SubmitReplica(m);
    if (!id.ok()) {
      core::RestartDecision r = core::OnReplicaEnded(p, m.state, {}, now);
      Decided(m, now, "service_replace", 0,
              "cannot submit a replica: " + id.status().message() + "; retrying in " +
                  Dur(r.replace_at_ms - now));
      break;
    }
  }
}

void ReplicaManager::Tick() {
  int64_t now = clock_.NowMs();
  for (auto& [name, m] : services_) TickOne(m, now);
}

Result<ServiceView> ReplicaManager::Create(const Caller& caller, ServiceCreateSpec spec) {
  if (!caller.local) {
    return core::PermissionDeniedError(
        "services can only be created over the local socket, so their replicas run as the caller");
  }
  GPUSLICE_RETURN_IF_ERROR(ValidateServiceName(spec.name));
  GPUSLICE_RETURN_IF_ERROR(spec.policy.Validate());
  if (service_.degraded_mode().degraded()) {
    return core::UnavailableError("daemon degraded (" + service_.degraded_mode().reason() +
                                  "): not accepting new services");
  }
  if (!table_) {
    return core::UnavailableError(
        "services unavailable: their ledger tables could not be opened (see the daemon log)");
  }
  if (services_.count(spec.name)) {
    return core::AlreadyExistsError("a service named '" + spec.name + "' exists");
  }
  if (!spec.request.is_object()) return core::InvalidArgumentError("request must be an object");
  int64_t now = clock_.NowMs();
  StoredService s;
  s.name = spec.name;
  s.uid = caller.uid;
  s.gid = caller.gid;
  s.user = caller.user;
  s.range = spec.policy.replicas;
  s.desired = spec.policy.replicas.min;
  s.target_milli = spec.policy.target_milli;
  s.spec = SpecJson(spec.policy, spec.request).dump();
  s.argv = std::move(spec.argv);
  s.cwd = std::move(spec.cwd);
  s.env = std::move(spec.env);
  s.created_ms = now;
  GPUSLICE_ASSIGN_OR_RETURN(Managed m, Build(s));  // Validates before anything is stored.
  GPUSLICE_ASSIGN_OR_RETURN(m.stored.id, table_->Insert(m.stored, now));
  std::string name = m.stored.name;
  Managed& placed = services_[name] = std::move(m);
  for (uint32_t i = 0; i < placed.state.desired; ++i) {
    auto id = SubmitReplica(placed);
    if (id.ok()) continue;
    // All or nothing: a service whose replicas cannot even be submitted
    // (e.g. a request no GPU here can hold) is refused.
    Caller owner = OwnerOf(placed);
    for (const auto& [job, r] : placed.replicas) (void)service_.Cancel(owner, job);
    (void)table_->MarkRemoved(placed.stored.id, now);
    services_.erase(name);
    return id.status();
  }
  Decided(placed, now, "service_created", 0,
          "created by " + caller.user + ": " + core::FormatReplicaRange(placed.policy.replicas) +
              " replicas of " + placed.describe + ", target " +
              core::FormatShareMilli(placed.policy.target_milli));
  return View(placed);
}

Result<ServiceView> ReplicaManager::Scale(const Caller& caller, const std::string& name,
                                          std::optional<uint32_t> desired,
                                          std::optional<core::ReplicaRange> range) {
  Managed* m = Find(name);
  if (m == nullptr) return core::NotFoundError("no service '" + name + "'");
  GPUSLICE_RETURN_IF_ERROR(CheckOwner(caller, *m));
  if (!desired && !range) {
    return core::InvalidArgumentError(
        "give a replica count, a range (--replicas MIN-MAX), or both");
  }
  int64_t now = clock_.NowMs();
  core::AutoscalePolicy policy = m->policy;
  core::AutoscaleState state = m->state;
  if (range) {
    policy.replicas = *range;
    GPUSLICE_RETURN_IF_ERROR(policy.Validate());
    core::ApplyRange(policy, state, *range, now);
  }
  if (desired) GPUSLICE_RETURN_IF_ERROR(core::SetDesired(policy, state, *desired, now));
  std::string message = "set by " + caller.user + ": " + std::to_string(m->state.desired) + " -> " +
                        std::to_string(state.desired) + " replicas";
  std::string old_range = core::FormatReplicaRange(m->policy.replicas);
  std::string new_range = core::FormatReplicaRange(policy.replicas);
  message += old_range == new_range ? " (range " + new_range + ")"
                                    : ", range " + old_range + " -> " + new_range;
  m->policy = policy;
  m->state = state;
  Persist(*m, now);
  Decided(*m, now, "service_scale", 0, message);
  TickOne(*m, now);
  return View(*m);
}

Result<std::vector<uint64_t>> ReplicaManager::Remove(const Caller& caller,
                                                     const std::string& name) {
  Managed* m = Find(name);
  if (m == nullptr) return core::NotFoundError("no service '" + name + "'");
  GPUSLICE_RETURN_IF_ERROR(CheckOwner(caller, *m));
  if (!table_) return core::UnavailableError("ledger unavailable: cannot record the removal");
  int64_t now = clock_.NowMs();
  std::vector<uint64_t> cancelled;
  Caller owner = OwnerOf(*m);
  for (auto& [id, r] : m->replicas) {
    Status s = service_.Cancel(owner, id);
    if (s.ok()) {
      cancelled.push_back(id);
    } else if (s.code() != core::StatusCode::kFailedPrecondition &&
               s.code() != core::StatusCode::kNotFound) {
      return s;
    }
    r.stopping = true;
  }
  GPUSLICE_RETURN_IF_ERROR(table_->MarkRemoved(m->stored.id, now));
  std::string list;
  for (uint64_t id : cancelled) list += (list.empty() ? "" : ", ") + std::to_string(id);
  Decided(*m, now, "service_removed", 0,
          "removed by " + caller.user + "; cancelled job(s) " + (list.empty() ? "none" : list));
  services_.erase(name);
  return cancelled;
}

ServiceView ReplicaManager::View(const Managed& m) {
  ServiceView v;
  v.id = m.stored.id;
  v.name = m.stored.name;
  v.user = m.stored.user;
  v.uid = m.stored.uid;
  v.policy = m.policy;
  v.request_describe = m.describe;
  json spec = json::parse(m.stored.spec, nullptr, false);
  v.request = spec.is_object() && spec.contains("request") ? spec["request"] : json::object();
  v.argv = m.stored.argv;
  v.created_ms = m.stored.created_ms;
  v.desired = m.state.desired;
  v.mean_use_pct = m.mean_use_pct;
  v.last_decision_ms = m.last_decision_ms;
  v.last_decision = m.last_decision;
  v.crash_loop = m.state.crash_loop;
  v.consecutive_failures = m.state.consecutive_failures;
  v.restart_not_before_ms = m.state.restart_not_before_ms;
  for (const auto& [id, r] : m.replicas) {
    ReplicaView rv;
    rv.job_id = id;
    rv.name = m.stored.name + "-" + std::to_string(r.index);
    rv.stopping = r.stopping;
    auto job = service_.reads().Get(id);
    if (job.ok()) {
      rv.state = job->job.state;
      if (rv.state == core::JobState::kRunning) {
        auto u = service_.usage().Of(id);
        if (u && u->sampled_ms >= job->job.started_ms && u->gpu_util_known) {
          rv.use_pct = core::SliceUsePct(u->gpu_util_pct, job->job.allocation.compute_milli);
        }
      }
    }
    if (r.stopping) {
      ++v.stopping;
    } else if (rv.state == core::JobState::kRunning) {
      ++v.running;
    } else if (rv.state == core::JobState::kQueued) {
      ++v.pending;
    }
    v.replicas.push_back(rv);
  }
  return v;
}

Result<ServiceView> ReplicaManager::Get(const std::string& name) {
  Managed* m = Find(name);
  if (m == nullptr) return core::NotFoundError("no service '" + name + "'");
  return View(*m);
}

std::vector<ServiceView> ReplicaManager::List() {
  std::vector<ServiceView> out;
  for (const auto& [name, m] : services_) out.push_back(View(m));
  return out;
}

}  // namespace gpuslice::daemon

// ForeignUse: see foreign_use.h.

#include "daemon/usage/foreign_use.h"

#include <signal.h>

#include <algorithm>
#include <optional>

#include "core/units.h"
#include "daemon/base/log.h"

namespace gpuslice::daemon {

void ForeignUse::Watch(const Sample& sample) {
  const PolicyConfig& rules = sample.rules;
  const std::string& admin_group = sample.admin_group;
  const auto& job_of_pid = sample.job_of_pid;
  const auto& container_of = sample.container_of;
  const OverLimit& over_limit = sample.over_limit;
  NodeCapacity* const capacity = sample.capacity;
  std::vector<ForeignProcess> now;
  std::unordered_map<int64_t, int> seen;
  std::unordered_map<int64_t, std::string> spared_as;  // Why `foreign` leaves it.
  // Foreign use of one GPU, or of one MIG instance: bytes, and who (the
  // largest process, "and N more").
  struct Use {
    uint64_t bytes = 0;
    uint64_t largest = 0;
    size_t processes = 0;
    std::string who;
    void Add(const GpuProcess& p, const std::string& user) {
      bytes += p.used_memory;
      if (who.empty() || p.used_memory > largest) {
        largest = p.used_memory;
        who = "pid " + std::to_string(p.pid) + ", user " + user;
      }
      ++processes;
    }
    std::string Who() const {
      return processes > 1 ? who + ", and " + std::to_string(processes - 1) + " more" : who;
    }
  };
  std::map<uint32_t, Use> per_gpu;
  std::map<std::string, Use> per_mig;  // By MIG UUID.
  // Per foreign pid on a GPU in MIG mode: every MIG device of its GPU
  // instance (they share the instance's memory).
  std::unordered_map<int64_t, std::vector<std::string>> instance_of;
  std::set<uint32_t> mig_gpus;
  for (const GpuUsage& g : sample.gpus) {
    auto info = std::find_if(sample.inventory.gpus.begin(), sample.inventory.gpus.end(),
                             [&](const GpuInfo& x) { return x.index == g.index; });
    bool mig = info != sample.inventory.gpus.end() && info->mig_enabled;
    if (mig) mig_gpus.insert(g.index);
    for (const GpuProcess& p : g.processes) {
      if (job_of_pid.count(p.pid)) continue;
      ForeignProcess f;
      f.gpu_index = g.index;
      f.pid = p.pid;
      f.used_memory = p.used_memory;
      f.user = "?";
      if (std::optional<ProcessOwner> o = hooks_.processes().OwnerOf(p.pid)) {
        f.uid = o->uid;
        f.user = o->user;
        const auto& allowed = rules.foreign_allowed_groups;
        for (const std::string& grp : o->groups) {
          if (!admin_group.empty() && grp == admin_group) spared_as[p.pid] = "the admin group";
          if (std::find(allowed.begin(), allowed.end(), grp) != allowed.end() &&
              !spared_as.count(p.pid)) {
            spared_as[p.pid] = "an allowed group";
          }
        }
        if (auto c = container_of.find(p.pid); c != container_of.end()) {
          spared_as[p.pid] = "a container of external job " + std::to_string(c->second);
        }
        if (o->uid == 0) spared_as[p.pid] = "root";
        f.spared = spared_as.count(p.pid) > 0;
      }
      per_gpu[g.index].Add(p, f.user);
      if (mig) {
        if (const MigInstance* m = MigInstanceOf(*info, p)) f.mig_uuid = m->uuid;
        // Every MIG device of its GPU instance: they share that instance's
        // memory, and a job on one is given all of it. A process whose
        // instance NVML does not name takes none (it is still shown).
        for (const MigInstance& m : info->mig) {
          if (p.gpu_instance_id != kNoMigInstance && m.gpu_instance_id == p.gpu_instance_id) {
            per_mig[m.uuid].Add(p, f.user);
            instance_of[p.pid].push_back(m.uuid);
          }
        }
      }
      if (!seen.count(p.pid)) {
        auto before = seen_.find(p.pid);
        seen[p.pid] = before == seen_.end() ? 1 : before->second + 1;
      }
      now.push_back(std::move(f));
    }
  }
  // Charged in placement at once (NVML says the memory is taken, whoever
  // holds it): a whole GPU's memory, or a MIG instance whole; and on a whole
  // GPU, the memory jobs hold over their limits. A GPU or instance without
  // such use is cleared.
  if (capacity) {
    for (const GpuInfo& g : sample.inventory.gpus) {
      if (g.mig_enabled) {
        for (const MigInstance& m : g.mig) {
          auto it = per_mig.find(m.uuid);
          if (it == per_mig.end()) {
            capacity->SetForeignMig(m.uuid, 0, "");
          } else {
            capacity->SetForeignMig(m.uuid, it->second.bytes, it->second.Who());
          }
        }
        continue;
      }
      auto it = per_gpu.find(g.index);
      if (it == per_gpu.end()) {
        capacity->SetForeign(g.index, 0, "");
      } else {
        capacity->SetForeign(g.index, it->second.bytes, it->second.Who());
      }
      auto over = over_limit.find(g.index);
      if (over == over_limit.end()) {
        capacity->SetOverLimit(g.index, 0, "");
      } else {
        capacity->SetOverLimit(g.index, over->second.first, over->second.second);
      }
    }
  }
  // Which processes `foreign` ends (protect: those that take promised
  // memory). A process is
  // ended from its second sample on (a job's process may be listed once
  // between its job's end and NVML's next update), never root's, the admin
  // group's or an allowed group's, never one whose owner is unknown (gone).
  auto endable = [&](const ForeignProcess& f) { return !f.spared && f.uid >= 0; };
  std::set<int64_t> to_end;
  std::map<int64_t, std::string> end_why;
  if (rules.foreign == ForeignAction::kKill) {
    for (const ForeignProcess& f : now) {
      if (endable(f)) to_end.insert(f.pid);
    }
  } else if (rules.foreign == ForeignAction::kProtect && capacity) {
    // On a whole GPU: what no job was promised there, less what jobs hold
    // over their limits and what spared processes hold, is what the others
    // may hold. Past it they take memory a job was promised (it would fail
    // inside its own limit): the largest are ended until the rest fits.
    std::map<uint32_t, std::vector<const ForeignProcess*>> endable_on;
    std::map<uint32_t, uint64_t> spared_bytes;
    for (const ForeignProcess& f : now) {
      if (mig_gpus.count(f.gpu_index)) continue;
      if (endable(f)) {
        endable_on[f.gpu_index].push_back(&f);
      } else {
        spared_bytes[f.gpu_index] += f.used_memory;
      }
    }
    for (auto& [gpu, list] : endable_on) {
      uint64_t room = capacity->UnpromisedBytes(gpu);
      auto over = over_limit.find(gpu);
      const uint64_t taken =
          (over == over_limit.end() ? 0 : over->second.first) + spared_bytes[gpu];
      room = room > taken ? room - taken : 0;
      uint64_t held = 0;
      for (const ForeignProcess* f : list) held += f->used_memory;
      std::sort(list.begin(), list.end(), [](const ForeignProcess* a, const ForeignProcess* b) {
        return a->used_memory > b->used_memory;
      });
      for (const ForeignProcess* f : list) {
        if (held <= room) break;
        held -= f->used_memory;
        to_end.insert(f->pid);
        end_why[f->pid] = "it takes memory promised to jobs on GPU " + std::to_string(gpu) + " (" +
                          core::FormatBytes(room) + " of it is free for use outside them)";
      }
    }
    // In MIG mode: a process in a GPU instance a job holds takes its memory.
    for (const ForeignProcess& f : now) {
      if (!endable(f) || !instance_of.count(f.pid)) continue;
      for (const std::string& uuid : instance_of[f.pid]) {
        if (!capacity->mig().HeldByJob(uuid)) continue;
        to_end.insert(f.pid);
        end_why[f.pid] = "it runs in MIG " + uuid + ", which a job holds";
        break;
      }
    }
  }
  // Reported once each, from the second sample on; ended (once) when
  // `foreign` says so, which may come later than the report (protect: once
  // it takes memory a job was promised).
  for (const ForeignProcess& f : now) {
    if (seen[f.pid] < 2) continue;
    const bool end = to_end.count(f.pid) && !ended_.count(f.pid);
    if (!end && reported_.count(f.pid)) continue;
    reported_.insert(f.pid);
    std::string what = "pid " + std::to_string(f.pid) + " (user " + f.user + ") holds " +
                       core::FormatBytes(f.used_memory) + " on GPU " + std::to_string(f.gpu_index) +
                       (f.mig_uuid.empty() ? " outside gpuslice; charged to the GPU in placement"
                                           : " (MIG " + f.mig_uuid +
                                                 ") outside gpuslice; the instance is taken in "
                                                 "placement");
    const std::string mode = "foreign = " + std::string(ForeignActionName(rules.foreign));
    if (end) {
      ended_.insert(f.pid);
      core::Status s = hooks_.processes().SignalIfOwnedBy(f.pid, uint32_t(f.uid), SIGKILL);
      const std::string because = end_why.count(f.pid) ? ": " + end_why[f.pid] : "";
      what += s.ok() ? "; killed" + because + " (" + mode + ")"
                     : "; cannot kill it" + because + ": " + s.message();
    } else if (rules.foreign != ForeignAction::kReport && f.spared) {
      what += "; spared (" + spared_as[f.pid] + ")";
    } else if (rules.foreign == ForeignAction::kKill && f.uid < 0) {
      what += "; gone before it could be ended";
    }
    hooks_.report(f.user, what);
    LogWarn(what);
  }
  seen_ = std::move(seen);
  // Forget pids that are gone, so a reused pid is reported anew.
  for (auto it = reported_.begin(); it != reported_.end();) {
    it = seen_.count(*it) ? std::next(it) : reported_.erase(it);
  }
  for (auto it = ended_.begin(); it != ended_.end();) {
    it = seen_.count(*it) ? std::next(it) : ended_.erase(it);
  }
  now_ = std::move(now);
}

}  // namespace gpuslice::daemon

#pragma once

// Job cgroups, behind a seam (FakeCgroups in cgroup_fake.h for tests).
//
// Why: a job's processes are found by the cgroup the daemon puts its leader
// in, not by its process group. A child that calls setsid, double-forks or
// daemonises leaves the process group but cannot leave the cgroup (only root
// may move it), so the job lasts until its cgroup is empty and `cancel` ends
// every process of it.
//
// What the machine mounts is detected at start from /proc/self/mountinfo:
// the unified (v2) hierarchy only, v1 hierarchies only, or both ("hybrid":
// v1 controllers plus a v2 mount, often without controllers). Each role takes
// the hierarchy that can serve it:
//   tracking (membership, "populated", kill): v2 when mounted, else v1 pids,
//     else v1 freezer;
//   freezing (stop/continue a whole job): v2 cgroup.freeze, else v1 freezer;
//   cpu limit: v2 when its cpu controller is available, else v1 cpu;
//   memory limit: v2 when its memory controller is available, else v1 memory.
// A job's cgroup is `<mount>/<base>/job-<id>` in every hierarchy it uses
// (`base` is the config key cgroup_base, default "gpuslice"); the cpu and
// memory hierarchies are joined only by jobs that ask for a limit, so other
// jobs stay where the daemon's own limits put them.
//
// All methods are called from the daemon's service thread; the launcher's
// supervisor only writes the paths returned by Create (no calls after fork).

#include <cstdint>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace gpuslice::daemon {

// Where the hierarchies are mounted.
struct CgroupMounts {
  std::string unified;                        // The cgroup2 mount point; "" = none.
  std::map<std::string, std::string> v1;      // Controller ("cpu", "pids"...) -> mount point.
};
// Reads /proc/self/mountinfo text. Only mounts of the hierarchies' roots are
// taken (a bind mount of a sub-cgroup, as in a container, is not ours to use).
CgroupMounts ParseCgroupMounts(std::string_view mountinfo);

enum class CgroupLayout { kNone, kV1, kV2, kHybrid };
std::string_view CgroupLayoutName(CgroupLayout layout);  // "none", "v1", "v2", "hybrid"

// Host limits a job asked for (`--cpus`, `--host-mem`); 0 = none.
struct HostLimits {
  uint32_t cpu_milli = 0;      // 1500 = 1.5 CPUs of time per period.
  uint64_t memory_bytes = 0;
  bool any() const { return cpu_milli != 0 || memory_bytes != 0; }
};

// The CFS period we use and the quota for `cpu_milli` in it (microseconds).
constexpr uint64_t kCpuPeriodUs = 100'000;
uint64_t CpuQuotaUs(uint32_t cpu_milli);

class Cgroups {
 public:
  virtual ~Cgroups() = default;

  // Whether jobs get cgroups. When not, the launcher falls back to process
  // groups and Describe() says why.
  virtual bool available() const = 0;
  // One line for doctor, status and the log: "cgroup hybrid (tracking v2,
  // cpu v1, memory v1, freezer v2) under gpuslice" or "unavailable: ...".
  virtual std::string Describe() const = 0;

  // Creates job `name`'s cgroup in each hierarchy it needs, applies `limits`
  // and returns the cgroup.procs files its leader must be written to (the
  // tracking one first). Errors when a limit has no controller to apply it.
  virtual core::Result<std::vector<std::string>> Create(const std::string& name,
                                                       const HostLimits& limits) = 0;
  // Whether job `name`'s tracking cgroup exists (re-adoption).
  virtual bool Exists(const std::string& name) = 0;
  // Whether any process is left in it.
  virtual bool Populated(const std::string& name) = 0;
  // The pids in it (every process, all threads' leaders).
  virtual std::vector<int64_t> Pids(const std::string& name) = 0;
  // Sends `signal` to every process in it.
  virtual core::Status Signal(const std::string& name, int signal) = 0;
  // Kills every process in it, including any forked meanwhile (cgroup.kill
  // on v2; else freeze, SIGKILL every pid, thaw, until empty).
  virtual core::Status Kill(const std::string& name) = 0;
  // Stops (true) or continues (false) every process in it.
  virtual core::Status Freeze(const std::string& name, bool frozen) = 0;
  // Whether the kernel's OOM killer killed a process of it for its memory
  // limit (memory.events oom_kill on v2, memory.oom_control oom_kill on v1).
  virtual bool OomKilled(const std::string& name) = 0;
  // Removes its cgroups (they must be empty); missing ones are fine.
  virtual core::Status Remove(const std::string& name) = 0;
  // Job `name`'s cgroup as a path from each hierarchy's root
  // ("/gpuslice/job-12"): what a container engine's --cgroup-parent takes to
  // put a container inside the job's cgroup. "" when unavailable.
  virtual std::string PathFromRoot(const std::string& name) const {
    (void)name;
    return "";
  }
  // Names of the job cgroups that exist under the base (tracking hierarchy).
  virtual std::vector<std::string> List() = 0;
};

// The kernel's cgroups, under `<mount>/<base>`.
class SysCgroups : public Cgroups {
 public:
  struct Options {
    std::string base = "gpuslice";      // Relative to each hierarchy's root.
    std::string mountinfo_path = "/proc/self/mountinfo";
    bool enabled = true;                // false: never use cgroups (config cgroups = off).
  };
  // Detects the hierarchies and prepares `<mount>/<base>` in each (mkdir,
  // v2 controllers enabled for the children). Never fails: what cannot be
  // used is left out and said by Describe().
  explicit SysCgroups(Options options);

  CgroupLayout layout() const { return layout_; }
  // The directory of job `name` in the tracking hierarchy ("" when none).
  std::string TrackingDir(const std::string& name) const;
  std::string PathFromRoot(const std::string& name) const override;

  bool available() const override { return !tracking_.root.empty(); }
  std::string Describe() const override;
  core::Result<std::vector<std::string>> Create(const std::string& name,
                                               const HostLimits& limits) override;
  bool Exists(const std::string& name) override;
  bool Populated(const std::string& name) override;
  std::vector<int64_t> Pids(const std::string& name) override;
  core::Status Signal(const std::string& name, int signal) override;
  core::Status Kill(const std::string& name) override;
  core::Status Freeze(const std::string& name, bool frozen) override;
  bool OomKilled(const std::string& name) override;
  core::Status Remove(const std::string& name) override;
  std::vector<std::string> List() override;

 private:
  // One hierarchy used for a role: `root` is `<mount>/<base>`; "" = none.
  struct Hierarchy {
    std::string root;
    bool v2 = false;
    std::string Dir(const std::string& name) const { return root + "/" + name; }
    bool operator==(const Hierarchy& o) const { return root == o.root; }
  };
  core::Status Prepare(Hierarchy* h, const std::vector<std::string>& v2_controllers);
  std::vector<Hierarchy> HierarchiesOf(const HostLimits& limits) const;
  std::vector<Hierarchy> AllHierarchies() const;

  Options options_;
  CgroupLayout layout_ = CgroupLayout::kNone;
  Hierarchy tracking_, freezer_, cpu_, memory_;
  // `<mount>/<base>` of every v1 hierarchy: a container engine given a job's
  // cgroup as --cgroup-parent makes it in all of them (docs/CONTAINERS.md),
  // so a job's end removes what is left of it there too.
  std::set<std::string> v1_roots_;
  std::string problem_;  // Why a role is missing, for Describe().
};

}  // namespace gpuslice::daemon

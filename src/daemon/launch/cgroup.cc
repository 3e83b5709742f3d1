#include "daemon/launch/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "daemon/launch/launcher.h"

namespace gpuslice::daemon {
namespace {

using core::Result;
using core::Status;

std::vector<std::string> Split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string_view::npos) end = s.size();
    if (end > start) out.emplace_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

bool ReadText(const std::string& path, std::string* out) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

// Writes `text` with one write(2): cgroup files act on each write. O_CREAT
// changes nothing on a cgroup file system (control files exist, others
// cannot be made) and lets the tests use a plain directory tree.
Status WriteText(const std::string& path, const std::string& text) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(errno, "open " + path);
  ssize_t n = write(fd, text.data(), text.size());
  int err = errno;
  close(fd);
  if (n != static_cast<ssize_t>(text.size())) return ErrnoError(n < 0 ? err : EIO, "write " + path);
  return Status::Ok();
}

bool PathExists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// The value after `key` in a "key value" per line file (cgroup.events,
// memory.events, memory.oom_control); -1 when absent.
int64_t KeyedValue(const std::string& path, std::string_view key) {
  std::string text;
  if (!ReadText(path, &text)) return -1;
  std::istringstream in(text);
  std::string k;
  int64_t v;
  while (in >> k >> v) {
    if (k == key) return v;
  }
  return -1;
}

Status Mkdir(const std::string& path) {
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoError(errno, "mkdir " + path);
  return Status::Ok();
}

}  // namespace

uint64_t CpuQuotaUs(uint32_t cpu_milli) {
  // The kernel refuses quotas under 1 ms.
  return std::max<uint64_t>(1000, kCpuPeriodUs * cpu_milli / 1000);
}

std::string_view CgroupLayoutName(CgroupLayout layout) {
  switch (layout) {
    case CgroupLayout::kNone:
      return "none";
    case CgroupLayout::kV1:
      return "v1";
    case CgroupLayout::kV2:
      return "v2";
    case CgroupLayout::kHybrid:
      return "hybrid";
  }
  return "none";
}

CgroupMounts ParseCgroupMounts(std::string_view mountinfo) {
  // mountinfo: "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER".
  CgroupMounts m;
  for (const std::string& line : Split(mountinfo, '\n')) {
    std::vector<std::string> f = Split(line, ' ');
    auto dash = std::find(f.begin(), f.end(), "-");
    if (f.size() < 6 || dash == f.end() || f.end() - dash < 4) continue;
    const std::string& root = f[3];
    const std::string& point = f[4];
    const std::string& fstype = dash[1];
    if (root != "/") continue;  // A sub-cgroup bound here: not a hierarchy we may manage.
    std::vector<std::string> opts = Split(f[5], ',');
    if (std::find(opts.begin(), opts.end(), "ro") != opts.end()) continue;
    if (fstype == "cgroup2") {
      if (m.unified.empty()) m.unified = point;
    } else if (fstype == "cgroup") {
      for (const std::string& o : Split(dash[3], ',')) {
        if (o == "rw" || o == "ro" || o.find('=') != std::string::npos || o == "xattr" ||
            o == "noprefix" || o == "clone_children" || o == "cpuset_v2_mode") {
          continue;
        }
        m.v1.emplace(o, point);
      }
    }
  }
  return m;
}

SysCgroups::SysCgroups(Options options) : options_(std::move(options)) {
  if (!options_.enabled) {
    problem_ = "turned off (cgroups = off)";
    return;
  }
  std::string text;
  if (!ReadText(options_.mountinfo_path, &text)) {
    problem_ = "cannot read " + options_.mountinfo_path;
    return;
  }
  CgroupMounts m = ParseCgroupMounts(text);
  for (const auto& [controller, mount] : m.v1) v1_roots_.insert(mount + "/" + options_.base);
  bool has_v1 = !m.v1.empty();
  bool has_v2 = !m.unified.empty();
  layout_ = has_v1 && has_v2 ? CgroupLayout::kHybrid
            : has_v2         ? CgroupLayout::kV2
            : has_v1         ? CgroupLayout::kV1
                             : CgroupLayout::kNone;
  std::vector<std::string> problems;
  auto v1 = [&](const std::string& controller) -> Hierarchy {
    auto it = m.v1.find(controller);
    if (it == m.v1.end()) return {};
    return Hierarchy{it->second + "/" + options_.base, false};
  };
  // The v2 controllers we would enable for our children.
  std::set<std::string> v2_controllers;
  if (has_v2) {
    std::string controllers;
    ReadText(m.unified + "/cgroup.controllers", &controllers);
    for (const std::string& c : Split(controllers, ' ')) {
      std::string t = c;
      while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
      if (t == "cpu" || t == "memory") v2_controllers.insert(t);
    }
  }
  if (has_v2) {
    Hierarchy v2{m.unified + "/" + options_.base, true};
    std::vector<std::string> enable(v2_controllers.begin(), v2_controllers.end());
    if (Status s = Prepare(&v2, enable); s.ok()) {
      tracking_ = v2;
      if (PathExists(v2.root + "/cgroup.freeze")) freezer_ = v2;
      if (v2_controllers.count("cpu") && PathExists(v2.root + "/cpu.max")) cpu_ = v2;
      if (v2_controllers.count("memory") && PathExists(v2.root + "/memory.max")) memory_ = v2;
    } else {
      problems.push_back(s.message());
    }
  }
  auto prepared_v1 = [&](const std::string& controller) -> Hierarchy {
    Hierarchy h = v1(controller);
    if (h.root.empty()) return {};
    if (Status s = Prepare(&h, {}); !s.ok()) {
      problems.push_back(s.message());
      return {};
    }
    return h;
  };
  if (tracking_.root.empty()) {
    tracking_ = prepared_v1("pids");
    if (tracking_.root.empty()) tracking_ = prepared_v1("freezer");
  }
  if (freezer_.root.empty()) freezer_ = prepared_v1("freezer");
  if (cpu_.root.empty()) cpu_ = prepared_v1("cpu");
  if (memory_.root.empty()) memory_ = prepared_v1("memory");
  if (layout_ == CgroupLayout::kNone) problems.push_back("no cgroup hierarchy is mounted");
  for (const std::string& p : problems) problem_ += (problem_.empty() ? "" : "; ") + p;
}

Status SysCgroups::Prepare(Hierarchy* h, const std::vector<std::string>& v2_controllers) {
  GPUSLICE_RETURN_IF_ERROR(Mkdir(h->root));
  if (!h->v2 || v2_controllers.empty()) return Status::Ok();
  // Controllers reach a child only when every ancestor enables them for its
  // children: the hierarchy's root, then our base.
  std::string mount = h->root.substr(0, h->root.size() - options_.base.size() - 1);
  std::string enable;
  for (const std::string& c : v2_controllers) enable += (enable.empty() ? "+" : " +") + c;
  // Failures leave the controller off; Create says so when a job needs it.
  (void)WriteText(mount + "/cgroup.subtree_control", enable);
  (void)WriteText(h->root + "/cgroup.subtree_control", enable);
  return Status::Ok();
}

std::string SysCgroups::Describe() const {
  if (!available()) {
    return "cgroups unavailable (" + problem_ +
           "): jobs are tracked by process group, so a process that calls setsid escapes its "
           "job; no --cpus/--host-mem";
  }
  auto role = [](const char* what, const Hierarchy& h) {
    return std::string(what) + (h.root.empty() ? " none" : h.v2 ? " v2" : " v1");
  };
  std::string out = "cgroup " + std::string(CgroupLayoutName(layout_)) + " (" +
                    role("tracking", tracking_) + ", " + role("freezer", freezer_) + ", " +
                    role("cpu", cpu_) + ", " + role("memory", memory_) + ") under " +
                    tracking_.root;
  if (!problem_.empty()) out += "; " + problem_;
  return out;
}

std::string SysCgroups::PathFromRoot(const std::string& name) const {
  return available() ? "/" + options_.base + "/" + name : std::string();
}

std::string SysCgroups::TrackingDir(const std::string& name) const {
  return tracking_.root.empty() ? std::string() : tracking_.Dir(name);
}

std::vector<SysCgroups::Hierarchy> SysCgroups::HierarchiesOf(const HostLimits& limits) const {
  std::vector<Hierarchy> out;
  auto add = [&](const Hierarchy& h) {
    if (!h.root.empty() && std::find(out.begin(), out.end(), h) == out.end()) out.push_back(h);
  };
  add(tracking_);
  add(freezer_);
  if (limits.cpu_milli) add(cpu_);
  if (limits.memory_bytes) add(memory_);
  return out;
}

std::vector<SysCgroups::Hierarchy> SysCgroups::AllHierarchies() const {
  return HierarchiesOf(HostLimits{1, 1});
}

Result<std::vector<std::string>> SysCgroups::Create(const std::string& name,
                                                   const HostLimits& limits) {
  if (!available()) return core::FailedPreconditionError("cgroups unavailable: " + problem_);
  if (limits.cpu_milli && cpu_.root.empty()) {
    return core::FailedPreconditionError("--cpus needs the cpu cgroup controller, which this "
                                         "machine does not offer to the daemon");
  }
  if (limits.memory_bytes && memory_.root.empty()) {
    return core::FailedPreconditionError("--host-mem needs the memory cgroup controller, which "
                                         "this machine does not offer to the daemon");
  }
  std::vector<std::string> procs;
  for (const Hierarchy& h : HierarchiesOf(limits)) {
    GPUSLICE_RETURN_IF_ERROR(Mkdir(h.Dir(name)));
    procs.push_back(h.Dir(name) + "/cgroup.procs");
  }
  if (limits.cpu_milli) {
    std::string dir = cpu_.Dir(name);
    std::string quota = std::to_string(CpuQuotaUs(limits.cpu_milli));
    if (cpu_.v2) {
      GPUSLICE_RETURN_IF_ERROR(
          WriteText(dir + "/cpu.max", quota + " " + std::to_string(kCpuPeriodUs)));
    } else {
      GPUSLICE_RETURN_IF_ERROR(WriteText(dir + "/cpu.cfs_period_us", std::to_string(kCpuPeriodUs)));
      GPUSLICE_RETURN_IF_ERROR(WriteText(dir + "/cpu.cfs_quota_us", quota));
    }
  }
  if (limits.memory_bytes) {
    std::string dir = memory_.Dir(name);
    std::string bytes = std::to_string(limits.memory_bytes);
    if (memory_.v2) {
      GPUSLICE_RETURN_IF_ERROR(WriteText(dir + "/memory.max", bytes));
      // Swap would let the job run past its limit slowly instead of ending.
      (void)WriteText(dir + "/memory.swap.max", "0");
    } else {
      GPUSLICE_RETURN_IF_ERROR(WriteText(dir + "/memory.limit_in_bytes", bytes));
      (void)WriteText(dir + "/memory.memsw.limit_in_bytes", bytes);  // Only with swap accounting.
    }
  }
  return procs;
}

bool SysCgroups::Exists(const std::string& name) {
  return available() && PathExists(tracking_.Dir(name));
}

namespace {

// The sub-cgroups of `dir` (a container engine's, under a job's cgroup).
std::vector<std::string> ChildCgroups(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (struct dirent* e = readdir(d)) {
    if (e->d_type == DT_DIR && e->d_name[0] != '.') out.push_back(dir + "/" + e->d_name);
  }
  closedir(d);
  return out;
}

// The processes of `dir` and of every cgroup below it: a container started
// with --cgroup-parent=<the job's cgroup> lives in a child (docs/CONTAINERS.md).
void CollectPids(const std::string& dir, int depth, std::vector<int64_t>* pids) {
  std::string text;
  if (ReadText(dir + "/cgroup.procs", &text)) {
    std::istringstream in(text);
    int64_t pid;
    while (in >> pid) pids->push_back(pid);
  }
  if (depth >= 8) return;  // Deeper than any engine nests.
  for (const std::string& child : ChildCgroups(dir)) CollectPids(child, depth + 1, pids);
}

// Removes `dir` after the empty cgroups below it, deepest first.
int RemoveTree(const std::string& dir, int depth) {
  if (depth < 8) {
    for (const std::string& child : ChildCgroups(dir)) (void)RemoveTree(child, depth + 1);
  }
  return rmdir(dir.c_str()) == 0 || errno == ENOENT ? 0 : errno;
}

}  // namespace

std::vector<int64_t> SysCgroups::Pids(const std::string& name) {
  std::vector<int64_t> pids;
  if (!available()) return pids;
  CollectPids(tracking_.Dir(name), 0, &pids);
  return pids;
}

bool SysCgroups::Populated(const std::string& name) {
  if (!available()) return false;
  if (tracking_.v2) {
    int64_t populated = KeyedValue(tracking_.Dir(name) + "/cgroup.events", "populated");
    if (populated >= 0) return populated > 0;
  }
  return !Pids(name).empty();
}

Status SysCgroups::Signal(const std::string& name, int sig) {
  for (int64_t pid : Pids(name)) {
    if (kill(static_cast<pid_t>(pid), sig) != 0 && errno != ESRCH) {
      return ErrnoError(errno, "signal process " + std::to_string(pid));
    }
  }
  return Status::Ok();
}

Status SysCgroups::Kill(const std::string& name) {
  if (!available()) return core::FailedPreconditionError("cgroups unavailable");
  std::string kill_file = tracking_.Dir(name) + "/cgroup.kill";
  if (tracking_.v2 && PathExists(kill_file)) return WriteText(kill_file, "1");
  // No cgroup.kill: frozen processes cannot fork, so SIGKILL to every pid
  // listed reaches them all; thawing lets the kills land (a v1-frozen task
  // dies only once thawed). Without a freezer, repeat while any is left.
  for (int round = 0; round < 20; ++round) {
    std::vector<int64_t> pids = Pids(name);
    if (pids.empty()) return Status::Ok();
    bool frozen = !freezer_.root.empty() && Freeze(name, true).ok();
    for (int64_t pid : pids) kill(static_cast<pid_t>(pid), SIGKILL);
    if (frozen) (void)Freeze(name, false);
    if (frozen) return Status::Ok();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return Pids(name).empty() ? Status::Ok()
                            : core::InternalError("processes of " + name + " survive SIGKILL");
}

Status SysCgroups::Freeze(const std::string& name, bool frozen) {
  if (freezer_.root.empty()) return core::FailedPreconditionError("no cgroup freezer");
  std::string dir = freezer_.Dir(name);
  if (freezer_.v2) return WriteText(dir + "/cgroup.freeze", frozen ? "1" : "0");
  GPUSLICE_RETURN_IF_ERROR(WriteText(dir + "/freezer.state", frozen ? "FROZEN" : "THAWED"));
  if (!frozen) return Status::Ok();
  // v1 freezing is asynchronous (FREEZING until every task stopped); the
  // caller relies on "frozen" meaning no task runs, so wait a little.
  for (int i = 0; i < 100; ++i) {
    std::string state;
    if (ReadText(dir + "/freezer.state", &state) && state.rfind("FROZEN", 0) == 0) {
      return Status::Ok();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return core::InternalError(name + " did not freeze within 100 ms");
}

bool SysCgroups::OomKilled(const std::string& name) {
  if (memory_.root.empty()) return false;
  std::string dir = memory_.Dir(name);
  if (memory_.v2) return KeyedValue(dir + "/memory.events", "oom_kill") > 0;
  int64_t kills = KeyedValue(dir + "/memory.oom_control", "oom_kill");
  if (kills >= 0) return kills > 0;
  // Kernels before 4.13 do not count kills: hitting the limit is the hint.
  std::string failcnt;
  return ReadText(dir + "/memory.failcnt", &failcnt) && std::strtoll(failcnt.c_str(), nullptr, 10) > 0;
}

Status SysCgroups::Remove(const std::string& name) {
  Status first = Status::Ok();
  for (const Hierarchy& h : AllHierarchies()) {
    if (int err = RemoveTree(h.Dir(name), 0); err != 0 && first.ok()) {
      first = ErrnoError(err, "remove cgroup " + h.Dir(name));
    }
  }
  // What an engine made in the hierarchies we do not use (empty by now:
  // the job's processes are gone); nothing to report if it cannot go.
  for (const std::string& root : v1_roots_) (void)RemoveTree(root + "/" + name, 0);
  return first;
}

std::vector<std::string> SysCgroups::List() {
  std::vector<std::string> names;
  if (!available()) return names;
  DIR* d = opendir(tracking_.root.c_str());
  if (d == nullptr) return names;
  while (struct dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.rfind("job-", 0) == 0 && e->d_type == DT_DIR) names.push_back(n);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace gpuslice::daemon

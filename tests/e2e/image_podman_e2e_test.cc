// Container jobs with a real container engine: `gpuslice run|submit
// --image IMAGE -- CMD` runs CMD in a container of IMAGE as the job itself.
// The container runs as the caller (not root), in the caller's directory
// (mounted at the same path), inside the slice (the memory cap holds); its
// processes are the job's: the daemon counts them by host pid (NVML's pids,
// translated from the container's PID namespace), never as foreign use,
// `cancel` ends the container and frees the slice, and a daemon restart
// re-adopts a running container job. podman 4.3 with runc, the Debian 11
// image of podman.h.

#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "harness.h"
#include "podman.h"

namespace gpuslice::e2e {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class ImageJob : public PodmanTest {
 protected:
  void SetUp() override {
    PodmanTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (getpwnam("gpuslice-e2e") == nullptr &&
        system("useradd --no-create-home --shell /bin/sh gpuslice-e2e >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "cannot create user gpuslice-e2e (useradd failed)";
    }
    user_ = static_cast<int>(getpwnam("gpuslice-e2e")->pw_uid);
  }

  // A daemon whose container jobs run with podman + runc; the user's CLI
  // gets in through the socket group.
  std::unique_ptr<Daemon> StartDaemon(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--socket-group", "gpuslice-e2e", "--set",
                                     std::string("podman_args=") + kPodmanRunArgs};
    args.insert(args.end(), extra.begin(), extra.end());
    auto d = std::make_unique<Daemon>("1xA100-40GB", args);
    EXPECT_TRUE(d->Start()) << ReadFile(d->dir() + "/daemon.log");
    // The worker where the container sees it: the job's directory is the
    // caller's (/tmp for the harness's other users), mounted at its path.
    worker_ = d->dir() + "/worker";
    fs::copy_file(WorkerPath(), worker_, fs::copy_options::overwrite_existing);
    chmod(worker_.c_str(), 0755);
    return d;
  }

  // The pids of every process in the job's cgroup (the container's included).
  static std::vector<int64_t> CgroupPids(Daemon& d, const std::string& id) {
    std::vector<int64_t> pids;
    for (const std::string& base : d.CgroupDirs()) {
      const std::string dir = base + "/job-" + id;
      if (!fs::is_directory(dir)) continue;
      for (const auto& e : fs::recursive_directory_iterator(dir)) {
        if (e.path().filename() != "cgroup.procs") continue;
        std::ifstream in(e.path());
        for (int64_t p; in >> p;) pids.push_back(p);
      }
    }
    return pids;
  }

  // Its name: the daemon's cgroup base and the job (container_job.h).
  static bool ContainerExists(Daemon& d, const std::string& id) {
    return Sh("podman container exists " + d.cgroup_base() + "-job-" + id).code == 0;
  }

  int user_ = -1;
  std::string worker_;
};

TEST_F(ImageJob, RunsAsItsOwnerInItsDirectoryInsideTheSlice) {
  auto d = StartDaemon();
  const std::string mark = "made-by-" + fs::path(d->dir()).filename().string();
  // As the user: `run` streams the container's output and exits with its code.
  CliResult r = d->Cli({"run", "--mem", "1GiB", "--image", kImage, "--", "/bin/sh", "-c",
                        "id -u; id -g; pwd; grep CapEff /proc/self/status; " + worker_ +
                            " --name c --mem 256MiB --duty 50% --seconds 1 && touch " + mark},
                       user_, 120);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err << ReadFile(d->dir() + "/daemon.log");
  std::istringstream lines(r.out);
  std::string uid, gid, cwd;
  std::getline(lines, uid);
  std::getline(lines, gid);
  std::getline(lines, cwd);
  EXPECT_EQ(uid, std::to_string(user_)) << r.out;  // Never root.
  EXPECT_EQ(cwd, "/tmp") << r.out;                 // The caller's directory, same path.
  EXPECT_NE(r.out.find("CapEff:\t0000000000000000"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ran "), std::string::npos) << r.out;
  // What it wrote is in the caller's directory on the host, and theirs.
  struct stat st;
  ASSERT_EQ(stat(("/tmp/" + mark).c_str(), &st), 0);
  EXPECT_EQ(static_cast<int>(st.st_uid), user_);
  unlink(("/tmp/" + mark).c_str());

  // The cap holds inside; the exit code is the command's.
  CliResult over = d->Cli(
      {"run", "--mem", "1GiB", "--image", kImage, "--", worker_, "--mem", "2GiB", "--seconds", "1"},
      user_, 120);
  EXPECT_NE(over.exit_code, 0);
  EXPECT_NE((over.out + over.err).find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos)
      << over.out << over.err;
  // Nothing it can reach raises the limit: the limits page is read-only.
  CliResult write = d->Cli({"run", "--mem", "1GiB", "--image", kImage, "--", "/bin/sh", "-c",
                            "echo 4000000000000 >> \"$GPUSLICE_LIMITS\" && echo WROTE"},
                           user_, 120);
  EXPECT_EQ(write.out.find("WROTE"), std::string::npos) << write.out;

  // cuMemGetInfo and NVML inside show the slice (1 GiB), not the A100's 40.
  const std::string probe = d->dir() + "/probe";
  fs::copy_file(GPUSLICE_E2E_PROBE, probe, fs::copy_options::overwrite_existing);
  chmod(probe.c_str(), 0755);
  CliResult views = d->Cli({"run", "--mem", "1GiB", "--image", kImage, "--", "/bin/sh", "-c",
                            probe + " info && " + probe + " nvml"},
                           user_, 120);
  ASSERT_EQ(views.exit_code, 0) << views.out << views.err;
  EXPECT_NE(views.out.find("mem_total=1073741824\n"), std::string::npos) << views.out;
  EXPECT_NE(views.out.find("nvml_total=1073741824\n"), std::string::npos) << views.out;

  // ps and show name the image.
  json list = json::parse(d->Cli({"ps", "--all", "--json"}).out);
  ASSERT_FALSE(list["jobs"].empty());
  EXPECT_EQ(list["jobs"][0].value("image", ""), kImage);
  EXPECT_EQ(list["jobs"][0].value("engine", ""), "podman");
  EXPECT_NE(d->Cli({"ps", "--all"}).out.find(kImage), std::string::npos);

  // Bad input is refused at once, with the reason.
  CliResult bad = d->Cli({"submit", "--mem", "1GiB", "--image", "--privileged", "--", "true"});
  EXPECT_NE(bad.exit_code, 0);
  CliResult engine = d->Cli({"submit", "--mem", "1GiB", "--image", kImage, "--engine", "lxc",
                             "--", "true"});
  EXPECT_NE(engine.exit_code, 0);
  EXPECT_NE(engine.err.find("podman or docker"), std::string::npos) << engine.err;
}

TEST_F(ImageJob, ItsProcessesAreTheJobsByHostPidAndCancelEndsTheContainer) {
  auto d = StartDaemon();
  CliResult r = d->Cli({"submit", "--mem", "2GiB", "--image", kImage, "--", worker_, "--name",
                        "long", "--mem", "512MiB", "--duty", "50%", "--seconds", "300"},
                       user_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string id = Trim(r.out);
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(*d, id) == "running"; }, 60));
  // NVML sees the worker's memory; the daemon names it by its host pid, one
  // of the job's cgroup (the container's PID namespace calls it 1 or so).
  json job;
  ASSERT_TRUE(Daemon::WaitFor(
      [&] {
        job = Job(*d, id);
        return job.contains("usage") && job["usage"].value("nvml_memory_bytes", 0ull) >= 512ull << 20;
      },
      60))
      << job.dump() << ReadFile(d->dir() + "/daemon.log");
  const std::vector<int64_t> members = CgroupPids(*d, id);
  ASSERT_FALSE(job["usage"]["pids"].empty()) << job.dump();
  for (const json& p : job["usage"]["pids"]) {
    const int64_t pid = p.get<int64_t>();
    EXPECT_GT(pid, 1);
    EXPECT_NE(std::find(members.begin(), members.end(), pid), members.end())
        << "pid " << pid << " is not in the job's cgroup";
    // In the container's PID namespace: /proc shows two pids for it.
    std::ifstream status("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(status, line) && line.rfind("NSpid:", 0) != 0) {
    }
    EXPECT_EQ(std::count(line.begin(), line.end(), '\t'), 2) << line;
  }
  // Not foreign use: the watchdog raises nothing about it.
  EXPECT_EQ(d->Cli({"events", "--json"}).out.find("foreign"), std::string::npos);

  ASSERT_EQ(d->Cli({"cancel", id}, user_).exit_code, 0);
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(*d, id) == "cancelled"; }, 30));
  EXPECT_TRUE(Daemon::WaitFor([&] { return !ContainerExists(*d, id); }, 30));
  EXPECT_TRUE(CgroupPids(*d, id).empty());
  // Its memory is free again.
  EXPECT_TRUE(Daemon::WaitFor(
      [&] {
        json g = json::parse(d->Cli({"gpus", "--json"}).out);
        return g["gpus"][0].value("memory_used", 1ull) == 0;
      },
      30))
      << d->Cli({"gpus", "--json"}).out;
}

// Resize and preemption act on a container job as on a host job: a live
// resize reaches the container's processes (they read the daemon's limits
// page, mounted read-only), and a preempted restartable container job is
// requeued and started again (its earlier container gone, the name free).
TEST_F(ImageJob, ResizeReachesTheContainerAndAPreemptedOneIsRequeuedAndRunsAgain) {
  auto d = StartDaemon({"--set", "preemption=lower", "--set", "preemption_grace=2s"});
  const std::string probe = d->dir() + "/probe";
  fs::copy_file(GPUSLICE_E2E_PROBE, probe, fs::copy_options::overwrite_existing);
  chmod(probe.c_str(), 0755);
  CliResult r = d->Cli({"submit", "--mem", "30GiB", "--priority", "low", "--restartable",
                        "--image", kImage, "--", "sleep", "300"},
                       user_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string id = Trim(r.out);
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(*d, id) == "running" && ContainerExists(*d, id); }, 60));
  const std::string name = d->cgroup_base() + "-job-" + id;
  // What a process started in the container now sees, before and after.
  auto seen_total = [&] {
    Ran info = Sh("podman exec " + name + " " + probe + " info");
    const size_t at = info.out.find("mem_total=");
    return at == std::string::npos ? std::string("?\n" + info.out)
                                   : info.out.substr(at + 10, info.out.find('\n', at) - at - 10);
  };
  EXPECT_EQ(seen_total(), std::to_string(30ull << 30));
  ASSERT_EQ(d->Cli({"resize", id, "--mem", "20GiB"}, user_).exit_code, 0);
  EXPECT_EQ(seen_total(), std::to_string(20ull << 30));

  // A high-priority job that needs the GPU preempts it; it comes back.
  CliResult high = d->Cli({"submit", "--mem", "30GiB", "--priority", "high", "--", "sleep", "2"});
  ASSERT_EQ(high.exit_code, 0) << high.err;
  const std::string hid = Trim(high.out);
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(*d, hid) == "running"; }, 60))
      << ReadFile(d->dir() + "/daemon.log");
  EXPECT_EQ(State(*d, id), "queued");
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(*d, hid) == "exited"; }, 60));
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(*d, id) == "running" && ContainerExists(*d, id); }, 60))
      << ReadFile(d->dir() + "/daemon.log");
  ASSERT_EQ(d->Cli({"cancel", id}).exit_code, 0);
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(*d, id) == "cancelled"; }, 30));
  EXPECT_TRUE(Daemon::WaitFor([&] { return !ContainerExists(*d, id); }, 30));
}

TEST_F(ImageJob, ADaemonRestartReadoptsARunningContainerJob) {
  auto d = StartDaemon();
  CliResult r = d->Cli({"submit", "--mem", "1GiB", "--image", kImage, "--", "sleep", "300"}, user_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string id = Trim(r.out);
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(*d, id) == "running" && ContainerExists(*d, id); }, 60));
  const int64_t leader = Job(*d, id).value("pid", int64_t{0});
  d->Kill(SIGKILL);
  ASSERT_TRUE(d->Start()) << ReadFile(d->dir() + "/daemon.log");
  json job = Job(*d, id);
  EXPECT_EQ(job.value("state", ""), "running") << job.dump();
  EXPECT_EQ(job.value("pid", int64_t{0}), leader);
  EXPECT_TRUE(ContainerExists(*d, id));
  ASSERT_EQ(d->Cli({"cancel", id}).exit_code, 0);
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(*d, id) == "cancelled"; }, 30));
  EXPECT_TRUE(Daemon::WaitFor([&] { return !ContainerExists(*d, id); }, 30))
      << ReadFile(d->dir() + "/daemon.log") << ReadFile(d->dir() + "/daemon.log.2");
}

}  // namespace
}  // namespace gpuslice::e2e

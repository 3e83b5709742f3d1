// CDI with a real container engine: the daemon's CDI spec of a
// running job, read by podman (Debian 12's 4.3, with runc), puts a container
// of an image that knows nothing of gpuslice into the job's slice: the
// shim, the simulated GPU and the limits come from the host, the memory cap
// holds inside, the limits page is read-only there, and the device goes
// when the job ends. The image is Debian 11 (glibc 2.31, the root file
// system scripts/test-rootfs.sh builds), imported with `podman import`: no
// registry is reachable here.

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "harness.h"
#include "podman.h"

namespace gpuslice::e2e {
namespace {

namespace fs = std::filesystem;

constexpr char kCdiDir[] = "/var/run/cdi";

class CdiPodman : public PodmanTest {
 protected:
  // `podman run` of the image in job `id`'s slice. runc: crun fails on this
  // machine's hybrid cgroups. The ulimits: these machines deny raising
  // rlimits (no CAP_SYS_RESOURCE), and runc otherwise sets podman's
  // defaults.
  Ran InSlice(const std::string& id, const std::string& cmd) {
    return Sh(
        "podman --runtime runc run --rm --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 "
        "--device gpuslice.dev/slice=" +
        id + " -v " + WorkerPath() + ":/opt/worker:ro " + kImage + " /bin/sh -c '" + cmd + "'");
  }
};

TEST_F(CdiPodman, AContainerJoinsTheJobsSliceThroughItsCdiDevice) {
  Daemon d("1xA100-40GB", {"--set", std::string("cdi_dir=") + kCdiDir});
  ASSERT_TRUE(d.Start()) << ReadFile(d.dir() + "/daemon.log");
  CliResult r = d.Cli({"submit", "--mem", "1GiB", "--", "sleep", "120"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string id = Trim(r.out);
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, id) == "running"; }));
  const std::string spec = std::string(kCdiDir) + "/gpuslice-" + id + ".json";
  ASSERT_TRUE(fs::exists(spec));

  // Runs kernels in the slice; the image has no CUDA and no gpuslice.
  Ran ok = InSlice(id, "/opt/worker --name c --mem 256MiB --duty 50% --seconds 1");
  ASSERT_EQ(ok.code, 0) << ok.out;
  EXPECT_NE(ok.out.find("ran "), std::string::npos) << ok.out;
  // The 1 GiB cap holds inside.
  Ran over = InSlice(id, "/opt/worker --name c --mem 2GiB --seconds 1");
  EXPECT_NE(over.code, 0);
  EXPECT_NE(over.out.find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos) << over.out;
  // Nothing reachable inside raises it: the daemon's limits page is
  // mounted read-only (root in the container included).
  Ran write = InSlice(id, "echo 4000000000000 >> \"$GPUSLICE_LIMITS\" && echo WROTE");
  EXPECT_EQ(write.out.find("WROTE"), std::string::npos) << write.out;
  EXPECT_NE(write.out.find("Read-only file system"), std::string::npos) << write.out;
  Ran again = InSlice(id, "/opt/worker --name c --mem 2GiB --seconds 1");
  EXPECT_NE(again.out.find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos) << again.out;

  // The job ends: its device goes, and a container can no longer ask for it.
  ASSERT_EQ(d.Cli({"cancel", id}).exit_code, 0);
  ASSERT_TRUE(Daemon::WaitFor([&] { return !fs::exists(spec); }, 30));
  Ran gone = InSlice(id, "true");
  EXPECT_NE(gone.code, 0) << gone.out;
  EXPECT_NE(gone.out.find("gpuslice.dev/slice=" + id), std::string::npos) << gone.out;
}

// Item 5: two containers in a 30% and a 70% hard slice of one GPU take
// turns through the daemon's arbiter as the jobs' own processes would: the
// GPU time they get splits about 30/70 (about 50/50 without shares). They
// join through `container-args` (the same mounts and environment as the CDI
// spec): only one test may use /var/run/cdi, whose file names are per job
// id (two test daemons running at once both have a job 1; a CI run failed
// so).
TEST_F(CdiPodman, TwoContainersIn30And70PercentSlicesSplitTheGpu) {
  Daemon d("1xA100-40GB");
  ASSERT_TRUE(d.Start()) << ReadFile(d.dir() + "/daemon.log");
  auto slice = [&](const std::string& share) {
    CliResult r = d.Cli({"submit", "--mem", "2GiB", "--compute", share, "--", "sleep", "120"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return Trim(r.out);
  };
  const std::string a = slice("30%"), b = slice("70%");
  ASSERT_TRUE(
      Daemon::WaitFor([&] { return State(d, a) == "running" && State(d, b) == "running"; }));
  // Both containers start together and run kernels for 3 s each.
  constexpr int kKernelUs = 200;
  auto start = [&](const std::string& id, const std::string& name) {
    const std::string log = d.dir() + "/" + name + ".log";
    CliResult flags = d.Cli({"container-args", id});
    EXPECT_EQ(flags.exit_code, 0) << flags.err;
    const std::string cmd =
        "podman --runtime runc run --rm --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 " +
        Trim(flags.out) + " -v " + WorkerPath() + ":/opt/worker:ro " + kImage +
        " /opt/worker --name " + name +
        " --mem 256MiB --duty 100% --seconds 3 --kernel-us " + std::to_string(kKernelUs) + " > " +
        log + " 2>&1";
    return popen(cmd.c_str(), "r");
  };
  FILE* pa = start(a, "thirty");
  FILE* pb = start(b, "seventy");
  ASSERT_NE(pa, nullptr);
  ASSERT_NE(pb, nullptr);
  EXPECT_EQ(pclose(pa), 0);
  EXPECT_EQ(pclose(pb), 0);
  auto kernels = [&](const std::string& name) {
    const std::string out = ReadFile(d.dir() + "/" + name + ".log");
    long n = -1;
    const size_t at = out.find("ran ");
    if (at != std::string::npos) std::sscanf(out.c_str() + at, "ran %ld kernels", &n);
    EXPECT_GT(n, 0) << out;
    return double(n);
  };
  const double ka = kernels("thirty"), kb = kernels("seventy");
  ASSERT_GT(ka + kb, 0);
  const double split = ka / (ka + kb);
  std::cerr << "containers at 30%/70%: " << ka << " / " << kb << " kernels, split " << split
            << "\n";
  // Tolerant: two container starts are not simultaneous on a busy machine.
  EXPECT_NEAR(split, 0.30, 0.12);
}

// Docker 20.10 (Debian 12's docker.io) has no CDI: `container-args` gives
// the same slice as plain --device/-v/-e flags. No Docker engine runs on
// these machines; podman takes the same flags, so the flags are tested
// with it.
TEST_F(CdiPodman, ContainerArgsGiveTheSameSliceAsPlainFlags) {
  Daemon d("1xA100-40GB");  // Its CDI specs go to its own folder: not used here.
  ASSERT_TRUE(d.Start()) << ReadFile(d.dir() + "/daemon.log");
  CliResult r = d.Cli({"submit", "--mem", "1GiB", "--", "sleep", "120"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string id = Trim(r.out);
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, id) == "running"; }));
  CliResult args = d.Cli({"container-args", id});
  ASSERT_EQ(args.exit_code, 0) << args.err;
  const std::string flags = Trim(args.out);
  EXPECT_NE(flags.find(":ro"), std::string::npos) << flags;
  EXPECT_NE(flags.find("-e GPUSLICE_JOB_ID=" + id), std::string::npos) << flags;
  // Only asked for (--in-job) is the container put under the job's cgroup:
  // engines with systemd's cgroup manager refuse a path.
  EXPECT_EQ(flags.find("--cgroup-parent"), std::string::npos) << flags;
  EXPECT_NE(Trim(d.Cli({"container-args", "--cdi", id}).out).find("--device gpuslice.dev/slice=" + id),
            std::string::npos);
  auto run = [&](const std::string& cmd) {
    return Sh(
        "podman --runtime runc run --rm --ulimit nofile=1024:1024 --ulimit "
        "nproc=1024:1024 " +
        flags + " -v " + WorkerPath() + ":/opt/worker:ro " + kImage + " /bin/sh -c '" + cmd + "'");
  };
  Ran ok = run("/opt/worker --name c --mem 256MiB --duty 50% --seconds 1");
  ASSERT_EQ(ok.code, 0) << ok.out;
  Ran over = run("/opt/worker --name c --mem 2GiB --seconds 1");
  EXPECT_NE(over.out.find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos) << over.out;
  Ran write = run("echo 4000000000000 >> \"$GPUSLICE_LIMITS\" && echo WROTE");
  EXPECT_EQ(write.out.find("WROTE"), std::string::npos) << write.out;
  // --in-job: the container goes under the job's cgroup (the engine must use
  // the cgroupfs manager), so it is the job's: cancel ends it.
  CliResult in_job = d.Cli({"container-args", "--in-job", id});
  ASSERT_EQ(in_job.exit_code, 0) << in_job.err;
  const std::string jflags = Trim(in_job.out);
  EXPECT_NE(jflags.find("--cgroup-parent /" + d.cgroup_base() + "/job-" + id), std::string::npos)
      << jflags;
  const std::string joined = d.cgroup_base() + "-joined";
  Ran started = Sh("podman --cgroup-manager cgroupfs --runtime runc run -d --rm --name " + joined +
                   " --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 " + jflags + " " + kImage +
                   " sleep 120");
  ASSERT_EQ(started.code, 0) << started.out;
  const int pid = std::atoi(Sh("podman inspect -f '{{.State.Pid}}' " + joined).out.c_str());
  ASSERT_GT(pid, 0);
  EXPECT_NE(ReadFile("/proc/" + std::to_string(pid) + "/cgroup").find("/job-" + id + "/"),
            std::string::npos);
  ASSERT_EQ(d.Cli({"cancel", id}).exit_code, 0);
  EXPECT_TRUE(Daemon::WaitFor([&] { return kill(pid, 0) != 0; }, 30))
      << "the joined container outlived its job";
  Sh("podman rm -f " + joined);
  // Only for a running job of one's own.
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, id) != "running"; }));
  CliResult ended = d.Cli({"container-args", id});
  EXPECT_EQ(ended.exit_code, 125);
  EXPECT_NE(ended.err.find("only a running job"), std::string::npos) << ended.err;
}

}  // namespace
}  // namespace gpuslice::e2e

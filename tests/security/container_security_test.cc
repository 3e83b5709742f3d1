// Containers against the job itself (the target: "nothing the user can
// reach in the container lets them raise their own limit"). A container
// job (`submit --image`) of an unprivileged user overwrites every file the
// slice hands it (its region, the limits page's folder, the coordination
// directory: every path a GPUSLICE_* variable names, and the files below)
// with 0xff bytes ("unlimited" in every field), then allocates 2 GiB in its
// 1 GiB slice: the allocation is refused, or the daemon's watchdog ends the
// job within 2 s; the limits page cannot be written at all (read-only mount,
// root's file), and the daemon's view of the limit never changes. The
// container cannot gain a privilege either: no capability, and a setuid
// binary of the image gives none (no-new-privileges).

#include <stdlib.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "../e2e/podman.h"
#include "fixture.h"

namespace gpuslice::security {
namespace {

using e2e::kImage;
using e2e::kPodmanRunArgs;
using e2e::Sh;
using nlohmann::json;

constexpr uint64_t kGiB = 1ull << 30;

class Container : public SecurityTest {
 protected:
  void SetUp() override {
    SecurityTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_EQ(Sh("podman --version").code, 0) << "podman is missing: scripts/setup.sh installs it";
    ASSERT_TRUE(std::filesystem::exists(std::string(e2e::kRootfs) + "/bin/sh"))
        << "scripts/test-rootfs.sh builds the image's root file system";
    if (Sh(std::string("podman image exists ") + kImage).code != 0) {
      e2e::Ran imported =
          Sh(std::string("tar -C ") + e2e::kRootfs + " -c . | podman import - " + kImage);
      ASSERT_EQ(imported.code, 0) << imported.out;
    }
    // The demo worker (glibc 2.17 at most: it runs in the Debian 11 image)
    // where the container sees it: the drop folder is the job's directory.
    worker_ = Drop("worker");
    std::filesystem::copy_file(GPUSLICE_SEC_WORKER, worker_,
                               std::filesystem::copy_options::overwrite_existing);
    chmod(worker_.c_str(), 0755);
  }
  std::string worker_;
};

TEST_F(Container, AContainerJobThatOverwritesEveryFileOfItsSliceCannotHold2GiBOfA1GiBSlice) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(DaemonOptions()
                                          .Gpus("1xA100-40GB")
                                          .Set(std::string("podman_args=") + kPodmanRunArgs)
                                          .Set("watchdog=kill")));
  // Runs in the container as gsattack_a. `find` lists what the slice
  // handed it; every file it can open for writing is overwritten in place
  // with 0xff; the limits page's write must fail. Then the allocation.
  const std::string script =
      "for f in $(find \"$GPUSLICE_SLICE\" \"$GPUSLICE_LIMITS\" \"$(dirname \"$GPUSLICE_LIMITS\")\" "
      "\"$GPUSLICE_COORD_DIR\" -type f 2>/dev/null | sort -u); do "
      "  n=$(stat -c %s \"$f\"); "
      "  if head -c \"$n\" /dev/zero | tr '\\000' '\\377' | dd of=\"$f\" conv=notrunc "
      "2>/dev/null; then echo \"wrote $f\"; else echo \"denied $f\"; fi; "
      "done; "
      "echo 4000000000000 >> \"$GPUSLICE_LIMITS\" && echo LIMITS-WRITTEN; "
      "grep CapEff /proc/self/status; "
      "exec " +
      worker_ + " --name attack --mem 2GiB --duty 50% --seconds 6";
  std::string id = Submit(&a_, {"--mem", "1GiB", "--image", kImage, "--name", "scribble", "--",
                                "/bin/sh", "-c", script});
  ASSERT_FALSE(id.empty());

  std::vector<uint64_t> seen;  // The daemon's view of the limit while it runs.
  std::string state;
  WaitFor(
      [&] {
        json j = Job(id);
        state = j.is_object() ? j.value("state", "") : "";
        if (j.contains("allocation")) {
          seen.push_back(j["allocation"].value("memory_bytes_per_gpu", uint64_t{0}));
        }
        return state == "exited" || state == "cancelled" || state == "failed";
      },
      60);
  ProcResult log = Cli(nullptr, {"logs", id});
  std::cerr << "container job " << id << " ended " << state << ":\n" << log.out << log.err;
  EXPECT_EQ(log.out.find("LIMITS-WRITTEN"), std::string::npos) << "the limits page was written";
  EXPECT_NE(log.out.find("CapEff:\t0000000000000000"), std::string::npos) << log.out;
  EXPECT_NE(log.out.find("wrote "), std::string::npos)
      << "the attack wrote nothing: it did not test what a job can reach";
  // Refused (the worker says so), or, once it scribbled its own region, the
  // shim runs without its bookkeeping and the daemon's watchdog (NVML
  // against the ledger's limit) ends it: MemoryLimit.* bound the time.
  const bool refused = (log.out + log.err).find("CUDA_ERROR_OUT_OF_MEMORY") != std::string::npos;
  const bool killed = state == "cancelled" && !Events(id, "watchdog").empty();
  EXPECT_TRUE(refused || killed) << "neither refused nor stopped by the watchdog: " << state;
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(std::set<uint64_t>(seen.begin(), seen.end()), std::set<uint64_t>{kGiB})
      << "the daemon's view of the limit changed";
  if (state == "running") Cli(nullptr, {"cancel", id});
}

// The image's setuid root shell (chmod u+s by root inside the image would
// need root; the image's own setuid binaries, su and passwd, are what a
// user has): with no-new-privileges it runs as the user, and no capability
// is gained.
TEST_F(Container, ASetuidBinaryOfTheImageGivesTheJobNothing) {
  ASSERT_NO_FATAL_FAILURE(
      StartDaemon(DaemonOptions().Gpus("1xA100-40GB").Set(std::string("podman_args=") + kPodmanRunArgs)));
  std::string id = Submit(
      &a_, {"--mem", "1GiB", "--image", kImage, "--", "/bin/sh", "-c",
            "ls -l /bin/su; /bin/su -c 'id -u' root </dev/null; echo su-exit=$?; id -u; "
            "grep CapEff /proc/self/status"});
  ASSERT_FALSE(id.empty());
  WaitFor([&] { return State(id) == "exited" || State(id) == "failed"; }, 60);
  ProcResult log = Cli(nullptr, {"logs", id});
  std::cerr << log.out << log.err;
  EXPECT_NE(log.out.find("rws"), std::string::npos) << "su is not setuid in the image";
  EXPECT_EQ(log.out.find("su-exit=0"), std::string::npos) << "su ran something as root";
  EXPECT_NE(log.out.find(std::to_string(a_.uid)), std::string::npos);
  EXPECT_NE(log.out.find("CapEff:\t0000000000000000"), std::string::npos);
}

// Needs podman only: no image is ever run here.
class ImageNames : public SecurityTest {
 protected:
  void SetUp() override {
    SecurityTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_EQ(Sh("podman --version").code, 0) << "podman is missing: scripts/setup.sh installs it";
  }
};

// "--image oci-archive:/etc/shadow, dir:/root, docker-archive:..." would
// make root's podman open those paths, and a registry reference make it
// pull. Every entry (submit, run, the API's jobs and
// services) refuses such a name with the reason before any engine runs; a
// plain reference of an image root's store lacks is run with --pull=never
// and fails, nothing pulled.
TEST_F(ImageNames, ThatAreNotAPlainReferenceAreRefusedBeforeAnyEngineRunsAndNothingIsPulled) {
  // A podman that notes each call first, so the test sees whether one ran.
  char tmpl[] = "/tmp/gpuslice-sec-engine-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string engine_dir = tmpl;
  struct Removed {
    std::string dir;
    ~Removed() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } removed{engine_dir};
  chmod(engine_dir.c_str(), 0755);
  const std::string calls = engine_dir + "/calls", podman = engine_dir + "/podman";
  std::ofstream(podman) << "#!/bin/sh\nprintf '%s\\n' \"$*\" >> " << calls
                        << "\nexec /usr/bin/podman \"$@\"\n";
  chmod(podman.c_str(), 0755);
  ASSERT_NO_FATAL_FAILURE(StartDaemon(DaemonOptions()
                                          .Gpus("1xA100-40GB")
                                          .Set("podman=" + podman)
                                          .Set(std::string("podman_args=") + kPodmanRunArgs)));
  struct Case {
    std::string image, reason;
  };
  const Case cases[] = {
      {"oci-archive:/etc/shadow", "a transport prefix ('oci-archive:')"},
      {"docker-archive:/root/x.tar", "a transport prefix ('docker-archive:')"},
      {"dir:/root", "a transport prefix ('dir:')"},
      {std::string("containers-storage:") + kImage, "a transport prefix ('containers-storage:')"},
      {"docker://docker.io/library/busybox:1.36", "a transport prefix ('docker://')"},
      {"/etc/shadow", "a path (it starts with '/')"},
      {std::string("/") + kImage, "a path (it starts with '/')"},  // An absolute name.
      {"../../etc/shadow", "a path (it starts with '.')"},
      {"localhost/../../root", "a path (a '..' component)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.image);
    const std::string why = "is refused: " + c.reason;
    ProcResult submit = Cli(&a_, {"submit", "--mem", "1GiB", "--image", c.image, "--", "true"});
    EXPECT_NE(submit.exit_code, 0);
    EXPECT_NE(submit.err.find(why), std::string::npos) << submit.err;
    ProcResult run = Cli(&a_, {"run", "--mem", "1GiB", "--image", c.image, "--", "true"});
    EXPECT_NE(run.exit_code, 0);
    EXPECT_NE(run.err.find(why), std::string::npos) << run.err;
    // The API with no client in the way: a job, and a service's template.
    json job = {{"mem", "1GiB"}, {"argv", {"true"}}, {"cwd", "/tmp"}, {"image", c.image}};
    ProcResult api = Attack(&a_, {"http", "--to", unix_ep(), "--method", "POST", "--path",
                                  "/v1/jobs", "--body", job.dump()});
    EXPECT_EQ(api.out.rfind("status 400", 0), 0u) << api.out;
    EXPECT_NE(api.out.find(why), std::string::npos) << api.out;
    json service = job;
    service["name"] = "svc";
    service["replicas"] = "1";
    ProcResult svc = Attack(&a_, {"http", "--to", unix_ep(), "--method", "POST", "--path",
                                  "/v1/services", "--body", service.dump()});
    EXPECT_EQ(svc.out.rfind("status 400", 0), 0u) << svc.out;
    EXPECT_NE(svc.out.find(why), std::string::npos) << svc.out;
  }
  EXPECT_EQ(ReadFile(calls), "") << "an engine ran for a refused name";
  json list = json::parse(Cli(nullptr, {"ps", "--all", "--json"}).out, nullptr, false);
  ASSERT_TRUE(list.is_object());
  EXPECT_TRUE(list["jobs"].empty()) << list.dump();

  // A plain reference root's store lacks: run, told never to pull.
  const std::string absent = "docker.io/library/busybox:1.36";
  ASSERT_NE(Sh("podman image exists " + absent).code, 0) << absent << " is in root's store";
  const std::string id = Submit(&a_, {"--mem", "1GiB", "--image", absent, "--", "true"});
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::string s = State(id);
        return s == "exited" || s == "failed";
      },
      60))
      << State(id);
  const std::string ran = ReadFile(calls);
  EXPECT_NE(ran.find(" run --rm --pull=never "), std::string::npos) << ran;
  EXPECT_NE(Job(id).value("exit_code", 0), 0) << "the container ran: the image came from somewhere";
  if (Sh("podman image exists " + absent).code == 0) {
    ADD_FAILURE() << "the image was pulled";
    Sh("podman rmi " + absent);  // So that the next run tests again.
  }
}

}  // namespace
}  // namespace gpuslice::security

// External jobs (a Kubernetes container's slice, created by the
// device plugin as root) against the users of the node. The container's
// processes run as a uid nobody knows in advance, so the slice's region and
// members file belong to a group of the slice's own (mode 0660) that only
// the container is given (CDI additionalGids): a process with that group
// reports into the slice and takes turns (its compute share holds); a user
// without it cannot open, let alone write, the slice's files, and a process
// of it that is handed the slice anyway is still held to the memory limit
// (its own private region, from the daemon's read-only page).

#include <sys/stat.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "fixture.h"

namespace gpuslice::security {
namespace {

using nlohmann::json;

class External : public SecurityTest {
 protected:
  void SetUp() override {
    SecurityTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    StartDaemon();
    worker_ = Drop("worker");
    std::filesystem::copy_file(GPUSLICE_SEC_WORKER, worker_,
                               std::filesystem::copy_options::overwrite_existing);
    chmod(worker_.c_str(), 0755);
  }
  // The daemon's API as root (the device plugin's identity).
  json Api(const std::string& method, const std::string& path, const std::string& body = "") {
    std::vector<std::string> argv = {"/usr/bin/curl", "-sS", "--unix-socket", socket_path(), "-X", method,
                                     "http://gpuslice" + path};
    if (!body.empty()) argv.insert(argv.end(), {"-H", "Content-Type: application/json", "-d", body});
    ProcResult r = RunAs(nullptr, argv);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return json::parse(r.out, nullptr, false);
  }
  // The worker as user `u` with `extra_gid` as a supplementary group (0:
  // none), in the slice's environment.
  ProcResult Worker(const User& u, uint32_t extra_gid, const std::vector<std::string>& env,
                    const std::string& mem) {
    std::vector<std::string> argv = {"/usr/bin/setpriv", "--reuid", std::to_string(u.uid), "--regid",
                                     std::to_string(u.gid)};
    if (extra_gid != 0) {
      argv.insert(argv.end(), {"--groups", std::to_string(extra_gid)});
    } else {
      argv.push_back("--clear-groups");
    }
    argv.insert(argv.end(), {"/usr/bin/env"});
    argv.insert(argv.end(), env.begin(), env.end());
    argv.insert(argv.end(), {worker_, "--mem", mem, "--seconds", "1", "--kernel-us", "500"});
    return RunAs(nullptr, argv);
  }
  std::string worker_;
};

TEST_F(External, TheSlicesGroupReachesItsFilesAndNobodyElseDoes) {
  json job = Api("POST", "/v1/jobs", R"({"mode": "external", "mem": "1GiB", "compute": "30%"})");
  ASSERT_EQ(job.value("state", ""), "running") << job.dump();
  const std::string id = std::to_string(job["id"].get<int>());
  json c = Api("GET", "/v1/jobs/" + id + "/container");
  ASSERT_EQ(c["additional_gids"].size(), 1u) << c.dump();
  const uint32_t gid = c["additional_gids"][0].get<uint32_t>();
  std::vector<std::string> env;
  for (const json& e : c["env"]) {
    std::string v = e.get<std::string>();
    // The container's paths are the host's, except the shim and the driver.
    if (v.rfind("LD_PRELOAD=", 0) == 0) v = std::string("LD_PRELOAD=") + GPUSLICE_SEC_SHIM;
    if (v.rfind("LD_LIBRARY_PATH=", 0) == 0) v = std::string("LD_LIBRARY_PATH=") + GPUSLICE_SEC_SIM_DIR;
    env.push_back(v);
  }
  const std::string region = job["slice"].get<std::string>();
  struct stat st {};
  ASSERT_EQ(stat(region.c_str(), &st), 0);
  EXPECT_EQ(st.st_gid, gid);
  EXPECT_EQ(st.st_mode & 0777, 0660u);

  // With the slice's group (as its container): into the slice, in turns.
  ProcResult in = Worker(a_, gid, env, "512MiB");
  EXPECT_EQ(in.exit_code, 0) << in.out << in.err;
  EXPECT_EQ(in.err.find("Permission denied"), std::string::npos) << in.err;
  EXPECT_EQ(in.err.find("not enforced"), std::string::npos) << in.err;
  // ... and held to the slice's limit.
  ProcResult over = Worker(a_, gid, env, "2GiB");
  EXPECT_NE(over.exit_code, 0) << over.out;

  // Without it: the files cannot be opened, not even read.
  ProcResult write = RunAs(&b_, {"/bin/sh", "-c", "echo x >> " + region});
  EXPECT_NE(write.exit_code, 0);
  ProcResult read = RunAs(&b_, {"/bin/sh", "-c", "cat " + region + " > /dev/null"});
  EXPECT_NE(read.exit_code, 0);
  // A process handed the slice's environment without the group is still held
  // to its memory limit (a private region from the daemon's page).
  ProcResult outside = Worker(b_, 0, env, "2GiB");
  EXPECT_NE(outside.exit_code, 0) << outside.out;
  EXPECT_NE(outside.err.find("this process alone is held to the slice's limits"), std::string::npos)
      << outside.err;
  ASSERT_EQ(Api("POST", "/v1/jobs/" + id + "/cancel").value("error", json()).is_null(), true);
}

}  // namespace
}  // namespace gpuslice::security

// End-to-end tests of CUDA's checkpoint API on the simulated GPU
// (docs/SIMULATOR.md, "Checkpoint and restore"): a target cuda_probe holds
// patterned device memory of every kind; a requester cuda_probe (as the node
// daemon would) locks, checkpoints, restores and unlocks it by pid; the
// device model shows what NVML would.

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/units.h"
#include "sim/device_model.h"
#include "sim_probe.h"

namespace gpuslice::sim {
namespace {

using core::kGiB;
using core::kMiB;
using testing_probe::Probe;

// What the target's "fill" allocates besides its device memory: managed
// 3 MiB -> 4, pool 5 + 4 (cached) -> 6 + 4, array 4 MiB, VMM 2 MiB.
constexpr uint64_t kFillExtra = 4 * kMiB + 6 * kMiB + 4 * kMiB + 4 * kMiB + 2 * kMiB;
constexpr uint64_t kContext = 256 * kMiB;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/simckptXXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    env_["GPUSLICE_SIM_STATE"] = dir_ + "/state";
    env_["GPUSLICE_SIM_GPUS"] = "2xL4:mem=4GiB";
    env_["GPUSLICE_SIM_CONTEXT_MEM"] = "256MiB";
  }
  void TearDown() override {
    control_.reset();
    unlink((dir_ + "/state").c_str());
    rmdir(dir_.c_str());
  }
  std::unique_ptr<DeviceModel> Model() {
    ModelOptions o;
    o.state_path = env_["GPUSLICE_SIM_STATE"];
    o.config = *ParseGpuSpec(env_["GPUSLICE_SIM_GPUS"]);
    o.explicit_config = true;
    auto m = DeviceModel::Open(o);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? std::move(*m) : nullptr;
  }
  // A target holding `bytes` of patterned device memory (and the rest of
  // "fill") on device 0.
  std::unique_ptr<Probe> Target(uint64_t bytes, std::map<std::string, std::string> extra = {}) {
    std::map<std::string, std::string> env = env_;
    for (const auto& [k, v] : extra) env[k] = v;
    auto p = std::make_unique<Probe>(std::vector<std::string>{"ckpt-target"}, env);
    EXPECT_EQ(Ask(*p, "fill " + std::to_string(bytes)), "filled");
    return p;
  }
  static std::string Ask(Probe& p, const std::string& command) {
    p.Send(command);
    return p.ReadLine();
  }
  // The requester's answer to `command` ("lock", "state", ...) about `pid`.
  std::string Control(const std::string& command, pid_t pid, const std::string& rest = "") {
    if (!control_)
      control_ = std::make_unique<Probe>(std::vector<std::string>{"ckpt-control"}, env_);
    return Ask(*control_, command + " " + std::to_string(pid) + (rest.empty() ? "" : " " + rest));
  }
  uint64_t Used(uint32_t unit) { return Model()->UnitMemory(unit).used; }
  bool Listed(uint32_t unit, pid_t pid) {
    for (const ProcessUsage& p : Model()->UnitProcesses(unit)) {
      if (p.pid == pid) return true;
    }
    return false;
  }
  // "GPU-1234abcd-..." -> "1234abcd..." (cuDeviceGetUuid's bytes in hex).
  static std::string Hex(std::string uuid) {
    uuid = uuid.substr(4);
    uuid.erase(std::remove(uuid.begin(), uuid.end(), '-'), uuid.end());
    return uuid;
  }

  std::string dir_;
  std::map<std::string, std::string> env_;
  std::unique_ptr<Probe> control_;
};

TEST_F(CheckpointTest, LockCheckpointRestoreUnlockKeepsEveryByte) {
  const uint64_t bytes = 1 * kGiB + 12345;
  auto target = Target(bytes);
  const pid_t pid = target->pid();
  const uint64_t held = 1 * kGiB + 2 * kMiB + kFillExtra + kContext;
  ASSERT_EQ(Used(0), held);
  EXPECT_EQ(Control("state", pid), "CUDA_SUCCESS running");

  ASSERT_EQ(Control("lock", pid), "CUDA_SUCCESS");
  EXPECT_EQ(Control("state", pid), "CUDA_SUCCESS locked");
  // The target's next allocation waits for the unlock.
  target->Send("alloc");
  EXPECT_FALSE(target->LineWithin(300));

  ASSERT_EQ(Control("checkpoint", pid), "CUDA_SUCCESS");
  EXPECT_EQ(Control("state", pid), "CUDA_SUCCESS checkpointed");
  EXPECT_EQ(Used(0), 0u);
  EXPECT_FALSE(Listed(0, pid));
  {
    // Another process can use the memory meanwhile.
    Probe other({"try-alloc", std::to_string(3 * kGiB)}, env_);
    std::string out;
    ASSERT_EQ(other.Finish(&out), 0);
    EXPECT_NE(out.find("CUDA_SUCCESS"), std::string::npos) << out;
  }
  EXPECT_EQ(Used(0), 0u);

  ASSERT_EQ(Control("restore", pid), "CUDA_SUCCESS");
  EXPECT_EQ(Control("state", pid), "CUDA_SUCCESS locked");
  EXPECT_EQ(Used(0), held);
  EXPECT_TRUE(Listed(0, pid));
  EXPECT_FALSE(target->LineWithin(100));

  ASSERT_EQ(Control("unlock", pid), "CUDA_SUCCESS");
  EXPECT_EQ(Control("state", pid), "CUDA_SUCCESS running");
  EXPECT_EQ(target->ReadLine(), "allocated");
  EXPECT_EQ(Ask(*target, "verify"), "diff 0");
  EXPECT_EQ(Ask(*target, "launch"), "launched");
  EXPECT_EQ(target->Finish(), 0);
}

// A checkpoint and a restore each copy the process's device memory once, at
// about the machine's memcpy bandwidth, measured in the target in the same
// run. The first checkpoint, whose host copy is memory the process never
// had, takes at most 10x a host memcpy of the same size (2-2.5x measured on
// a loaded 2-core VM; copying everything into fresh memory and dropping the
// source after took 18-31x there, as its host provides every fresh page with
// a fault of its own); the fastest of 3 rounds of each, at most 3x (about 1x).
TEST_F(CheckpointTest, CheckpointAndRestoreRunNearMemoryBandwidth) {
  const uint64_t bytes = 512 * kMiB;
  auto target = Target(bytes);
  const pid_t pid = target->pid();
  const std::string m = Ask(*target, "memcpy " + std::to_string(bytes + kFillExtra));
  ASSERT_EQ(m.rfind("memcpy ", 0), 0u) << m;
  const double memcpy_ms = std::atof(m.c_str() + 7);
  ASSERT_GT(memcpy_ms, 0);
  auto ms_since = [](std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  std::vector<double> checkpoint_ms, restore_ms;
  for (int round = 0; round < 3; ++round) {
    ASSERT_EQ(Control("lock", pid), "CUDA_SUCCESS");
    auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(Control("checkpoint", pid), "CUDA_SUCCESS");
    checkpoint_ms.push_back(ms_since(t0));
    t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(Control("restore", pid), "CUDA_SUCCESS");
    restore_ms.push_back(ms_since(t0));
    ASSERT_EQ(Control("unlock", pid), "CUDA_SUCCESS");
  }
  std::string figures = "memcpy " + std::to_string(memcpy_ms) + " ms; checkpoints";
  for (double t : checkpoint_ms) figures += " " + std::to_string(t);
  figures += "; restores";
  for (double t : restore_ms) figures += " " + std::to_string(t);
  EXPECT_LE(checkpoint_ms[0], 10 * memcpy_ms) << figures;
  EXPECT_LE(*std::min_element(checkpoint_ms.begin(), checkpoint_ms.end()), 3 * memcpy_ms)
      << figures;
  EXPECT_LE(*std::min_element(restore_ms.begin(), restore_ms.end()), 3 * memcpy_ms) << figures;
  EXPECT_EQ(Ask(*target, "verify"), "diff 0");
}

// Neither a checkpoint nor a restore holds the process's device memory twice
// over: contents travel in chunks, each chunk's source given back once it is
// copied, so the process's peak resident memory rises by about a chunk, not
// by all of it (the kernel's high-water mark, reset before each step).
TEST_F(CheckpointTest, CheckpointAndRestoreNeverHoldTheMemoryTwice) {
  const uint64_t bytes = 512 * kMiB;
  auto target = Target(bytes);
  const pid_t pid = target->pid();
  const std::string proc = "/proc/" + std::to_string(pid);
  auto reset_peak = [&] {
    std::ofstream f(proc + "/clear_refs");
    f << "5";  // Peak resident memory := resident memory now (Linux 4.0).
    f.flush();
    return f.good();
  };
  auto status_kib = [&](const std::string& key) -> uint64_t {
    std::ifstream f(proc + "/status");
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind(key + ":", 0) == 0) {
        return std::strtoull(line.c_str() + key.size() + 1, nullptr, 10);
      }
    }
    return 0;
  };
  ASSERT_EQ(Control("lock", pid), "CUDA_SUCCESS");
  ASSERT_TRUE(reset_peak()) << "cannot write " << proc << "/clear_refs";
  const uint64_t before = status_kib("VmRSS") * 1024;
  ASSERT_GE(before, bytes);
  ASSERT_EQ(Control("checkpoint", pid), "CUDA_SUCCESS");
  EXPECT_LE(status_kib("VmHWM") * 1024, before + 128 * kMiB) << "resident before: " << before;
  ASSERT_TRUE(reset_peak());
  const uint64_t saved = status_kib("VmRSS") * 1024;
  ASSERT_EQ(Control("restore", pid), "CUDA_SUCCESS");
  EXPECT_LE(status_kib("VmHWM") * 1024, saved + 128 * kMiB) << "resident before: " << saved;
  ASSERT_EQ(Control("unlock", pid), "CUDA_SUCCESS");
  EXPECT_EQ(Ask(*target, "verify"), "diff 0");
}

TEST_F(CheckpointTest, LockWaitsForSubmittedWorkAndBlocksLaunches) {
  auto target = Target(2 * kMiB);
  const pid_t pid = target->pid();
  ASSERT_EQ(Ask(*target, "sleep 200000"), "queued");  // 200 ms of GPU work in flight.
  ASSERT_EQ(Control("lock", pid), "CUDA_SUCCESS");
  // The kernel completed before the lock was granted.
  uint64_t busy = Model()->UnitBusyNs(0);
  EXPECT_GE(busy, 200000000u);
  target->Send("launch");
  EXPECT_FALSE(target->LineWithin(300));
  EXPECT_EQ(Model()->UnitBusyNs(0), busy);
  ASSERT_EQ(Control("unlock", pid), "CUDA_SUCCESS");
  EXPECT_EQ(target->ReadLine(), "launched");
}

// The process sees one GPU, as a job does (with two, the pairs would have
// to swap them: two devices of a process never end on one GPU).
TEST_F(CheckpointTest, RestoreOntoAnotherGpuMovesTheProcess) {
  auto target = Target(64 * kMiB, {{"CUDA_VISIBLE_DEVICES", "0"}});
  const pid_t pid = target->pid();
  auto m = Model();
  const std::string gpu0 = m->Unit(0).uuid, gpu1 = m->Unit(1).uuid;
  ASSERT_EQ(Ask(*target, "uuid"), "uuid " + Hex(gpu0) + " " + std::to_string(4 * kGiB));
  ASSERT_EQ(Ask(*target, "busy 20"), "busy");
  const uint64_t held = Used(0);
  const uint64_t busy0 = m->UnitBusyNs(0);

  ASSERT_EQ(Control("lock", pid), "CUDA_SUCCESS");
  ASSERT_EQ(Control("checkpoint", pid), "CUDA_SUCCESS");
  ASSERT_EQ(Control("restore", pid, gpu0 + "=" + gpu1), "CUDA_SUCCESS");
  EXPECT_EQ(Used(0), 0u);
  EXPECT_EQ(Used(1), held);
  ASSERT_EQ(Control("unlock", pid), "CUDA_SUCCESS");

  // Device 0 of the process is GPU 1 now: its UUID, memory, processes, time.
  EXPECT_EQ(Ask(*target, "uuid"), "uuid " + Hex(gpu1) + " " + std::to_string(4 * kGiB));
  EXPECT_EQ(Ask(*target, "verify"), "diff 0");
  ASSERT_EQ(Ask(*target, "busy 20"), "busy");
  EXPECT_FALSE(Listed(0, pid));
  ASSERT_TRUE(Listed(1, pid));
  for (const ProcessUsage& p : m->UnitProcesses(1)) {
    if (p.pid == pid) {
      EXPECT_GE(p.busy_ns, 20000000u);
    }
  }
  EXPECT_GE(m->UnitBusyNs(1), 20000000u);
  EXPECT_EQ(m->UnitBusyNs(0), busy0);
  EXPECT_EQ(target->Finish(), 0);
  EXPECT_EQ(Used(1), 0u);
}

TEST_F(CheckpointTest, AProcessSeeingTwoGpusCanHaveThemSwappedNotMerged) {
  auto target = Target(8 * kMiB);
  const pid_t pid = target->pid();
  auto m = Model();
  const std::string gpu0 = m->Unit(0).uuid, gpu1 = m->Unit(1).uuid;
  ASSERT_EQ(Control("lock", pid), "CUDA_SUCCESS");
  ASSERT_EQ(Control("checkpoint", pid), "CUDA_SUCCESS");
  EXPECT_EQ(Control("restore", pid, gpu0 + "=" + gpu1), "CUDA_ERROR_INVALID_VALUE");
  ASSERT_EQ(Control("restore", pid, gpu0 + "=" + gpu1 + "," + gpu1 + "=" + gpu0), "CUDA_SUCCESS");
  ASSERT_EQ(Control("unlock", pid), "CUDA_SUCCESS");
  EXPECT_EQ(Ask(*target, "uuid"), "uuid " + Hex(gpu1) + " " + std::to_string(4 * kGiB));
  EXPECT_EQ(Ask(*target, "verify"), "diff 0");
  EXPECT_EQ(Used(0), 0u);
}

TEST_F(CheckpointTest, MigInstancesRemapToTheSameProfile) {
  env_["GPUSLICE_SIM_GPUS"] = "1xA100-40GB:mig=1g.5gb*2+2g.10gb";
  auto target = Target(16 * kMiB, {{"CUDA_VISIBLE_DEVICES", "0"}});
  const pid_t pid = target->pid();
  auto m = Model();
  const std::string a = m->Unit(0).uuid, b = m->Unit(1).uuid, big = m->Unit(2).uuid;
  ASSERT_EQ(Control("lock", pid), "CUDA_SUCCESS");
  ASSERT_EQ(Control("checkpoint", pid), "CUDA_SUCCESS");
  EXPECT_EQ(Control("restore", pid, a + "=" + big), "CUDA_ERROR_INVALID_VALUE");
  ASSERT_EQ(Control("restore", pid, a + "=" + b), "CUDA_SUCCESS");
  ASSERT_EQ(Control("unlock", pid), "CUDA_SUCCESS");
  EXPECT_EQ(Ask(*target, "uuid").substr(0, 37), "uuid " + Hex(b));
  EXPECT_EQ(Ask(*target, "verify"), "diff 0");
  EXPECT_EQ(Used(0), 0u);
  EXPECT_GT(Used(1), 16 * kMiB);
}

// Every transition the process's state does not allow, and restore
// arguments that do not fit: refused, nothing changes.
TEST_F(CheckpointTest, RefusedTransitionsChangeNothing) {
  env_["GPUSLICE_SIM_GPUS"] = "2xL4:mem=4GiB,1xT4";
  auto target = Target(8 * kMiB);
  const pid_t pid = target->pid();
  auto m = Model();
  const std::string gpu0 = m->Unit(0).uuid, gpu1 = m->Unit(1).uuid, t4 = m->Unit(2).uuid;
  struct Case {
    const char* command;
    std::string rest;
    const char* want;
    const char* state_after;
  };
  const Case cases[] = {
      {"checkpoint", "", "CUDA_ERROR_ILLEGAL_STATE", "running"},
      {"restore", "", "CUDA_ERROR_ILLEGAL_STATE", "running"},
      {"unlock", "", "CUDA_ERROR_ILLEGAL_STATE", "running"},
      {"lock", "", "CUDA_SUCCESS", "locked"},
      {"lock", "", "CUDA_ERROR_ILLEGAL_STATE", "locked"},
      {"restore", "", "CUDA_ERROR_ILLEGAL_STATE", "locked"},
      {"checkpoint", "", "CUDA_SUCCESS", "checkpointed"},
      {"checkpoint", "", "CUDA_ERROR_ILLEGAL_STATE", "checkpointed"},
      {"lock", "", "CUDA_ERROR_ILLEGAL_STATE", "checkpointed"},
      {"unlock", "", "CUDA_ERROR_ILLEGAL_STATE", "checkpointed"},
      // Pairs that leave out the GPU the process had.
      {"restore", gpu1 + "=" + gpu0, "CUDA_ERROR_INVALID_VALUE", "checkpointed"},
      // Onto another model.
      {"restore", gpu0 + "=" + t4, "CUDA_ERROR_INVALID_VALUE", "checkpointed"},
      // A GPU the machine does not have.
      {"restore", gpu0 + "=GPU-00000000-0000-0000-0000-000000000000", "CUDA_ERROR_INVALID_VALUE",
       "checkpointed"},
      // The same GPU twice.
      {"restore", gpu0 + "=" + gpu1 + "," + gpu0 + "=" + gpu1, "CUDA_ERROR_INVALID_VALUE",
       "checkpointed"},
      {"restore", "", "CUDA_SUCCESS", "locked"},
      {"unlock", "", "CUDA_SUCCESS", "running"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.command) + " " + c.rest);
    EXPECT_EQ(Control(c.command, pid, c.rest), c.want);
    EXPECT_EQ(Control("state", pid), std::string("CUDA_SUCCESS ") + c.state_after);
  }
  EXPECT_EQ(Ask(*target, "verify"), "diff 0");
}

TEST_F(CheckpointTest, RestoreWithoutRoomStaysCheckpointedUntilThereIs) {
  auto target = Target(2 * kGiB, {{"CUDA_VISIBLE_DEVICES", "0"}});
  const pid_t pid = target->pid();
  const uint64_t held = Used(0);
  ASSERT_EQ(Control("lock", pid), "CUDA_SUCCESS");
  ASSERT_EQ(Control("checkpoint", pid), "CUDA_SUCCESS");
  auto other =
      std::make_unique<Probe>(std::vector<std::string>{"hold", std::to_string(3 * kGiB)}, env_);
  ASSERT_EQ(other->ReadLine(), "ready");
  EXPECT_EQ(Control("restore", pid), "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(Control("state", pid), "CUDA_SUCCESS checkpointed");
  // Nor onto the other GPU when that is full.
  auto third = std::make_unique<Probe>(
      std::vector<std::string>{"hold", std::to_string(3 * kGiB)},
      std::map<std::string, std::string>{{"GPUSLICE_SIM_STATE", env_["GPUSLICE_SIM_STATE"]},
                                         {"CUDA_VISIBLE_DEVICES", "1"}});
  ASSERT_EQ(third->ReadLine(), "ready");
  auto m = Model();
  EXPECT_EQ(Control("restore", pid, m->Unit(0).uuid + "=" + m->Unit(1).uuid),
            "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(Control("state", pid), "CUDA_SUCCESS checkpointed");
  EXPECT_EQ(Used(0), 3 * kGiB + kContext);
  other.reset();  // Killed: reaped at the next reservation.
  ASSERT_EQ(Control("restore", pid), "CUDA_SUCCESS");
  EXPECT_EQ(Used(0), held);
  ASSERT_EQ(Control("unlock", pid), "CUDA_SUCCESS");
  EXPECT_EQ(Ask(*target, "verify"), "diff 0");
}

TEST_F(CheckpointTest, LockTimeoutWithALongKernelLeavesTheProcessRunning) {
  auto target = Target(2 * kMiB);
  const pid_t pid = target->pid();
  ASSERT_EQ(Ask(*target, "sleep 30000000"), "queued");  // 30 s.
  EXPECT_EQ(Control("lock", pid, "100"), "CUDA_ERROR_NOT_READY");
  EXPECT_EQ(Control("state", pid), "CUDA_SUCCESS running");
  // Its API calls go on (this one queues behind the kernel).
  EXPECT_EQ(Ask(*target, "sleep 1"), "queued");
}

TEST_F(CheckpointTest, TargetKilledWhileLockedOrCheckpointedIsReaped) {
  for (const char* stage : {"locked", "checkpointed"}) {
    SCOPED_TRACE(stage);
    auto target = Target(1 * kGiB);
    const pid_t pid = target->pid();
    ASSERT_EQ(Control("lock", pid), "CUDA_SUCCESS");
    if (std::string(stage) == "checkpointed") {
      ASSERT_EQ(Control("checkpoint", pid), "CUDA_SUCCESS");
    }
    target->Kill();
    EXPECT_EQ(Control("state", pid), "CUDA_ERROR_INVALID_VALUE");
    EXPECT_EQ(Control("unlock", pid), "CUDA_ERROR_INVALID_VALUE");
    EXPECT_EQ(Used(0), 0u);
    EXPECT_FALSE(Listed(0, pid));
  }
}

TEST_F(CheckpointTest, TargetKilledDuringALockAnswersTheRequesterPromptly) {
  auto target = Target(2 * kMiB);
  const pid_t pid = target->pid();
  ASSERT_EQ(Ask(*target, "sleep 600000000"), "queued");  // 10 minutes.
  control_ = std::make_unique<Probe>(std::vector<std::string>{"ckpt-control"}, env_);
  ASSERT_EQ(Ask(*control_, "state " + std::to_string(pid)), "CUDA_SUCCESS running");
  control_->Send("lock " + std::to_string(pid));  // Waits for the kernel.
  EXPECT_FALSE(control_->LineWithin(200));
  target->Kill();
  ASSERT_TRUE(control_->LineWithin(10000));
  EXPECT_EQ(control_->ReadLine(), "CUDA_ERROR_INVALID_VALUE");
  EXPECT_EQ(Used(0), 0u);
}

TEST_F(CheckpointTest, ConcurrentRequestersAreSerialised) {
  auto target = Target(2 * kMiB);
  const pid_t pid = target->pid();
  ASSERT_EQ(Ask(*target, "sleep 300000"), "queued");  // Both locks arrive while it runs.
  Probe a({"ckpt-control"}, env_), b({"ckpt-control"}, env_);
  a.Send("lock " + std::to_string(pid));
  b.Send("lock " + std::to_string(pid));
  std::vector<std::string> answers = {a.ReadLine(), b.ReadLine()};
  std::sort(answers.begin(), answers.end());
  EXPECT_EQ(answers, (std::vector<std::string>{"CUDA_ERROR_ILLEGAL_STATE", "CUDA_SUCCESS"}));
  EXPECT_EQ(Control("state", pid), "CUDA_SUCCESS locked");
  EXPECT_EQ(Control("unlock", pid), "CUDA_SUCCESS");
}

TEST_F(CheckpointTest, PidsThatAreNotCudaProcessesAreInvalid) {
  EXPECT_EQ(Control("state", getpid()), "CUDA_ERROR_INVALID_VALUE");
  EXPECT_EQ(Control("lock", 0), "CUDA_ERROR_INVALID_VALUE");
  EXPECT_EQ(Control("lock", 999999999), "CUDA_ERROR_INVALID_VALUE");
  Probe fresh({"ckpt-control"}, env_);
  EXPECT_EQ(Ask(fresh, "uninit-state " + std::to_string(getpid())), "CUDA_ERROR_NOT_INITIALIZED");
}

TEST_F(CheckpointTest, RestoreThreadIdIsTheTargetsServiceThread) {
  auto target = Target(2 * kMiB);
  const pid_t pid = target->pid();
  std::string answer = Control("tid", pid);
  ASSERT_EQ(answer.rfind("CUDA_SUCCESS ", 0), 0u) << answer;
  const std::string tid = answer.substr(13);
  std::ifstream comm("/proc/" + std::to_string(pid) + "/task/" + tid + "/comm");
  std::string name;
  std::getline(comm, name);
  EXPECT_EQ(name, "gpuslice-ckpt");
}

TEST_F(CheckpointTest, ToolTogglesAProcess) {
  auto target = Target(32 * kMiB);
  const std::string pid = std::to_string(target->pid());
  auto tool = [&](std::vector<std::string> args, std::string* out, std::string* err) {
    Probe p(args, env_, GPUSLICE_SIM_CHECKPOINT_TOOL);
    return p.Finish(out, err);
  };
  std::string out, err;
  ASSERT_EQ(tool({"--pid", pid, "--get-state"}, &out, &err), 0) << err;
  EXPECT_EQ(out, "running\n");
  ASSERT_EQ(tool({"--pid", pid, "--toggle"}, &out, &err), 0) << err;
  ASSERT_EQ(tool({"--pid", pid, "--get-state"}, &out, &err), 0) << err;
  EXPECT_EQ(out, "checkpointed\n");
  EXPECT_EQ(Used(0), 0u);
  ASSERT_EQ(tool({"--pid", pid, "--toggle"}, &out, &err), 0) << err;
  ASSERT_EQ(tool({"--pid", pid, "--get-state"}, &out, &err), 0) << err;
  EXPECT_EQ(out, "running\n");
  EXPECT_EQ(Ask(*target, "verify"), "diff 0");
  EXPECT_NE(tool({"--pid", pid, "--action", "unlock"}, &out, &err), 0);
  EXPECT_NE(err.find("CUDA_ERROR_ILLEGAL_STATE"), std::string::npos) << err;
  EXPECT_NE(tool({"--pid", "999999999", "--get-state"}, &out, &err), 0);
  EXPECT_NE(err.find("999999999"), std::string::npos) << err;
  EXPECT_NE(tool({"--pid", pid, "--action", "fly"}, &out, &err), 0);
  EXPECT_NE(err.find("fly"), std::string::npos) << err;
}

}  // namespace
}  // namespace gpuslice::sim

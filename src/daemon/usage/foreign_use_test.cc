#include "daemon/usage/foreign_use.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <memory>

#include "core/units.h"

namespace gpuslice::daemon {
namespace {

struct Report {
  std::string user;
  std::string message;
};

// A ForeignUse over a fake process table, recording what it reports, and
// the inputs of one sample (NVML's processes on GPU 0, the jobs' pids).
class ForeignUseTest : public ::testing::Test {
 protected:
  ForeignUseTest()
      : foreign_(ForeignUse::Hooks{
            [this](const std::string& user, const std::string& message) {
              reports_.push_back({user, message});
            },
            [this]() -> ProcessTable& { return procs_; }}) {
    GpuInfo gpu;
    gpu.index = 0;
    gpu.uuid = "GPU-0";
    gpu.model = "A100";
    gpu.memory_total = 40 * core::kGiB;
    inventory_.gpus.push_back(gpu);
  }

  void Owner(int64_t pid, uint32_t uid, std::string user, std::vector<std::string> groups = {}) {
    procs_.owners[pid] = ProcessOwner{uid, uid, std::move(user), std::move(groups)};
  }
  void OnGpu(uint32_t pid, uint64_t bytes) {
    GpuProcess p;
    p.pid = pid;
    p.used_memory = bytes;
    processes_.push_back(p);
  }
  void Watch(NodeCapacity* capacity = nullptr) {
    GpuUsage g;
    g.index = 0;
    g.processes = processes_;
    std::vector<GpuUsage> gpus{g};
    foreign_.Watch(ForeignUse::Sample{gpus, inventory_, job_of_pid_, container_of_, over_limit_,
                                      rules_, admin_group_, capacity});
  }
  std::vector<int64_t> Killed() const {
    std::vector<int64_t> out;
    for (const auto& [pid, signal] : procs_.signals) {
      if (signal == SIGKILL) out.push_back(pid);
    }
    return out;
  }

  FakeProcessTable procs_;
  std::vector<Report> reports_;
  ForeignUse foreign_;
  InventorySnapshot inventory_;
  std::vector<GpuProcess> processes_;
  std::unordered_map<int64_t, uint64_t> job_of_pid_;
  std::unordered_map<int64_t, uint64_t> container_of_;
  ForeignUse::OverLimit over_limit_;
  PolicyConfig rules_;
  std::string admin_group_;
};

TEST_F(ForeignUseTest, AProcessIsReportedOnceFromItsSecondSample) {
  rules_.foreign = ForeignAction::kReport;
  Owner(10, 1000, "bob");
  OnGpu(10, core::kGiB);
  Watch();
  ASSERT_EQ(foreign_.processes().size(), 1u);
  EXPECT_EQ(foreign_.processes()[0].user, "bob");
  EXPECT_EQ(foreign_.processes()[0].uid, 1000);
  EXPECT_TRUE(reports_.empty());  // Maybe a job's process NVML still lists.
  Watch();
  ASSERT_EQ(reports_.size(), 1u);
  EXPECT_EQ(reports_[0].user, "bob");
  EXPECT_NE(reports_[0].message.find("pid 10 (user bob) holds"), std::string::npos)
      << reports_[0].message;
  Watch();
  EXPECT_EQ(reports_.size(), 1u);
  EXPECT_TRUE(Killed().empty());
}

TEST_F(ForeignUseTest, AJobsProcessIsNotForeign) {
  Owner(10, 1000, "bob");
  OnGpu(10, core::kGiB);
  job_of_pid_[10] = 7;
  Watch();
  Watch();
  EXPECT_TRUE(foreign_.processes().empty());
  EXPECT_TRUE(reports_.empty());
}

TEST_F(ForeignUseTest, AGonePidIsForgottenSoItsReuseIsReportedAnew) {
  Owner(10, 1000, "bob");
  OnGpu(10, core::kGiB);
  Watch();
  Watch();
  ASSERT_EQ(reports_.size(), 1u);
  processes_.clear();
  Watch();
  EXPECT_TRUE(foreign_.processes().empty());
  OnGpu(10, core::kGiB);
  Watch();
  EXPECT_EQ(reports_.size(), 1u);  // A first sample again.
  Watch();
  EXPECT_EQ(reports_.size(), 2u);
}

TEST_F(ForeignUseTest, KillEndsEachEndableProcessOnceAndSparesRootTheAdminsAndAllowedGroups) {
  rules_.foreign = ForeignAction::kKill;
  rules_.foreign_allowed_groups = {"render"};
  admin_group_ = "gpuadmin";
  Owner(10, 1000, "bob");
  Owner(11, 0, "root");
  Owner(12, 1001, "carol", {"carol", "render"});
  Owner(13, 1002, "dave", {"gpuadmin"});
  Owner(14, 1003, "erin");
  container_of_[14] = 9;  // Named by a root-owned external job's slice.
  for (uint32_t pid : {10, 11, 12, 13, 14}) OnGpu(pid, core::kGiB);
  Watch();
  EXPECT_TRUE(Killed().empty());
  Watch();
  EXPECT_EQ(Killed(), (std::vector<int64_t>{10}));
  ASSERT_EQ(reports_.size(), 5u);
  EXPECT_NE(reports_[0].message.find("; killed (foreign = kill)"), std::string::npos);
  EXPECT_NE(reports_[1].message.find("; spared (root)"), std::string::npos);
  EXPECT_NE(reports_[2].message.find("; spared (an allowed group)"), std::string::npos);
  EXPECT_NE(reports_[3].message.find("; spared (the admin group)"), std::string::npos);
  EXPECT_NE(reports_[4].message.find("; spared (a container of external job 9)"),
            std::string::npos)
      << reports_[4].message;
  Watch();  // Still listed (the kill has not landed yet): not again.
  EXPECT_EQ(Killed().size(), 1u);
  EXPECT_EQ(reports_.size(), 5u);
}

TEST_F(ForeignUseTest, AProcessWhoseOwnerIsGoneIsNeverSignalled) {
  rules_.foreign = ForeignAction::kKill;
  OnGpu(10, core::kGiB);  // No owner: gone from /proc.
  Watch();
  Watch();
  EXPECT_TRUE(Killed().empty());
  ASSERT_EQ(reports_.size(), 1u);
  EXPECT_NE(reports_[0].message.find("gone before it could be ended"), std::string::npos);
  EXPECT_EQ(foreign_.processes()[0].user, "?");
}

TEST_F(ForeignUseTest, ForeignUseAndJobsOverTheirLimitsAreChargedToTheGpuUntilGone) {
  auto capacity = NodeCapacity::Create(inventory_.gpus, core::Policy::kBinpack);
  ASSERT_TRUE(capacity.ok());
  rules_.foreign = ForeignAction::kReport;
  Owner(10, 1000, "bob");
  OnGpu(10, 3 * core::kGiB);
  over_limit_[0] = {2 * core::kGiB, "job 4"};
  Watch(capacity->get());
  EXPECT_EQ((*capacity)->foreign().Charged(0), 5 * core::kGiB);
  processes_.clear();
  over_limit_.clear();
  Watch(capacity->get());
  EXPECT_EQ((*capacity)->foreign().Charged(0), 0u);
}

TEST_F(ForeignUseTest, ProtectEndsTheLargestUntilTheRestFitsWhatNoJobWasPromised) {
  auto capacity = NodeCapacity::Create(inventory_.gpus, core::Policy::kBinpack);
  ASSERT_TRUE(capacity.ok());
  rules_.foreign = ForeignAction::kProtect;
  // Jobs hold 35 GiB over their limits: 5 GiB of the GPU is for the rest.
  over_limit_[0] = {35 * core::kGiB, "job 4"};
  Owner(10, 1000, "bob");
  Owner(11, 1001, "carol");
  OnGpu(10, 4 * core::kGiB);
  OnGpu(11, 3 * core::kGiB);
  Watch(capacity->get());
  Watch(capacity->get());
  EXPECT_EQ(Killed(), (std::vector<int64_t>{10}));
  ASSERT_EQ(reports_.size(), 2u);
  EXPECT_NE(reports_[0].message.find("it takes memory promised to jobs on GPU 0"),
            std::string::npos)
      << reports_[0].message;
  EXPECT_EQ(reports_[1].message.find("killed"), std::string::npos) << reports_[1].message;
}

}  // namespace
}  // namespace gpuslice::daemon

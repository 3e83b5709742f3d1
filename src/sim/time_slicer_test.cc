#include "sim/time_slicer.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>

#include "sim/sim_clock.h"

namespace gpuslice::sim {
namespace {

class TimeSlicerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/simslicerXXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    options_.state_path = dir_ + "/state";
    options_.config = *ParseGpuSpec("1xH100-80GB");
    options_.explicit_config = true;
  }
  void TearDown() override {
    unlink(options_.state_path.c_str());
    rmdir(dir_.c_str());
  }
  std::string dir_;
  ModelOptions options_;
};

// A saturating process: keeps the unit busy for `run_ns` of wall time in
// 250 us steps, yielding at quantum boundaries. Writes its busy ns to `fd`.
void SaturatingChild(const ModelOptions& options, uint64_t run_ns, int fd) {
  auto m = DeviceModel::Open(options);
  if (!m.ok() || !(*m)->Register().ok()) _exit(2);
  TimeSlicer slicer(m->get(), 0);
  uint64_t end = MonotonicNs() + run_ns;
  uint64_t cursor = slicer.Acquire();
  uint64_t busy = 0;
  while (cursor < end) {
    cursor += 250000;
    SleepUntilNs(cursor);
    busy += 250000;
    (*m)->AddBusy(0, 250000);
    uint64_t back = 0;
    if (slicer.MaybeYield(cursor, &back)) cursor = std::max(cursor, back);
  }
  slicer.Release(cursor);
  if (write(fd, &busy, sizeof(busy)) != sizeof(busy)) _exit(3);
  _exit(0);
}

TEST_F(TimeSlicerTest, TwoSaturatingProcessesShareTheUnitEqually) {
  constexpr uint64_t kRunNs = 400000000;
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t kids[2];
  for (pid_t& k : kids) {
    k = fork();
    if (k == 0) SaturatingChild(options_, kRunNs, fds[1]);
  }
  close(fds[1]);
  uint64_t busy[2] = {0, 0};
  for (uint64_t& b : busy) ASSERT_EQ(read(fds[0], &b, sizeof(b)), ssize_t{sizeof(b)});
  close(fds[0]);
  for (pid_t k : kids) {
    int status = 0;
    waitpid(k, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  // Each ran alone at the end for a moment at most; the bulk is shared.
  for (uint64_t b : busy) {
    EXPECT_GT(b, kRunNs * 30 / 100) << busy[0] << " " << busy[1];
    EXPECT_LT(b, kRunNs * 75 / 100) << busy[0] << " " << busy[1];
  }
  EXPECT_LT(busy[0] + busy[1], kRunNs * 110 / 100);
}

TEST_F(TimeSlicerTest, DeadHolderDoesNotStallOthers) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t kid = fork();
  if (kid == 0) {
    auto m = DeviceModel::Open(options_);
    if (!m.ok() || !(*m)->Register().ok()) _exit(2);
    TimeSlicer slicer(m->get(), 0);
    slicer.Acquire();
    char c = 1;
    if (write(fds[1], &c, 1) != 1) _exit(3);
    pause();  // Holds the unit until killed.
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(read(fds[0], &c, 1), 1);
  auto m = DeviceModel::Open(options_);
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE((*m)->Register().ok());
  EXPECT_NE((*m)->state()->unit_state[0].arbiter.holder.load(), 0u);
  kill(kid, SIGKILL);
  waitpid(kid, nullptr, 0);
  TimeSlicer slicer(m->get(), 0);
  uint64_t start = MonotonicNs();
  slicer.Acquire();
  EXPECT_LT(MonotonicNs() - start, 2000000000u);
  EXPECT_TRUE(slicer.holding());
  slicer.Release(MonotonicNs());
  EXPECT_EQ((*m)->state()->unit_state[0].arbiter.holder.load(), 0u);
  close(fds[0]);
  close(fds[1]);
}

}  // namespace
}  // namespace gpuslice::sim

#include "shim/base/resume_on_demand.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace gpuslice::shim {
namespace {

// The page's word and the region's word of a slice, as the shim's process
// sees them (here plain atomics: the mappings are tested with the layouts).
class ResumeOnDemand : public ::testing::Test {
 protected:
  void SetUp() override { SetResumeWords(&suspension_, &request_); }
  void TearDown() override { SetResumeWords(nullptr, nullptr); }
  std::atomic<uint64_t> suspension_{0};
  std::atomic<uint64_t> request_{0};
};

TEST_F(ResumeOnDemand, ARunningJobsCallGoesOnAtOnceAndAsksNothing) {
  request_.store(7);  // What an earlier suspension left.
  ResumeIfSuspended();
  EXPECT_EQ(request_.load(), 7u);
}

TEST_F(ResumeOnDemand, ASuspendedJobsCallAsksWithTheSuspensionsIdAndWaitsUntilItEnds) {
  suspension_.store(1'700'000'000'123);
  request_.store(7);
  std::atomic<bool> returned{false};
  std::thread call([&] {
    ResumeIfSuspended();
    returned.store(true);
  });
  for (int i = 0; i < 5000 && request_.load() != 1'700'000'000'123u; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(request_.load(), 1'700'000'000'123u) << "the call asked for this suspension";
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(returned.load()) << "the call went on while the job was suspended";
  // Another value in the word (the job's other threads, or noise): asked again.
  request_.store(3);
  for (int i = 0; i < 5000 && request_.load() != 1'700'000'000'123u; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(request_.load(), 1'700'000'000'123u);
  suspension_.store(0);  // The daemon resumed it.
  call.join();
  EXPECT_TRUE(returned.load());
}

TEST_F(ResumeOnDemand, WithoutAPageNothingWaits) {
  SetResumeWords(nullptr, &request_);
  suspension_.store(5);
  ResumeIfSuspended();
  AwaitResume();
  EXPECT_EQ(request_.load(), 0u);
  SetResumeWords(&suspension_, nullptr);
  ResumeIfSuspended();
  AwaitResume();
  EXPECT_EQ(request_.load(), 0u);
}

}  // namespace
}  // namespace gpuslice::shim

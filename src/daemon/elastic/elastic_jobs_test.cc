#include "daemon/elastic/elastic_jobs.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace gpuslice::daemon {
namespace {

using core::Job;
using core::JobState;

GpuInfo Gpu(uint32_t i) {
  GpuInfo g;
  g.index = i;
  g.uuid = "GPU-" + std::to_string(i);
  g.model = "A100";
  g.memory_total = 40 * core::kGiB;
  return g;
}

struct Step {
  uint64_t id = 0;
  uint32_t count = 0;
  std::string why;
};

// Two GPUs, a job table, slices in memory and a job directory of its own;
// each step applied is recorded from its event.
class ElasticJobsTest : public ::testing::Test {
 protected:
  ElasticJobsTest() {
    auto capacity = NodeCapacity::Create({Gpu(0), Gpu(1)}, core::Policy::kBinpack);
    EXPECT_TRUE(capacity.ok());
    capacity_ = std::move(*capacity);
    rules_.elastic_cooldown_ms = 30'000;
    char tmpl[] = "/tmp/elastic-jobs-test-XXXXXX";
    EXPECT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  ~ElasticJobsTest() override {
    unlink((dir_ + "/gpus").c_str());
    rmdir(dir_.c_str());
  }

  ElasticJobs Make() {
    return ElasticJobs(
        ElasticJobs::Jobs{
            .for_each_live =
                [this](const std::function<void(const LiveJob&)>& visit) {
                  for (auto& [id, job] : jobs_) {
                    if (job.state == JobState::kRunning) visit(LiveJob{.job = &job});
                  }
                },
            .job = [this](uint64_t id) -> Job& { return jobs_.at(id); },
            .capacity = [this]() -> NodeCapacity& { return *capacity_; },
            .preempting = [this](uint64_t id) { return preempting_.count(id) > 0; },
            .fits_quotas = [this](const Job&, uint32_t count) { return count <= quota_gpus_; },
            .fits_quotas_with =
                [this](const Job&, const core::Allocation& a) {
                  return a.gpu_indices.size() <= quota_gpus_;
                },
            .schedule = [this]() { ++schedules_; },
            .limits_of =
                [](const Job& job) {
                  SliceLimits limits;
                  limits.job_id = job.id;
                  limits.uuids = job.allocation.gpu_uuids;
                  return limits;
                },
            .save_resize = [this](const Job& job) { saved_.push_back(job.id); },
            .no_room = [](const std::string&) {},
            .job_dir = [this](uint64_t) { return dir_; },
            .signal_group =
                [this](int64_t pgid, int signal) {
                  signals_.push_back({pgid, signal});
                },
            .record =
                [this](std::string kind, uint64_t id, std::string, std::string message) {
                  steps_.push_back(
                      {id, static_cast<uint32_t>(jobs_.at(id).allocation.gpu_indices.size()),
                       kind + ": " + message});
                },
        },
        rules_, clock_, regions_);
  }

  // A running job of 1 to 2 GPUs, placed now; `grow`: it asked to grow.
  Job& RunElastic(uint64_t id, bool grow) {
    Job& job = jobs_[id];
    job.id = id;
    job.state = JobState::kRunning;
    job.request.kind = core::RequestKind::kWholeGpus;
    job.request.gpus_min = 1;
    job.request.gpus_max = 2;
    job.started_ms = clock_.NowMs();
    if (grow) job.env.push_back("GPUSLICE_ELASTIC_GROW=1");
    EXPECT_TRUE(capacity_->SetDemand(id, job.request).ok());
    EXPECT_EQ(capacity_->TryPlace(id), core::FitResult::kPlaced);
    job.allocation = *capacity_->AllocationOf(id);
    return job;
  }
  // A queued job of `gpus` whole GPUs.
  Job& Queue(uint64_t id, uint32_t gpus) {
    Job& job = jobs_[id];
    job.id = id;
    job.state = JobState::kQueued;
    job.request.kind = core::RequestKind::kWholeGpus;
    job.request.gpus_min = job.request.gpus_max = gpus;
    EXPECT_TRUE(capacity_->SetDemand(id, job.request).ok());
    return job;
  }

  FakeClock clock_;
  PolicyConfig rules_;
  std::unique_ptr<NodeCapacity> capacity_;
  std::map<uint64_t, Job> jobs_;
  std::set<uint64_t> preempting_;
  uint32_t quota_gpus_ = 8;
  FakeRegionStore regions_;
  std::string dir_;
  std::vector<Step> steps_;  // The events of the steps applied.
  std::vector<uint64_t> saved_;
  std::vector<std::pair<int64_t, int>> signals_;
  int schedules_ = 0;
};

TEST_F(ElasticJobsTest, AJobOfARangeOfWholeGpusIsElastic) {
  Job job;
  job.request.kind = core::RequestKind::kWholeGpus;
  job.request.gpus_min = 1;
  job.request.gpus_max = 4;
  EXPECT_TRUE(IsElastic(job));
  job.request.gpus_max = 1;
  EXPECT_FALSE(IsElastic(job));
}

TEST_F(ElasticJobsTest, ShrinksForTheHeadWhenThatLetsItStart) {
  ASSERT_EQ(RunElastic(1, false).allocation.gpu_indices.size(), 2u);  // Both idle GPUs.
  Queue(2, 1);
  ElasticJobs e = Make();
  e.Adjust(2);
  ASSERT_EQ(steps_.size(), 1u);
  EXPECT_EQ(steps_[0].id, 1u);
  EXPECT_EQ(steps_[0].count, 1u);
  EXPECT_NE(steps_[0].why.find("(job 2)"), std::string::npos) << steps_[0].why;
  EXPECT_EQ(schedules_, 1);
}

TEST_F(ElasticJobsTest, NeitherShrinksForAHeadThatPreemptsNorForOneThatWouldNotFit) {
  RunElastic(1, false);
  Queue(2, 1);
  Queue(3, 2);  // Needs both GPUs: job 1 keeps one at least.
  preempting_ = {2};
  ElasticJobs e = Make();
  e.Adjust(2);
  e.Adjust(3);
  EXPECT_TRUE(steps_.empty());
  EXPECT_EQ(schedules_, 0);
}

TEST_F(ElasticJobsTest, GrowsOnlyAJobThatAskedToOutOfItsCooldownAndWithinItsQuotas) {
  Queue(9, 1);  // Takes one GPU while the elastic jobs start.
  ASSERT_EQ(capacity_->TryPlace(9), core::FitResult::kPlaced);
  ASSERT_EQ(RunElastic(1, /*grow=*/true).allocation.gpu_indices.size(), 1u);
  capacity_->Release(9);
  jobs_.erase(9);
  ElasticJobs e = Make();
  e.Adjust(0);
  EXPECT_TRUE(steps_.empty());  // Started now: within its cooldown.
  clock_.Advance(30'000);
  quota_gpus_ = 1;
  e.Adjust(0);
  EXPECT_TRUE(steps_.empty());  // Its quotas allow one GPU.
  quota_gpus_ = 8;
  jobs_[1].env.clear();
  e.Adjust(0);
  EXPECT_TRUE(steps_.empty());  // It did not ask to grow.
  jobs_[1].env.push_back("GPUSLICE_ELASTIC_GROW=1");
  e.Adjust(0);
  ASSERT_EQ(steps_.size(), 1u);
  EXPECT_EQ(steps_[0].count, 2u);
}

TEST_F(ElasticJobsTest, AChangeStartsTheCooldownAgain) {
  Queue(9, 1);
  ASSERT_EQ(capacity_->TryPlace(9), core::FitResult::kPlaced);
  RunElastic(1, /*grow=*/true);
  capacity_->Release(9);
  jobs_.erase(9);
  clock_.Advance(60'000);
  ElasticJobs e = Make();
  e.Changed(1, clock_.NowMs());
  e.Adjust(0);
  EXPECT_TRUE(steps_.empty());
  clock_.Advance(30'000);
  e.Adjust(0);
  EXPECT_EQ(steps_.size(), 1u);
}

TEST_F(ElasticJobsTest, AStepRecreatesTheSliceSavesTheResizeRewritesTheGpusFileAndSignals) {
  Job& job = RunElastic(1, false);
  ASSERT_EQ(job.allocation.gpu_indices.size(), 2u);
  job.pid = 4242;
  SliceLimits limits;
  limits.job_id = 1;
  limits.uuids = job.allocation.gpu_uuids;
  job.region_path = *regions_.Create(limits);
  ElasticJobs e = Make();
  ASSERT_TRUE(e.Apply(job, 1, "asked by alice").ok());
  EXPECT_EQ(job.allocation.gpu_indices.size(), 1u);
  // The given-back GPU was closed to new allocations in the old slice first.
  ASSERT_FALSE(regions_.updates.empty());
  EXPECT_EQ(regions_.updates.back().second.memory_bytes_per_device, 0u);
  EXPECT_EQ(regions_.regions.at(job.region_path).uuids, job.allocation.gpu_uuids);
  EXPECT_EQ(saved_, std::vector<uint64_t>{1});
  ASSERT_EQ(signals_.size(), 1u);
  EXPECT_EQ(signals_[0], std::make_pair(int64_t{4242}, rules_.elastic_signal));
  ASSERT_EQ(steps_.size(), 1u);
  EXPECT_EQ(steps_[0].why.rfind("elastic_shrink: 2 -> 1 GPUs", 0), 0u) << steps_[0].why;
  std::ifstream in(dir_ + "/gpus");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), job.allocation.gpu_uuids[0] + "\n");
  // Within its cooldown now.
  clock_.Advance(1'000);
  jobs_[1].env.push_back("GPUSLICE_ELASTIC_GROW=1");
  e.Adjust(0);
  EXPECT_EQ(steps_.size(), 1u);
}

TEST_F(ElasticJobsTest, AJobAboutToStartGivesBackWhatItsQuotasForbid) {
  Job& job = RunElastic(1, false);
  ASSERT_EQ(capacity_->AllocationOf(1)->gpu_indices.size(), 2u);
  quota_gpus_ = 1;
  ElasticJobs e = Make();
  e.FitToQuotas(job);
  EXPECT_EQ(capacity_->AllocationOf(1)->gpu_indices.size(), 1u);
  quota_gpus_ = 0;  // Never below its minimum.
  e.FitToQuotas(job);
  EXPECT_EQ(capacity_->AllocationOf(1)->gpu_indices.size(), 1u);
  EXPECT_TRUE(steps_.empty());  // Not a step of a running job: no event.
}

TEST_F(ElasticJobsTest, TheGpusFileListsTheJobsGpusOneALineReadableByItsUser) {
  char tmpl[] = "/tmp/elastic-jobs-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  Job job;
  job.id = 7;
  job.allocation.gpu_uuids = {"GPU-0", "GPU-1"};
  WriteGpusFile(job, dir);
  std::ifstream in(dir + "/gpus");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "GPU-0\nGPU-1\n");
  struct stat st;
  ASSERT_EQ(stat((dir + "/gpus").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0711u);
  unlink((dir + "/gpus").c_str());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace gpuslice::daemon

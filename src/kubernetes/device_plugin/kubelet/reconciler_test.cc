#include "kubernetes/device_plugin/kubelet/reconciler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "kubernetes/device_plugin/daemon/allocator.h"
#include "kubernetes/device_plugin/daemon/fake_daemon_client.h"
#include "kubernetes/device_plugin/kubelet/pod_annotations.h"

namespace gpuslice::kubernetes {
namespace {

const Resource kMem{ResourceKind::kGpuMemory, ""};
const Resource kShare{ResourceKind::kGpuShare, ""};

class FakePods final : public PodResourcesSource {
 public:
  std::vector<ContainerHolding> containers;
  core::Status refuse;
  std::atomic<int> lists{0};
  uint64_t generation = 1;
  core::Result<std::vector<ContainerHolding>> List() override {
    ++lists;
    if (!refuse.ok()) return refuse;
    return containers;
  }
  uint64_t Generation() override { return generation; }
};

std::vector<std::string> Ids(ResourceKind kind, uint32_t from, uint32_t n) {
  std::vector<std::string> out;
  for (uint32_t k = from; k < from + n; ++k) out.push_back(FractionId(kind, "GPU-a", k));
  return out;
}

class ReconcilerTest : public ::testing::Test {
 protected:
  ReconcilerOptions Options(std::chrono::milliseconds grace) {
    ReconcilerOptions o;
    o.node = "node-1";
    o.decide.release_grace = grace;
    return o;
  }
  FakeDaemonClient daemon_;
  FakePods pods_;
  JobBook book_;
  Allocator allocator_{&daemon_, &book_, AllocatorOptions{"node-1", true}};
};

TEST_F(ReconcilerTest, APairedSliceIsResizedThenResumed) {
  auto a = allocator_.Allocate(kMem, Ids(ResourceKind::kGpuMemory, 0, 4));
  ASSERT_TRUE(a.ok());
  pods_.containers = {{{"ns", "p", "c"},
                       {{kMem.Name(), Ids(ResourceKind::kGpuMemory, 0, 4)},
                        {kShare.Name(), Ids(ResourceKind::kGpuShare, 0, 25)}}}};
  Reconciler r(&daemon_, &pods_, &book_, Options(std::chrono::seconds(30)));
  ASSERT_TRUE(r.RunOnce().ok());
  EXPECT_EQ(daemon_.calls,
            (std::vector<std::string>{"create 1", "labels 1", "resize 1 250", "resume 1"}));
  EXPECT_EQ(daemon_.jobs[0].labels.at("pod"), "p");
  auto job = book_.Get(1);
  EXPECT_FALSE(job->paused);
  EXPECT_EQ(job->compute_milli, 250u);
  // In line now: the next pass does nothing.
  ASSERT_TRUE(r.RunOnce().ok());
  EXPECT_EQ(daemon_.calls.size(), 4u);
}

class FakeAnnotations final : public PodAnnotationSource {
 public:
  std::map<std::string, std::map<std::string, std::string>> pods;  // "ns/pod" -> annotations.
  core::Status refuse;
  int reads = 0;
  core::Result<std::map<std::string, std::string>> Annotations(const std::string& ns,
                                                               const std::string& pod) override {
    ++reads;
    if (!refuse.ok()) return refuse;
    return pods[ns + "/" + pod];
  }
};

// A pod's gpuslice.dev/priority annotation becomes its slice's
// priority, once, after the slice is tied to the pod; an API server that
// does not answer is asked again; a bad value is ignored.
TEST_F(ReconcilerTest, APodsPriorityAnnotationBecomesItsSlicesPriority) {
  ASSERT_TRUE(allocator_.Allocate(kMem, Ids(ResourceKind::kGpuMemory, 0, 4)).ok());
  pods_.containers = {{{"ns", "p", "c"}, {{kMem.Name(), Ids(ResourceKind::kGpuMemory, 0, 4)}}}};
  FakeAnnotations annotations;
  annotations.refuse = core::UnavailableError("API server down");
  annotations.pods["ns/p"] = {{"gpuslice.dev/priority", "high"}, {"other", "x"}};
  ReconcilerOptions o = Options(std::chrono::seconds(30));
  o.annotations = &annotations;
  Reconciler r(&daemon_, &pods_, &book_, o);
  ASSERT_TRUE(r.RunOnce().ok());
  EXPECT_EQ(std::count(daemon_.calls.begin(), daemon_.calls.end(), "priority 1 high"), 0);
  annotations.refuse = core::Status::Ok();
  ASSERT_TRUE(r.RunOnce().ok());
  EXPECT_EQ(std::count(daemon_.calls.begin(), daemon_.calls.end(), "priority 1 high"), 1);
  const int reads = annotations.reads;
  ASSERT_TRUE(r.RunOnce().ok());
  EXPECT_EQ(annotations.reads, reads);  // Once per slice.

  ASSERT_TRUE(allocator_.Allocate(kMem, Ids(ResourceKind::kGpuMemory, 4, 2)).ok());
  pods_.containers.push_back(
      {{"ns", "q", "c"}, {{kMem.Name(), Ids(ResourceKind::kGpuMemory, 4, 2)}}});
  annotations.pods["ns/q"] = {{"gpuslice.dev/priority", "urgent"}};
  ASSERT_TRUE(r.RunOnce().ok());
  for (const std::string& c : daemon_.calls) EXPECT_EQ(c.find("urgent"), std::string::npos);
}

TEST(PodAnnotations, AreReadFromThePodObject) {
  auto pod = nlohmann::json::parse(
      R"({"metadata": {"name": "p", "annotations": {"gpuslice.dev/priority": "low", "n": 1}}})");
  auto a = AnnotationsOf(pod);
  EXPECT_EQ(a.size(), 1u);
  EXPECT_EQ(a.at("gpuslice.dev/priority"), "low");
  EXPECT_TRUE(AnnotationsOf(nlohmann::json::parse(R"({"metadata": {}})")).empty());
  EXPECT_TRUE(AnnotationsOf(nlohmann::json::parse("[]")).empty());
}

TEST_F(ReconcilerTest, ARefusedResizeKeepsTheSlicePausedAndIsRetried) {
  ASSERT_TRUE(allocator_.Allocate(kMem, Ids(ResourceKind::kGpuMemory, 0, 4)).ok());
  pods_.containers = {{{"ns", "p", "c"},
                       {{kMem.Name(), Ids(ResourceKind::kGpuMemory, 0, 4)},
                        {kShare.Name(), Ids(ResourceKind::kGpuShare, 0, 60)}}}};
  daemon_.refuse_resize = core::FailedPreconditionError("60% does not fit: 40% free");
  Reconciler r(&daemon_, &pods_, &book_, Options(std::chrono::seconds(30)));
  ASSERT_TRUE(r.RunOnce().ok());
  EXPECT_TRUE(daemon_.jobs[0].paused);
  daemon_.refuse_resize = core::Status::Ok();
  ASSERT_TRUE(r.RunOnce().ok());
  EXPECT_FALSE(daemon_.jobs[0].paused);
  EXPECT_EQ(daemon_.jobs[0].compute_milli, 600u);
}

TEST_F(ReconcilerTest, NothingIsReleasedWhileTheKubeletDoesNotAnswer) {
  ASSERT_TRUE(allocator_.Allocate(kMem, Ids(ResourceKind::kGpuMemory, 0, 4)).ok());
  pods_.refuse = core::UnavailableError("kubelet restarting");
  Reconciler r(&daemon_, &pods_, &book_, Options(std::chrono::milliseconds(0)));
  EXPECT_FALSE(r.RunOnce().ok());
  EXPECT_EQ(daemon_.jobs.size(), 1u);
  pods_.refuse = core::Status::Ok();
  ASSERT_TRUE(r.RunOnce().ok());
  EXPECT_TRUE(daemon_.jobs.empty());  // No pod holds it: released.
  EXPECT_TRUE(book_.All().empty());
}

// A restarted kubelet answers before it has its pods back from the API
// server: a running pod's slice must survive that first, empty list.
TEST_F(ReconcilerTest, AKubeletRestartHoldsReleasesForTheGrace) {
  const auto grace = std::chrono::milliseconds(600);
  ASSERT_TRUE(allocator_.Allocate(kMem, Ids(ResourceKind::kGpuMemory, 0, 4)).ok());
  pods_.containers = {{{"ns", "p", "c"}, {{kMem.Name(), Ids(ResourceKind::kGpuMemory, 0, 4)}}}};
  Reconciler r(&daemon_, &pods_, &book_, Options(grace));
  ASSERT_TRUE(r.RunOnce().ok());
  std::this_thread::sleep_for(grace + std::chrono::milliseconds(50));  // The job is old enough.
  pods_.generation = 2;                                                // A new kubelet.sock...
  pods_.containers = {};                                               // ...that lists no pod yet.
  ASSERT_TRUE(r.RunOnce().ok());
  EXPECT_EQ(daemon_.jobs.size(), 1u) << "released by the restarted kubelet's first list";
  // Unheld still once the hold is over (the pod was deleted meanwhile).
  std::this_thread::sleep_for(grace + std::chrono::milliseconds(50));
  ASSERT_TRUE(r.RunOnce().ok());
  EXPECT_TRUE(daemon_.jobs.empty());
  // A kubelet that did not answer for a while counts as restarted too.
  ASSERT_TRUE(allocator_.Allocate(kMem, Ids(ResourceKind::kGpuMemory, 8, 4)).ok());
  std::this_thread::sleep_for(grace + std::chrono::milliseconds(50));
  pods_.refuse = core::UnavailableError("kubelet restarting");
  EXPECT_FALSE(r.RunOnce().ok());
  pods_.refuse = core::Status::Ok();
  ASSERT_TRUE(r.RunOnce().ok());
  EXPECT_EQ(daemon_.jobs.size(), 1u);
}

TEST_F(ReconcilerTest, AJobCancelledOutsideThePluginIsForgotten) {
  ASSERT_TRUE(allocator_.Allocate(kMem, Ids(ResourceKind::kGpuMemory, 0, 4)).ok());
  daemon_.jobs.clear();  // Cancelled by an admin.
  Reconciler r(&daemon_, &pods_, &book_, Options(std::chrono::milliseconds(0)));
  ASSERT_TRUE(r.RunOnce().ok());
  EXPECT_TRUE(book_.All().empty());
}

TEST_F(ReconcilerTest, RecoverTakesBackThisNodesSlicesOnly) {
  ASSERT_TRUE(allocator_.Allocate(kMem, Ids(ResourceKind::kGpuMemory, 0, 4)).ok());
  Allocator other(&daemon_, &book_, AllocatorOptions{"node-2", true});
  ASSERT_TRUE(other.Allocate(kMem, Ids(ResourceKind::kGpuMemory, 4, 2)).ok());
  JobBook fresh;  // A restarted plugin's.
  Reconciler r(&daemon_, &pods_, &fresh, Options(std::chrono::seconds(30)));
  auto n = r.Recover();
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 1u);
  auto job = fresh.Get(1);
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->ids, Ids(ResourceKind::kGpuMemory, 0, 4));
  EXPECT_EQ(job->gpu_uuid, "GPU-a");
  EXPECT_TRUE(job->paused);
  daemon_.refuse_jobs = core::UnavailableError("daemon down");
  EXPECT_FALSE(r.Recover().ok());
}

TEST_F(ReconcilerTest, APokedThreadRunsAPassSoon) {
  ASSERT_TRUE(allocator_.Allocate(kMem, Ids(ResourceKind::kGpuMemory, 0, 4)).ok());
  pods_.containers = {{{"ns", "p", "c"}, {{kMem.Name(), Ids(ResourceKind::kGpuMemory, 0, 4)}}}};
  ReconcilerOptions o = Options(std::chrono::seconds(30));
  o.period = std::chrono::hours(1);  // Only the poke can run a pass in time.
  o.decide.settle = std::chrono::milliseconds(0);
  Reconciler r(&daemon_, &pods_, &book_, o);
  r.Start();
  r.Poke();
  bool resumed = false;
  for (int i = 0; i < 200 && !resumed; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    resumed = !book_.Get(1)->paused;
  }
  r.Stop();
  EXPECT_TRUE(resumed);
}

TEST_F(ReconcilerTest, ABurstOfPokesRunsAFewPassesNotOneEach) {
  ReconcilerOptions o = Options(std::chrono::seconds(30));
  o.period = std::chrono::hours(1);
  o.after_allocate = std::chrono::milliseconds(100);
  o.decide.settle = std::chrono::milliseconds(300);
  Reconciler r(&daemon_, &pods_, &book_, o);
  r.Start();
  for (int i = 0; i < 50; ++i) r.Poke();
  // The first periodic pass, one soon after the burst, one after the
  // settle time (the first two are one when the thread starts late).
  for (int i = 0; i < 200 && pods_.lists.load() < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  r.Stop();
  EXPECT_GE(pods_.lists.load(), 2);
  EXPECT_LE(pods_.lists.load(), 3);
}

}  // namespace
}  // namespace gpuslice::kubernetes

#include "kubernetes/extender/placement/extender.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>

#include "core/units.h"

namespace gpuslice::kubernetes {
namespace {

using nlohmann::json;
constexpr uint64_t kGiB = core::kGiB;

GpuReport Gpu(const std::string& uuid, uint64_t allocated_gib = 0, uint32_t milli = 0,
              bool whole = false) {
  GpuReport g;
  g.uuid = uuid;
  g.model = "H100";
  g.memory_total = 80 * kGiB;
  g.memory_allocated = allocated_gib * kGiB;
  g.compute_allocated_milli = milli;
  g.whole = whole;
  return g;
}

// A synthetic cluster and a clock the test moves.
class ExtenderTest : public ::testing::Test {
 protected:
  ExtenderTest()
      : ex_(
            ExtenderOptions{}, [this] { return now_; }, nullptr) {}

  void SetNode(const std::string& name, std::vector<GpuReport> gpus, int64_t received = -1) {
    NodeEntry& e = nodes_[name];
    e.url = "http://" + name;
    e.has_report = true;
    e.report.gpus = std::move(gpus);
    e.received_ms = received < 0 ? now_ : received;
  }
  void Publish() {
    auto s = std::make_shared<Snapshot>();
    s->generation = ++generation_;
    s->nodes = nodes_;
    ex_.Publish(s);
  }
  static PodRequest Pod(const std::string& name, std::vector<ContainerAsk> asks) {
    PodRequest p;
    p.name = name;
    p.ns = "ns";
    p.uid = "uid-" + name;
    p.uses_gpuslice = true;
    p.containers = std::move(asks);
    return p;
  }
  static ContainerAsk Fraction(uint64_t gib, uint32_t pct, const std::string& name = "c") {
    ContainerAsk a;
    a.name = name;
    a.gpu_mem_bytes = gib * kGiB;
    a.share_milli = pct * 10;
    return a;
  }
  static ContainerAsk Whole(uint32_t n) {
    ContainerAsk a;
    a.name = "c";
    a.whole_gpus = n;
    return a;
  }
  std::vector<std::string> Passing(const PodRequest& p, const std::vector<std::string>& nodes,
                                   FilterAnswer* out = nullptr) {
    FilterAnswer a = ex_.Filter(p, nodes);
    std::vector<std::string> pass;
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (a.pass[i]) pass.push_back(nodes[i]);
    }
    if (out != nullptr) *out = a;
    return pass;
  }
  core::Status Bind(const PodRequest& p, const std::string& node) {
    return ex_.Bind({p.name, p.ns, p.uid, node});
  }

  int64_t now_ = 1'000'000;
  uint64_t generation_ = 0;
  std::unordered_map<std::string, NodeEntry> nodes_;
  Extender ex_;
};

TEST_F(ExtenderTest, FilterKeepsNodesWhereTheFractionFitsAndSaysWhyNot) {
  SetNode("full", {Gpu("GPU-a0", 70, 900)});
  SetNode("idle", {Gpu("GPU-b0")});
  Publish();
  FilterAnswer a;
  auto pass = Passing(Pod("p", {Fraction(20, 30)}), {"full", "idle"}, &a);
  EXPECT_EQ(pass, std::vector<std::string>{"idle"});
  const std::string why = a.failed.at("full");
  EXPECT_NE(why.find("needs 20 GiB + 30 percent on one GPU"), std::string::npos) << why;
  EXPECT_NE(why.find("most free on one GPU: 10 GiB + 10 percent"), std::string::npos) << why;
}

TEST_F(ExtenderTest, MemoryAndShareMustBeOnTheSameGpu) {
  // 40 GiB + 40% free on one GPU, 5 GiB + 60% on the other: neither holds
  // 30 GiB + 50%, though the node has both in total.
  SetNode("split", {Gpu("GPU-0", 40, 600), Gpu("GPU-1", 75, 400)});
  Publish();
  EXPECT_TRUE(Passing(Pod("p", {Fraction(30, 50)}), {"split"}).empty());
  EXPECT_EQ(Passing(Pod("q", {Fraction(30, 40)}), {"split"}), std::vector<std::string>{"split"});
}

TEST_F(ExtenderTest, PodsWithoutGpusliceResourcesPassEveryNodeUnchanged) {
  PodRequest plain;
  plain.name = "web";
  auto pass = Passing(plain, {"unknown-1", "unknown-2"});
  EXPECT_EQ(pass.size(), 2u);
  EXPECT_EQ(ex_.Prioritize(plain, {"unknown-1"}), std::vector<int64_t>{0});
}

TEST_F(ExtenderTest, ShareWithoutMemoryFailsEveryNodeWithThatMessage) {
  SetNode("idle", {Gpu("GPU-0")});
  Publish();
  auto pod = ParsePod(json::parse(R"({"metadata": {"name": "p"}, "spec": {"containers": [
      {"name": "c", "resources": {"limits": {"gpuslice.dev/gpu-share": "30"}}}]}})"));
  ASSERT_TRUE(pod.ok());
  FilterAnswer a;
  EXPECT_TRUE(Passing(*pod, {"idle", "other"}, &a).empty());
  ASSERT_EQ(a.unresolvable.size(), 2u);
  for (const auto& [node, why] : a.unresolvable) {
    EXPECT_NE(why.find("gpu-share needs gpuslice.dev/gpu-memory"), std::string::npos) << why;
  }
}

TEST_F(ExtenderTest, UnknownStaleAndDegradedNodesFailWithTheirReason) {
  SetNode("fresh", {Gpu("GPU-0")});
  SetNode("old", {Gpu("GPU-1")}, now_ - 60'000);
  nodes_["old"].last_error = "connection refused";
  SetNode("sick", {Gpu("GPU-2")});
  nodes_["sick"].report.degraded = true;
  nodes_["sick"].report.degraded_reason = "ledger write failed";
  Publish();
  FilterAnswer a;
  auto pass = Passing(Pod("p", {Fraction(8, 10)}), {"fresh", "old", "sick", "ghost"}, &a);
  EXPECT_EQ(pass, std::vector<std::string>{"fresh"});
  EXPECT_NE(a.failed.at("old").find("stale (last report 60 s ago; last poll: connection refused"),
            std::string::npos)
      << a.failed.at("old");
  EXPECT_NE(a.failed.at("sick").find("degraded: ledger write failed"), std::string::npos);
  EXPECT_NE(a.failed.at("ghost").find("unknown"), std::string::npos);
  // Time passes without a new snapshot: the fresh node goes stale too.
  now_ += 10'000;
  EXPECT_TRUE(Passing(Pod("p", {Fraction(8, 10)}), {"fresh"}).empty());
}

TEST_F(ExtenderTest, ThePolicysFavouriteScoresTenAndTheMostFragmentingZero) {
  SetNode("exact", {Gpu("GPU-e", 40, 500)});  // 50% free: a 50% pod fills it.
  SetNode("idle", {Gpu("GPU-i")});
  SetNode("sliver", {Gpu("GPU-s", 20, 300)});  // 70% free: 20% would be left, useless.
  Publish();
  PodRequest p = Pod("p", {Fraction(20, 50)});
  std::vector<std::string> nodes = {"exact", "idle", "sliver"};
  EXPECT_EQ(Passing(p, nodes).size(), 3u);
  std::vector<int64_t> s = ex_.Prioritize(p, nodes);
  EXPECT_EQ(s[0], kMaxExtenderPriority);
  EXPECT_EQ(s[2], 0);
  EXPECT_GT(s[1], s[2]);
  // A node the pod does not fit scores 0.
  SetNode("exact", {Gpu("GPU-e", 79, 990)});
  Publish();
  s = ex_.Prioritize(p, nodes);
  EXPECT_EQ(s[0], 0);
  EXPECT_EQ(s[1], kMaxExtenderPriority);
}

TEST_F(ExtenderTest, BackToBackBindsDoNotOvercommitOneGpu) {
  SetNode("n", {Gpu("GPU-0"), Gpu("GPU-1")});
  Publish();
  std::set<std::string> used;
  for (const char* name : {"a", "b"}) {
    PodRequest p = Pod(name, {Fraction(50, 60)});
    ASSERT_EQ(Passing(p, {"n"}).size(), 1u) << name;
    ASSERT_TRUE(Bind(p, "n").ok()) << name;
  }
  for (const Assumed& a : ex_.AssumedNow()) used.insert(a.gpu_uuid);
  EXPECT_EQ(used, (std::set<std::string>{"GPU-0", "GPU-1"}));
  // The daemon has reported neither yet: a third does not fit.
  PodRequest c = Pod("c", {Fraction(50, 60)});
  EXPECT_TRUE(Passing(c, {"n"}).empty());
  core::Status s = Bind(c, "n");
  EXPECT_EQ(s.code(), core::StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_EQ(ex_.AssumedNow().size(), 2u) << "a failed bind holds nothing";
}

TEST_F(ExtenderTest, AnAssumptionEndsWhenTheReportShowsItOrAfterItsTtl) {
  SetNode("n", {Gpu("GPU-0")});
  Publish();
  PodRequest p = Pod("p", {Fraction(50, 60)});
  ASSERT_EQ(Passing(p, {"n"}).size(), 1u);
  ASSERT_TRUE(Bind(p, "n").ok());
  ASSERT_EQ(ex_.AssumedNow().size(), 1u);
  // A report taken at the same moment does not count; a later one showing
  // the pod's share does.
  now_ += 1000;
  SetNode("n", {Gpu("GPU-0", 10, 100)});
  Publish();
  EXPECT_EQ(ex_.AssumedNow().size(), 1u) << "the report shows less than the pod took";
  SetNode("n", {Gpu("GPU-0", 50, 600)});
  Publish();
  EXPECT_TRUE(ex_.AssumedNow().empty());
  // Never reported: dropped after the TTL.
  PodRequest q = Pod("q", {Fraction(10, 10)});
  ASSERT_EQ(Passing(q, {"n"}).size(), 1u);
  ASSERT_TRUE(Bind(q, "n").ok());
  now_ += ExtenderOptions{}.assume_ttl_ms - 1;
  SetNode("n", {Gpu("GPU-0", 50, 600)});
  Publish();
  EXPECT_EQ(ex_.AssumedNow().size(), 1u);
  now_ += 2;
  EXPECT_TRUE(ex_.AssumedNow().empty());
}

TEST_F(ExtenderTest, ReasonsHoldNoPercentSignWhichTheSchedulersEventsWouldReadAsAVerb) {
  SetNode("full", {Gpu("GPU-a0", 70, 900)});
  Publish();
  FilterAnswer a;
  EXPECT_TRUE(Passing(Pod("p", {Fraction(20, 30)}), {"full"}, &a).empty());
  const std::string why = a.failed.at("full");
  EXPECT_EQ(why.find('%'), std::string::npos) << why;
}

TEST_F(ExtenderTest, AHoldCountsOnlyWhatTheReportDoesNotShowOfItsPodYet) {
  // gpusliced makes a pod's slice with its memory first and its share a
  // moment later: a report between the two plus the whole hold must not
  // refuse a pod that fits beside it.
  SetNode("n", {Gpu("GPU-0")});
  Publish();
  PodRequest first = Pod("first", {Fraction(4, 30)});
  ASSERT_EQ(Passing(first, {"n"}).size(), 1u);
  ASSERT_TRUE(Bind(first, "n").ok());
  now_ += 1000;
  SetNode("n", {Gpu("GPU-0", 4, 10)});  // 4 GiB, the no-share placeholder.
  Publish();
  ASSERT_EQ(ex_.AssumedNow().size(), 1u) << "the report does not show the pod's share yet";
  EXPECT_EQ(Passing(Pod("second", {Fraction(4, 70)}), {"n"}).size(), 1u)
      << "70% is free beside the first pod";
  EXPECT_TRUE(Passing(Pod("third", {Fraction(4, 71)}), {"n"}).empty());
}

TEST_F(ExtenderTest, AnAssumptionEndsWhenTheReportShowsThePodOnAnotherGpuOfItsNode) {
  // The device plugin chooses the GPU among those the kubelet offers, which
  // need not be the one the extender chose: the node's totals show the pod.
  SetNode("n", {Gpu("GPU-0", 2, 100), Gpu("GPU-1")});
  Publish();
  PodRequest whole = Pod("whole", {Whole(1)});
  ASSERT_EQ(Passing(whole, {"n"}).size(), 1u);
  ASSERT_TRUE(Bind(whole, "n").ok());
  ASSERT_EQ(ex_.AssumedNow().size(), 1u);
  ASSERT_EQ(ex_.AssumedNow()[0].gpu_uuid, "GPU-1");
  now_ += 1000;
  // GPU-0's slice ended and the whole pod got GPU-0: GPU-1 is idle again.
  SetNode("n", {Gpu("GPU-0", 80, 1000, true), Gpu("GPU-1")});
  Publish();
  EXPECT_TRUE(ex_.AssumedNow().empty());
  EXPECT_EQ(Passing(Pod("next", {Fraction(4, 30)}), {"n"}).size(), 1u)
      << "GPU-1 is free for a fraction";
  // A fraction placed on GPU-1 and given GPU-0 by the plugin likewise.
  SetNode("n", {Gpu("GPU-0", 10, 200), Gpu("GPU-1", 1, 900)});
  now_ += 1000;
  Publish();
  PodRequest frac = Pod("frac", {Fraction(10, 5)});
  ASSERT_EQ(Passing(frac, {"n"}).size(), 1u);
  ASSERT_TRUE(Bind(frac, "n").ok());
  ASSERT_EQ(ex_.AssumedNow().size(), 1u);
  now_ += 1000;
  SetNode("n", {Gpu("GPU-0", 12, 250), Gpu("GPU-1", 1, 900)});
  Publish();
  EXPECT_EQ(ex_.AssumedNow().size(), 1u) << "the node shows less than the pod took";
  SetNode("n", {Gpu("GPU-0", 20, 250), Gpu("GPU-1", 1, 900)});
  Publish();
  EXPECT_TRUE(ex_.AssumedNow().empty());
}

TEST_F(ExtenderTest, WholeGpuPodsTakeIdleGpusAndFractionsThenAvoidThem) {
  SetNode("n", {Gpu("GPU-0", 8, 100), Gpu("GPU-1")});
  Publish();
  EXPECT_TRUE(Passing(Pod("two", {Whole(2)}), {"n"}).empty());
  PodRequest one = Pod("one", {Whole(1)});
  ASSERT_EQ(Passing(one, {"n"}).size(), 1u);
  ASSERT_TRUE(Bind(one, "n").ok());
  auto held = ex_.AssumedNow();
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].gpu_uuid, "GPU-1");
  // GPU-1 is the whole pod's now: a fraction that only GPU-1 could hold
  // does not fit.
  EXPECT_TRUE(Passing(Pod("big", {Fraction(75, 50)}), {"n"}).empty());
}

TEST_F(ExtenderTest, UnhealthyGpusAreNotUsed) {
  GpuReport sick = Gpu("GPU-0");
  sick.healthy = false;
  SetNode("n", {sick});
  Publish();
  EXPECT_TRUE(Passing(Pod("p", {Fraction(8, 10)}), {"n"}).empty());
}

TEST_F(ExtenderTest, EveryContainerNeedsItsOwnRoom) {
  SetNode("one", {Gpu("GPU-a", 40, 0)});
  SetNode("two", {Gpu("GPU-b0", 40, 0), Gpu("GPU-b1", 40, 0)});
  Publish();
  PodRequest p = Pod("p", {Fraction(30, 20, "x"), Fraction(30, 20, "y")});
  FilterAnswer a;
  EXPECT_EQ(Passing(p, {"one", "two"}, &a), std::vector<std::string>{"two"});
  EXPECT_NE(a.failed.at("one").find("beside the pod's others"), std::string::npos);
  ASSERT_TRUE(Bind(p, "two").ok());
  std::set<std::string> used;
  for (const Assumed& h : ex_.AssumedNow()) used.insert(h.gpu_uuid);
  EXPECT_EQ(used.size(), 2u);
}

TEST_F(ExtenderTest, InitContainersMustFitAloneAndAreNotHeld) {
  SetNode("small", {Gpu("GPU-a", 60, 0)});
  SetNode("big", {Gpu("GPU-b", 0, 0)});
  Publish();
  PodRequest p = Pod("p", {Fraction(10, 10)});
  p.init_containers.push_back(Fraction(40, 50, "init"));
  FilterAnswer a;
  EXPECT_EQ(Passing(p, {"small", "big"}, &a), std::vector<std::string>{"big"});
  EXPECT_NE(a.failed.at("small").find("init container 'init'"), std::string::npos);
  ASSERT_TRUE(Bind(p, "big").ok());
  auto held = ex_.AssumedNow();
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].demand.gpu_mem, 10 * kGiB);
}

TEST_F(ExtenderTest, MigPodsCountFreeInstancesOfTheirProfile) {
  GpuReport mig = Gpu("GPU-m");
  mig.mig_enabled = true;
  mig.mig_free = {{"1g.10gb", 1}, {"3g.40gb", 0}};
  SetNode("n", {mig});
  Publish();
  ContainerAsk ask;
  ask.name = "c";
  ask.mig_profile = "1g.10gb";
  ask.mig_count = 1;
  PodRequest p = Pod("p", {ask});
  ASSERT_EQ(Passing(p, {"n"}).size(), 1u);
  ASSERT_TRUE(Bind(p, "n").ok());
  FilterAnswer a;
  EXPECT_TRUE(Passing(Pod("q", {ask}), {"n"}, &a).empty());
  EXPECT_NE(a.failed.at("n").find("needs 1 free MIG 1g.10gb instance(s), has 0"),
            std::string::npos);
  EXPECT_TRUE(Passing(Pod("f", {Fraction(8, 10)}), {"n"}).empty())
      << "a GPU in MIG mode holds no fraction";
}

TEST_F(ExtenderTest, TheAssignedGpusAnnotationIsContainerToUuids) {
  EXPECT_EQ(json::parse(Extender::AssignedGpusJson({{"c", {"GPU-1"}}, {"d", {"GPU-2", "GPU-3"}}})),
            json::parse(R"({"c": ["GPU-1"], "d": ["GPU-2", "GPU-3"]})"));
}

}  // namespace
}  // namespace gpuslice::kubernetes

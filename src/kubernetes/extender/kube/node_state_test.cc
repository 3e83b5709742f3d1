#include "kubernetes/extender/kube/node_state.h"

#include <gtest/gtest.h>

#include "kubernetes/extender/kube/node_poller.h"

namespace gpuslice::kubernetes {
namespace {

TEST(NodeReport, ReadsWhatTheDaemonsRouteWrites) {
  auto r = ParseNodeReport(R"({"version": 1, "node": "h", "degraded": false, "at_ms": 5,
    "gpus": [{"index": 0, "uuid": "GPU-0", "model": "H100", "pool": "default", "island": -1,
              "healthy": true, "memory_total": 85899345920, "memory_allocated": 8589934592,
              "compute_allocated_milli": 300, "whole": false, "mig_enabled": false},
             {"index": 1, "uuid": "GPU-1", "model": "H100", "healthy": false,
              "memory_total": 85899345920, "memory_allocated": 0,
              "compute_allocated_milli": 0, "whole": false, "mig_enabled": true,
              "mig_free": {"1g.10gb": 3}, "mig_total": {"1g.10gb": 7}}]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->gpus.size(), 2u);
  EXPECT_EQ(r->gpus[0].uuid, "GPU-0");
  EXPECT_EQ(r->gpus[0].memory_allocated, 8589934592u);
  EXPECT_EQ(r->gpus[0].compute_allocated_milli, 300u);
  EXPECT_FALSE(r->gpus[1].healthy);
  EXPECT_EQ(r->gpus[1].mig_free.at("1g.10gb"), 3u);
}

TEST(NodeReport, RefusesAnUnknownVersionAndMissingFields) {
  auto r = ParseNodeReport(R"({"version": 2, "gpus": []})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("version 2"), std::string::npos);
  r = ParseNodeReport(R"({"version": 1, "gpus": [{"uuid": "GPU-0"}]})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("memory_total"), std::string::npos);
  EXPECT_FALSE(ParseNodeReport("<html>").ok());
}

TEST(NodesFile, ReadsJsonOrYamlLines) {
  auto j = ParseNodesFile(R"({"a": "http://10.0.0.1:9400", "b": "http://[fd00::2]:9400/"})");
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->at("b"), "http://[fd00::2]:9400/");
  auto y = ParseNodesFile("# gpuslice nodes\na: http://10.0.0.1:9400\n\nb: 'http://h:1'  # two\n");
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(y->size(), 2u);
  EXPECT_EQ(y->at("a"), "http://10.0.0.1:9400");
  EXPECT_EQ(y->at("b"), "http://h:1");
  auto bad = ParseNodesFile("a http://x\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line 1"), std::string::npos);
  EXPECT_FALSE(ParseNodesFile("a: ftp://x\n").ok());
}

TEST(NodesFile, StateUrlIsTheBasePlusTheRoute) {
  EXPECT_EQ(NodeStateUrl("http://h:1"), "http://h:1/v1/node");
  EXPECT_EQ(NodeStateUrl("http://h:1/"), "http://h:1/v1/node");
  EXPECT_EQ(NodeStateUrl("http://h:1/v1/node"), "http://h:1/v1/node");
}

}  // namespace
}  // namespace gpuslice::kubernetes

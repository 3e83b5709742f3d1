#include "kubernetes/device_plugin/daemon/daemon_client.h"

#include <gtest/gtest.h>

namespace gpuslice::kubernetes {
namespace {

TEST(ExternalJobJson, MemoryJobAsTheContractSaysIt) {
  ExternalJobSpec s;
  s.mem_bytes = 8 * kGiB;
  s.gpu_uuids = {"GPU-a"};
  s.paused = true;
  s.name = "k8s-gpu-memory";
  s.labels = {{"gpuslice.dev/device-plugin", "n1"}};
  nlohmann::json j = ExternalJobJson(s);
  EXPECT_EQ(j, nlohmann::json::parse(R"({"mode": "external", "mem": "8GiB", "gpu_uuids": ["GPU-a"],
      "name": "k8s-gpu-memory", "labels": {"gpuslice.dev/device-plugin": "n1"}, "paused": true})"));
}

TEST(ExternalJobJson, WholeGpusAndMig) {
  ExternalJobSpec g;
  g.gpus = 2;
  g.gpu_uuids = {"GPU-a", "GPU-b"};
  EXPECT_EQ(ExternalJobJson(g)["gpus"], "2");
  EXPECT_FALSE(ExternalJobJson(g).contains("paused"));
  ExternalJobSpec m;
  m.mig = "1g.10gb";
  m.gpu_uuids = {"MIG-1"};
  EXPECT_EQ(ExternalJobJson(m)["mig"], "1g.10gb");
  EXPECT_FALSE(ExternalJobJson(m).contains("mem"));
}

TEST(JobFromJson, ReadsLabelsPauseAndAllocation) {
  auto j = JobFromJson(nlohmann::json::parse(R"({"id": 12, "state": "running", "mode": "external",
      "labels": {"pod": "p"}, "flags": ["idle", "paused"],
      "allocation": {"gpu_uuids": ["GPU-a"], "compute_milli": 300}})"));
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->id, 12u);
  EXPECT_EQ(j->mode, "external");
  EXPECT_EQ(j->labels.at("pod"), "p");
  EXPECT_TRUE(j->paused);
  EXPECT_EQ(j->compute_milli, 300u);
  EXPECT_EQ(j->gpu_uuids, (std::vector<std::string>{"GPU-a"}));
  EXPECT_FALSE(JobFromJson(nlohmann::json::parse(R"({"state": "running"})")).ok());
}

TEST(ContainerFromJson, ReadsTheDaemonsContainerAnswer) {
  auto c =
      ContainerFromJson(nlohmann::json::parse(R"({"job": 3, "cdi_device": "gpuslice.dev/slice=3",
      "device_nodes": ["/dev/nvidia0"], "env": ["A=1"], "cgroup_parent": "",
      "mounts": [{"host_path": "/h", "container_path": "/c", "read_only": true}]})"));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->cdi_device, "gpuslice.dev/slice=3");
  EXPECT_EQ(c->device_nodes, (std::vector<std::string>{"/dev/nvidia0"}));
  EXPECT_EQ(c->env, (std::vector<std::string>{"A=1"}));
  ASSERT_EQ(c->mounts.size(), 1u);
  EXPECT_TRUE(c->mounts[0].read_only);
  EXPECT_FALSE(ContainerFromJson(nlohmann::json::parse(R"({"job": 3})")).ok());
}

}  // namespace
}  // namespace gpuslice::kubernetes

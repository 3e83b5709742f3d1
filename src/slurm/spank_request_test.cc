#include "slurm/spank_request.h"

#include <gtest/gtest.h>
#include <signal.h>

namespace gpuslice::slurm {
namespace {

using nlohmann::json;

constexpr uint64_t kGiB = 1ull << 30;

// GET /v1/gpus's list for two 80 GiB GPUs whose device minors are not their
// indices (as on a machine where NVML's order is not the nodes' order).
json TwoGpus() {
  return json::array({
      {{"index", 0}, {"uuid", "GPU-a"}, {"minor", 3}, {"memory_total", 80 * kGiB}},
      {{"index", 1}, {"uuid", "GPU-b"}, {"minor", 1}, {"memory_total", 80 * kGiB}},
  });
}

StepId Step() { return {42, "0", 1000}; }

TEST(SpankOptions, ValuesAreCheckedWithTheCliParsers) {
  EXPECT_TRUE(ValidateOption("gpu-mem", "4G").ok());
  EXPECT_TRUE(ValidateOption("gpu-mem", "512MiB").ok());
  // A bare number would be bytes: refused with the CLI's hint.
  EXPECT_NE(ValidateOption("gpu-mem", "4").message().find("--gpu-mem"), std::string::npos);
  EXPECT_FALSE(ValidateOption("gpu-mem", "0G").ok());
  EXPECT_FALSE(ValidateOption("gpu-mem", "lots").ok());
  EXPECT_TRUE(ValidateOption("gpu-share", "30").ok());
  EXPECT_TRUE(ValidateOption("gpu-share", "12.5%").ok());
  EXPECT_FALSE(ValidateOption("gpu-share", "150").ok());
  EXPECT_FALSE(ValidateOption("gpu-share", "0").ok());
  EXPECT_TRUE(ValidateOption("gpu-priority", "high").ok());
  auto bad = ValidateOption("gpu-priority", "urgent");
  EXPECT_NE(bad.message().find("--gpu-priority"), std::string::npos) << bad.message();
}

TEST(SpankOptions, PluginArguments) {
  auto c = ParsePluginArgs({});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->socket, "/run/gpuslice/gpuslice.sock");
  EXPECT_EQ(c->shards_per_gpu, 0u);
  EXPECT_TRUE(c->required);
  c = ParsePluginArgs({"socket=/tmp/x.sock", "shards_per_gpu=8", "required=no"});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->socket, "/tmp/x.sock");
  EXPECT_EQ(c->shards_per_gpu, 8u);
  EXPECT_FALSE(c->required);
  EXPECT_FALSE(ParsePluginArgs({"socket=relative.sock"}).ok());
  EXPECT_FALSE(ParsePluginArgs({"shards_per_gpu=0"}).ok());
  EXPECT_FALSE(ParsePluginArgs({"shards_per_gpu=eight"}).ok());
  EXPECT_FALSE(ParsePluginArgs({"required=maybe"}).ok());
  auto unknown = ParsePluginArgs({"sockets=/x"});
  EXPECT_NE(unknown.status().message().find("sockets=/x"), std::string::npos);
}

TEST(StepGres, IdListsAndTheEnvironment) {
  auto ids = ParseIdList("0,2-4");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<uint32_t>{0, 2, 3, 4}));
  EXPECT_FALSE(ParseIdList("1,x").ok());
  EXPECT_FALSE(ParseIdList("3-1").ok());
  EXPECT_FALSE(ParseIdList("").ok());

  auto g = StepGresFromEnv({{"SLURM_STEP_GPUS", "3"}, {"SLURM_JOB_GPUS", "1,3"}});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->gpu_minors, std::vector<uint32_t>{3});  // The step's, not the job's.
  g = StepGresFromEnv({{"SLURM_JOB_GPUS", "1"}, {"SLURM_SHARDS_ON_NODE", "2"}});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->gpu_minors, std::vector<uint32_t>{1});
  EXPECT_EQ(g->shards, 2u);
  g = StepGresFromEnv({{"CUDA_VISIBLE_DEVICES", "0"}});  // Not a device node: ignored.
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(g->gpu_minors.empty());
  EXPECT_FALSE(StepGresFromEnv({{"SLURM_STEP_GPUS", "nvidia0"}}).ok());
}

TEST(SliceRequest, WholeGpusWithoutOptionsMatchedByDeviceMinor) {
  StepGres gres{{1, 3}, 0};
  auto body = BuildSliceRequest({}, gres, Step(), {}, TwoGpus());
  ASSERT_TRUE(body.ok()) << body.status().message();
  EXPECT_EQ((*body)["mode"], "external");
  EXPECT_EQ((*body)["bound_to_caller"], true);
  EXPECT_EQ((*body)["gpus"], "2");
  // /dev/nvidia1 is GPU-b, /dev/nvidia3 GPU-a: by node, not by index.
  EXPECT_EQ((*body)["gpu_uuids"], json::array({"GPU-b", "GPU-a"}));
  EXPECT_EQ((*body)["labels"]["slurm_job"], "42");
  EXPECT_EQ((*body)["labels"]["slurm_step"], "0");
  EXPECT_EQ((*body)["name"], "slurm-42.0");
  EXPECT_FALSE(body->contains("mem"));
}

TEST(SliceRequest, MemoryShareAndPriority) {
  SpankOptions o;
  o.mem = "4G";
  o.share = "30";
  o.priority = "high";
  auto body = BuildSliceRequest(o, {{3}, 0}, Step(), {}, TwoGpus());
  ASSERT_TRUE(body.ok()) << body.status().message();
  EXPECT_EQ((*body)["mem"], "4G");
  EXPECT_EQ((*body)["compute"], "30%");
  EXPECT_EQ((*body)["priority"], "high");
  EXPECT_EQ((*body)["gpu_uuids"], json::array({"GPU-a"}));
  EXPECT_FALSE(body->contains("gpus"));
}

TEST(SliceRequest, AShareAloneTakesThatPartOfTheMemory) {
  SpankOptions o;
  o.share = "25";
  auto body = BuildSliceRequest(o, {{1}, 0}, Step(), {}, TwoGpus());
  ASSERT_TRUE(body.ok()) << body.status().message();
  EXPECT_EQ((*body)["mem"], 20 * kGiB);
  EXPECT_EQ((*body)["compute"], "25%");
}

TEST(SliceRequest, ShardsAreAFractionOfTheGpu) {
  PluginConfig c;
  c.shards_per_gpu = 8;
  auto body = BuildSliceRequest({}, {{1}, 2}, Step(), c, TwoGpus());
  ASSERT_TRUE(body.ok()) << body.status().message();
  EXPECT_EQ((*body)["compute"], "25%");
  EXPECT_EQ((*body)["mem"], 20 * kGiB);
  // --gpu-share wins over the shards' fraction; --gpu-mem over its memory.
  SpankOptions o;
  o.share = "50";
  o.mem = "1G";
  body = BuildSliceRequest(o, {{1}, 2}, Step(), c, TwoGpus());
  ASSERT_TRUE(body.ok());
  EXPECT_EQ((*body)["compute"], "50%");
  EXPECT_EQ((*body)["mem"], "1G");
  // Without the admin's shards_per_gpu the fraction is unknown.
  auto unknown = BuildSliceRequest({}, {{1}, 2}, Step(), {}, TwoGpus());
  EXPECT_NE(unknown.status().message().find("shards_per_gpu"), std::string::npos);
  // More shards than one GPU has.
  EXPECT_FALSE(BuildSliceRequest({}, {{1}, 9}, Step(), c, TwoGpus()).ok());
}

TEST(SliceRequest, RefusalsSayWhatToDo) {
  SpankOptions o;
  o.mem = "4G";
  auto none = BuildSliceRequest(o, {}, Step(), {}, TwoGpus());
  EXPECT_NE(none.status().message().find("--gres=gpu"), std::string::npos);
  auto two = BuildSliceRequest(o, {{1, 3}, 0}, Step(), {}, TwoGpus());
  EXPECT_NE(two.status().message().find("2 GPUs"), std::string::npos) << two.status().message();
  auto unknown = BuildSliceRequest({}, {{7}, 0}, Step(), {}, TwoGpus());
  EXPECT_NE(unknown.status().message().find("/dev/nvidia7"), std::string::npos);
}

TEST(SliceRequest, SpecialStepNames) {
  EXPECT_EQ(StepName(0xfffffffbu), "batch");
  EXPECT_EQ(StepName(0xfffffffcu), "extern");
  EXPECT_EQ(StepName(0xfffffffau), "interactive");
  EXPECT_EQ(StepName(3), "3");
}

TEST(StepEnv, PreloadAndLibraryPathKeepTheStepsOwn) {
  json env = json::array({"CUDA_VISIBLE_DEVICES=GPU-a", "GPUSLICE_SLICE=/run/x",
                          "LD_PRELOAD=/lib/libgpuslice.so", "LD_LIBRARY_PATH=/sim"});
  auto out = StepEnvironment(
      env, {{"LD_PRELOAD", "/opt/a.so /opt/b.so"}, {"LD_LIBRARY_PATH", "/usr/local/lib:/sim"}});
  EXPECT_EQ(out["LD_PRELOAD"], "/lib/libgpuslice.so:/opt/a.so:/opt/b.so");
  EXPECT_EQ(out["LD_LIBRARY_PATH"], "/sim:/usr/local/lib");
  EXPECT_EQ(out["CUDA_VISIBLE_DEVICES"], "GPU-a");
  EXPECT_EQ(out["GPUSLICE_SLICE"], "/run/x");
  out = StepEnvironment(env, {});
  EXPECT_EQ(out["LD_PRELOAD"], "/lib/libgpuslice.so");
}

}  // namespace
}  // namespace gpuslice::slurm

namespace gpuslice::slurm {
namespace {

// A step's slice ends with the step's exit status, not always "exit 0".
TEST(StepExit, ATasksWaitStatusBecomesTheExitCodeAShellWouldSay) {
  EXPECT_EQ(ExitCodeOfWaitStatus(0), 0);
  EXPECT_EQ(ExitCodeOfWaitStatus(3 << 8), 3);
  EXPECT_EQ(ExitCodeOfWaitStatus(SIGKILL), 128 + SIGKILL);
}

}  // namespace
}  // namespace gpuslice::slurm

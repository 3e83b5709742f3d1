#include "slurm/slurm_conf.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace gpuslice::slurm {
namespace {

TEST(SlurmConf, BracketsExpandLikeSlurms) {
  EXPECT_EQ(ExpandBrackets("/dev/nvidia[0-1,3]"),
            (std::vector<std::string>{"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia3"}));
  EXPECT_EQ(ExpandBrackets("node[08-10]"),
            (std::vector<std::string>{"node08", "node09", "node10"}));
  EXPECT_EQ(ExpandBrackets("plain"), std::vector<std::string>{"plain"});
  EXPECT_TRUE(ExpandBrackets("bad[1-").empty());
  EXPECT_TRUE(ExpandBrackets("bad[3-1]").empty());
}

TEST(SlurmConf, LinesAndPlugstack) {
  auto lines = ParseConfLines("# comment\nGresTypes=gpu,shard\n\nNodeName=n[1-2] Gres=gpu:2 # x\n");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].at("grestypes"), "gpu,shard");
  EXPECT_EQ(lines[1].at("nodename"), "n[1-2]");
  auto ps = ParsePlugstack(
      "required /usr/lib/gpuslice/libgpuslice_spank.so shards_per_gpu=8\n"
      "include /etc/slurm/plugstack.conf.d/*.conf\nbogus line here\n");
  ASSERT_EQ(ps.size(), 2u);
  EXPECT_TRUE(ps[0].required);
  EXPECT_EQ(ps[0].args, std::vector<std::string>{"shards_per_gpu=8"});
  EXPECT_TRUE(ps[1].include);
}

SlurmSetup Good() {
  SlurmSetup s;
  s.slurm_conf_path = "/etc/slurm/slurm.conf";
  s.slurm_conf = "GresTypes=gpu,shard\nProctrackType=proctrack/cgroup\n";
  s.gres_conf =
      "NodeName=gsnode[1-2] Name=gpu File=/dev/nvidia[0-1]\n"
      "NodeName=gsnode[1-2] Name=shard Count=16 File=/dev/nvidia[0-1]\n"
      "NodeName=other Name=gpu File=/dev/nvidia7\n";
  s.plugstack = ParsePlugstack(
      "required /usr/lib/libgpuslice_spank.so shards_per_gpu=8 socket=/run/gs.sock\n");
  s.hostname = "gsnode2";
  s.devices["/dev/nvidia0"] = {true, true, 195, 0};
  s.devices["/dev/nvidia1"] = {true, true, 195, 1};
  s.daemon_socket = "/run/gs.sock";
  s.gpu_minors = {{0, "GPU-a"}, {1, "GPU-b"}};
  s.socket_probe.checked = true;
  s.socket_probe.reachable = true;
  s.socket_probe.group = "slurm-users";
  s.socket_probe.seen = "srw-rw---- root:slurm-users";
  s.socket_probe.members = {"alice", "bob"};
  return s;
}

const SlurmCheck* Find(const std::vector<SlurmCheck>& checks, const std::string& name) {
  for (const SlurmCheck& c : checks) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

TEST(SlurmDoctor, AGoodNodePassesEveryCheck) {
  auto checks = CheckSlurm(Good());
  for (const char* name : {"slurm_gres_types", "slurm_plugstack", "slurm_plugin_socket",
                           "slurm_gres_devices", "slurm_shards"}) {
    const SlurmCheck* c = Find(checks, name);
    ASSERT_NE(c, nullptr) << name;
    EXPECT_TRUE(c->ok) << name << ": " << c->detail;
  }
  EXPECT_NE(Find(checks, "slurm_gres_devices")->detail.find("/dev/nvidia1 = GPU-b"),
            std::string::npos);
  EXPECT_EQ(Find(checks, "slurm_proctrack"), nullptr);
}

// doctor must not say "the plugin reaches gpusliced" (checked as root)
// while every user's step is refused.
TEST(SlurmDoctor, TheSocketIsJudgedAsAUserOfItsGroupWouldMeetIt) {
  SlurmSetup s = Good();
  const auto good = CheckSlurm(s);
  const SlurmCheck* ok = Find(good, "slurm_plugin_socket");
  ASSERT_NE(ok, nullptr);
  EXPECT_TRUE(ok->ok);
  EXPECT_NE(ok->detail.find("a user of group slurm-users (not root) connects"), std::string::npos)
      << ok->detail;
  EXPECT_NE(ok->detail.find("members: alice, bob"), std::string::npos) << ok->detail;
  s.socket_probe.reachable = false;
  s.socket_probe.group = "root";
  s.socket_probe.seen = "srw-rw---- root:root";
  s.socket_probe.why = "it belongs to group root";
  auto checks = CheckSlurm(s);
  const SlurmCheck* refused = Find(checks, "slurm_plugin_socket");
  EXPECT_FALSE(refused->ok);
  EXPECT_NE(refused->detail.find("cannot connect"), std::string::npos) << refused->detail;
  EXPECT_NE(refused->detail.find("socket_group"), std::string::npos) << refused->detail;
  EXPECT_EQ(refused->detail.find("reaches"), std::string::npos);
  s.socket_probe = SocketProbe{};  // Not root: not tried, and said so.
  const auto untried = CheckSlurm(s);
  const SlurmCheck* unknown = Find(untried, "slurm_plugin_socket");
  EXPECT_TRUE(unknown->note);
  EXPECT_NE(unknown->detail.find("not checked"), std::string::npos);
}

TEST(SlurmDoctor, EachMistakeIsNamed) {
  SlurmSetup s = Good();
  s.slurm_conf = "GresTypes=shard\nProctrackType=proctrack/pgid\n";
  auto checks = CheckSlurm(s);
  EXPECT_FALSE(Find(checks, "slurm_gres_types")->ok);
  EXPECT_TRUE(Find(checks, "slurm_proctrack")->note);

  s = Good();
  s.daemon_socket = "/run/other.sock";
  EXPECT_NE(Find(CheckSlurm(s), "slurm_plugin_socket")->detail.find("/run/other.sock"),
            std::string::npos);

  s = Good();
  s.devices["/dev/nvidia1"] = {true, false, 0, 0};  // A plain file.
  auto dev = Find(CheckSlurm(s), "slurm_gres_devices");
  EXPECT_FALSE(dev->ok);
  EXPECT_NE(dev->detail.find("/dev/nvidia1 is not an NVIDIA character device"), std::string::npos);
  s = Good();
  s.gpu_minors.erase(1);
  EXPECT_NE(Find(CheckSlurm(s), "slurm_gres_devices")->detail.find("minor 1"), std::string::npos);

  s = Good();
  s.plugstack = ParsePlugstack("required /usr/lib/libgpuslice_spank.so socket=/run/gs.sock\n");
  auto shards = Find(CheckSlurm(s), "slurm_shards");
  EXPECT_FALSE(shards->ok);
  EXPECT_NE(shards->detail.find("not set"), std::string::npos);

  s = Good();
  s.plugstack.clear();
  auto none = Find(CheckSlurm(s), "slurm_plugstack");
  EXPECT_FALSE(none->ok);
  EXPECT_NE(none->detail.find("libgpuslice_spank.so"), std::string::npos);

  s = Good();
  s.hostname = "elsewhere";  // No gres.conf line for this node.
  EXPECT_FALSE(Find(CheckSlurm(s), "slurm_gres_devices")->ok);
  EXPECT_EQ(GresDevicePaths(Good().gres_conf, "other"), std::vector<std::string>{"/dev/nvidia7"});
}

std::string ReadDeploy(const std::string& name) {
  std::ifstream in(std::string(GPUSLICE_DEPLOY_SLURM_DIR) + "/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(SlurmDoctor, TheShippedSnippetsPass) {
  SlurmSetup s;
  s.slurm_conf_path = "slurm.conf.fragment";
  s.slurm_conf = ReadDeploy("slurm.conf.fragment");
  s.gres_conf = ReadDeploy("gres.conf");
  s.plugstack = ParsePlugstack(ReadDeploy("plugstack.conf.d/gpuslice.conf"));
  ASSERT_FALSE(s.slurm_conf.empty());
  ASSERT_EQ(s.plugstack.size(), 1u);
  s.hostname = "gpu01";
  s.devices["/dev/nvidia0"] = {true, true, 195, 0};
  s.devices["/dev/nvidia1"] = {true, true, 195, 1};
  s.daemon_socket = "/run/gpuslice/gpuslice.sock";
  s.gpu_minors = {{0, "GPU-a"}, {1, "GPU-b"}};
  for (const SlurmCheck& c : CheckSlurm(s)) EXPECT_TRUE(c.ok) << c.name << ": " << c.detail;
  EXPECT_EQ(CheckSlurm(s).size(), 5u);
}

}  // namespace
}  // namespace gpuslice::slurm

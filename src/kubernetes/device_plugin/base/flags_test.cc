#include "kubernetes/device_plugin/base/flags.h"

#include <gtest/gtest.h>

namespace gpuslice::kubernetes {
namespace {

TEST(Flags, DefaultsAreTheKubeletsPaths) {
  auto f = ParseFlags({});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->device_plugin_dir, "/var/lib/kubelet/device-plugins/");
  EXPECT_EQ(f->pod_resources_socket, "/var/lib/kubelet/pod-resources/kubelet.sock");
  EXPECT_TRUE(f->cdi);
  EXPECT_EQ(f->poll_interval, std::chrono::seconds(5));
  EXPECT_EQ(f->release_grace, std::chrono::seconds(30));
  EXPECT_TRUE(f->socket.empty());
}

TEST(Flags, EveryFlagInBothSpellings) {
  auto f = ParseFlags({"--socket", "/s", "--device-plugin-dir=/d/", "--pod-resources-socket",
                       "/p.sock", "--no-cdi", "--poll-interval=500ms", "--release-grace", "2s",
                       "--node-name", "n1"});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->socket, "/s");
  EXPECT_EQ(f->device_plugin_dir, "/d/");
  EXPECT_EQ(f->pod_resources_socket, "/p.sock");
  EXPECT_FALSE(f->cdi);
  EXPECT_EQ(f->poll_interval, std::chrono::milliseconds(500));
  EXPECT_EQ(f->release_grace, std::chrono::seconds(2));
  EXPECT_EQ(f->node_name, "n1");
  EXPECT_TRUE(ParseFlags({"-h"})->help);
}

TEST(Flags, MistakesAreRefusedNamingTheFlag) {
  struct Case {
    std::vector<std::string> args;
    const char* says;
  };
  for (const Case& c : {Case{{"--sockets", "/x"}, "unknown flag '--sockets'"},
                        Case{{"--socket"}, "--socket: needs a value"},
                        Case{{"--no-cdi=1"}, "--no-cdi takes no value"},
                        Case{{"--poll-interval", "soon"}, "--poll-interval"},
                        Case{{"--poll-interval", "10ms"}, "at least 100ms"},
                        Case{{"--socket="}, "--socket: empty"}}) {
    auto f = ParseFlags(c.args);
    ASSERT_FALSE(f.ok()) << c.says;
    EXPECT_NE(f.status().message().find(c.says), std::string::npos) << f.status().message();
  }
}

}  // namespace
}  // namespace gpuslice::kubernetes

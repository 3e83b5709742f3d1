#include "daemon/config/config.h"

#include <gtest/gtest.h>

namespace gpuslice::daemon {
namespace {

TEST(Config, FileOverridesDefaults) {
  DaemonConfig c;
  auto s = ParseConfigText(
      "# comment\n"
      "socket = /tmp/x.sock\n"
      "state_dir=/var/tmp/gs   # trailing comment\n"
      "policy = spread\n"
      "backfill = off\n"
      "kill_grace = 10s\n"
      "socket_mode = 0600\n",
      "test.conf", &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(c.socket, "/tmp/x.sock");
  EXPECT_EQ(c.state_dir, "/var/tmp/gs");
  EXPECT_EQ(c.policy, core::Policy::kSpread);
  EXPECT_FALSE(c.backfill);
  EXPECT_EQ(c.kill_grace_ms, 10000);
  EXPECT_EQ(c.socket_mode, 0600u);
}

TEST(Config, CgroupsAndTheLogCapHaveDefaultsAndCheckedValues) {
  DaemonConfig c;
  EXPECT_TRUE(c.cgroups);
  EXPECT_EQ(CgroupBaseFor(c), "gpuslice");
  c.state_dir = "/tmp/other";
  EXPECT_EQ(CgroupBaseFor(c).rfind("gpuslice-", 0), 0u) << "daemons of other state dirs differ";
  EXPECT_EQ(CgroupBaseFor(c).size(), 9u + 16u);
  EXPECT_EQ(c.max_log_bytes, 1ull << 30);
  ASSERT_TRUE(
      ParseConfigText("cgroups = off\ncgroup_base = ci/run-1\nmax_log_size = 64KiB\n", "t.conf", &c)
          .ok());
  EXPECT_FALSE(c.cgroups);
  EXPECT_EQ(CgroupBaseFor(c), "ci/run-1");
  EXPECT_TRUE(c.compute_corun);
  EXPECT_TRUE(ApplyConfigValue(&c, "compute_corun", "off").ok());
  EXPECT_FALSE(c.compute_corun);
  EXPECT_FALSE(ApplyConfigValue(&c, "compute_corun", "sometimes").ok());
  EXPECT_EQ(c.max_log_bytes, 64u * 1024);
  EXPECT_TRUE(ApplyConfigValue(&c, "max_log_size", "0").ok());  // No cap.
  EXPECT_FALSE(ApplyConfigValue(&c, "max_log_size", "1KiB").ok());
  for (const char* bad : {"/abs", "../up", "a b", "trailing/", ""}) {
    EXPECT_FALSE(ApplyConfigValue(&c, "cgroup_base", bad).ok()) << bad;
  }
}

TEST(Config, ComputeHandOffIsOnWithAMillisecondQuantumAndTakesCheckedValues) {
  DaemonConfig c;
  EXPECT_TRUE(c.compute_handoff);
  EXPECT_EQ(c.compute_quantum_ms, 1);
  EXPECT_TRUE(ApplyConfigValue(&c, "compute_handoff", "off").ok());
  EXPECT_FALSE(c.compute_handoff);
  EXPECT_TRUE(ApplyConfigValue(&c, "compute_quantum", "5ms").ok());
  EXPECT_EQ(c.compute_quantum_ms, 5);
  for (const char* bad : {"0", "500us", "21ms", "1s", "soon"}) {
    core::Status s = ApplyConfigValue(&c, "compute_quantum", bad);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find("compute_quantum"), std::string::npos) << s.message();
  }
  EXPECT_EQ(c.compute_quantum_ms, 5);
}

TEST(Config, MetricsListenIsOffByDefaultAndTakesHostPort) {
  DaemonConfig config;
  EXPECT_EQ(config.metrics_listen, "");
  ASSERT_TRUE(ParseConfigText("metrics_listen = 127.0.0.1:0\n", "t.conf", &config).ok());
  EXPECT_EQ(config.metrics_listen, "127.0.0.1:0");
}

TEST(Config, TheDriverRootIsTheHostsRootByDefaultAndAnAbsolutePath) {
  DaemonConfig c;
  EXPECT_EQ(c.driver_root, "/");
  ASSERT_TRUE(ParseConfigText("driver_root = /driver-root/\n", "t.conf", &c).ok());
  EXPECT_EQ(c.driver_root, "/driver-root");
  EXPECT_TRUE(ApplyConfigValue(&c, "driver_root", "/").ok());
  EXPECT_EQ(c.driver_root, "/");
  auto s = ApplyConfigValue(&c, "driver_root", "driver-root");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("driver_root"), std::string::npos) << s.message();
}

TEST(Config, ErrorsNameTheLineAndTheValue) {
  struct Case {
    const char* text;
    const char* needle;
  } cases[] = {
      {"socket = relative.sock\n", "test.conf:1: socket: must be an absolute path"},
      {"\n\npolicy = random-fit\n", "test.conf:3: policy: 'random-fit' is random"},
      {"colour = blue\n", "unknown setting 'colour'"},
      {"just words\n", "expected 'key = value'"},
      {"socket_mode = 0666\n", "not world-writable"},
      {"backfill = maybe\n", "expected true or false"},
      {"gpu_source = gpu\n", "expected auto, nvml or simulated"},
      {"metrics_listen = 9400\n", "metrics_listen: expected HOST:PORT, got '9400'"},
  };
  for (const Case& c : cases) {
    DaemonConfig config;
    auto s = ParseConfigText(c.text, "test.conf", &config);
    ASSERT_FALSE(s.ok()) << c.text;
    EXPECT_NE(s.message().find(c.needle), std::string::npos) << s.message();
  }
}

TEST(Config, PolicySettings) {
  DaemonConfig c;
  EXPECT_TRUE(c.rules.resume_on_demand) << "on by default";
  auto s = ParseConfigText(
      "pool.inference = 0\n"
      "pool.shared = 1, GPU-abc\n"
      "default_pool = shared\n"
      "preemption = lower-after:10m\n"
      "preemption_grace = 20s\n"
      "watchdog = stop\n"
      "watchdog_allowance = 1GiB\n"
      "watchdog_compute = kill\n"
      "watchdog_compute_window = 20s\n"
      "watchdog_compute_margin = 15%\n"
      "foreign = kill\n"
      "foreign_allowed_groups = render, video\n"
      "idle_threshold = 25%\n"
      "idle_after = 5m\n"
      "idle_action = pause\n"
      "idle_action_always = yes\n"
      "resume_on_demand = off\n"
      "elastic_signal = SIGUSR2\n"
      "elastic_cooldown = 10s\n",
      "test.conf", &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const PolicyConfig& r = c.rules;
  ASSERT_EQ(r.pools.size(), 2u);
  EXPECT_EQ(r.pools[1].name, "shared");
  EXPECT_EQ(r.pools[1].gpus, (std::vector<std::string>{"1", "GPU-abc"}));
  EXPECT_EQ(r.default_pool, "shared");
  EXPECT_EQ(r.preemption.ToString(), "lower-after:10m");
  EXPECT_EQ(r.preemption_grace_ms, 20000);
  EXPECT_EQ(r.watchdog, WatchdogAction::kStop);
  EXPECT_EQ(r.watchdog_allowance_bytes, core::kGiB);
  EXPECT_EQ(r.watchdog_compute, WatchdogAction::kKill);
  EXPECT_EQ(r.watchdog_compute_window_ms, 20000);
  EXPECT_DOUBLE_EQ(r.watchdog_compute_margin_pct, 15.0);
  EXPECT_EQ(r.foreign, ForeignAction::kKill);
  EXPECT_EQ(r.foreign_allowed_groups, (std::vector<std::string>{"render", "video"}));
  EXPECT_DOUBLE_EQ(r.idle_threshold_pct, 25.0);
  EXPECT_EQ(r.idle_after_ms, 300000);
  EXPECT_EQ(r.idle_action, IdleAction::kPause);
  EXPECT_TRUE(r.idle_action_always);
  EXPECT_FALSE(r.resume_on_demand);
  EXPECT_EQ(r.elastic_signal, SIGUSR2);
  EXPECT_EQ(r.elastic_cooldown_ms, 10000);
}

// Defaults for a shared server. A confirmed compute bypass is
// ended within 2 s, a foreign process that takes memory a job was promised
// is ended, and the memory allowance is a learnt context per registered
// process up to 2 GiB a job and GPU.
TEST(Config, TheDefaultsProtectASharedServer) {
  DaemonConfig c;
  ASSERT_TRUE(ParseConfigText("", "test.conf", &c).ok());
  const PolicyConfig& r = c.rules;
  EXPECT_EQ(r.watchdog, WatchdogAction::kKill);
  EXPECT_FALSE(r.watchdog_allowance_bytes.has_value()) << "auto: learnt from NVML";
  EXPECT_EQ(r.watchdog_allowance_max_bytes, 2 * core::kGiB);
  EXPECT_EQ(r.watchdog_compute, WatchdogAction::kKill);
  EXPECT_EQ(r.watchdog_compute_window_ms, 2000);
  EXPECT_EQ(r.foreign, ForeignAction::kProtect);
  // And how to relax them.
  ASSERT_TRUE(ParseConfigText("watchdog_allowance = 512MiB\n"
                              "watchdog_allowance_max = 8GiB\n"
                              "watchdog_compute = report\n"
                              "watchdog_compute_window = 10s\n"
                              "foreign = report\n",
                              "test.conf", &c)
                  .ok());
  EXPECT_EQ(c.rules.watchdog_allowance_bytes, 512 * core::kMiB);
  EXPECT_EQ(c.rules.watchdog_allowance_max_bytes, 8 * core::kGiB);
  EXPECT_EQ(c.rules.watchdog_compute, WatchdogAction::kReport);
  EXPECT_EQ(c.rules.watchdog_compute_window_ms, 10000);
  EXPECT_EQ(c.rules.foreign, ForeignAction::kReport);
  ASSERT_TRUE(
      ParseConfigText("watchdog_allowance = auto\nforeign = protect\n", "test.conf", &c).ok());
  EXPECT_FALSE(c.rules.watchdog_allowance_bytes.has_value());
  EXPECT_EQ(c.rules.foreign, ForeignAction::kProtect);
}

TEST(Config, PolicyErrorsNameTheSetting) {
  struct Case {
    const char* text;
    const char* needle;
  } cases[] = {
      {"pool.a b = 0\n", "pool name 'a b'"},
      {"pool.x = 0,,1\n", "pool.x: expected a list of GPU indices"},
      {"preemption = always\n", "test.conf:1: bad preemption policy 'always'"},
      {"watchdog = loud\n", "watchdog: expected off, report, stop or kill"},
      {"watchdog_compute = stop\n", "watchdog_compute: expected off, report or kill"},
      {"foreign = ignore\n", "foreign: expected report, protect or kill"},
      {"watchdog_allowance = lots\n", "watchdog_allowance: expected auto or a size"},
      {"watchdog_allowance_max = lots\n", "watchdog_allowance_max"},
      {"idle_action = sleep\n", "idle_action: expected warn, pause, end or suspend"},
      {"idle_suspend_fallback = suspend\n", "idle_suspend_fallback: expected warn, pause or end"},
      {"suspended_counts_in_quota = maybe\n", "suspended_counts_in_quota: expected true or false"},
      {"preempt_by_suspend = 2\n", "preempt_by_suspend: expected true or false"},
      {"resume_on_demand = later\n", "resume_on_demand: expected true or false"},
      {"idle_threshold = 120%\n", "idle_threshold"},
      {"elastic_signal = KILL\n", "elastic_signal: expected USR1"},
  };
  for (const Case& c : cases) {
    DaemonConfig config;
    auto s = ParseConfigText(c.text, "test.conf", &config);
    ASSERT_FALSE(s.ok()) << c.text;
    EXPECT_NE(s.message().find(c.needle), std::string::npos) << s.message();
  }
}

}  // namespace
TEST(Config, LimitsAndTimeoutsHaveDefaultsAndTakeUnits) {
  DaemonConfig c;
  EXPECT_EQ(c.max_request_bytes, 1u << 20);
  EXPECT_EQ(c.max_queued_jobs_per_user, 500u);
  ASSERT_TRUE(ParseConfigText("max_request_bytes = 2MiB\nmax_env_bytes = 64KiB\n"
                              "max_argv_bytes = 8KiB\nmax_queued_jobs_per_user = 20\n"
                              "header_timeout = 2s\nbody_timeout = 5s\nidle_timeout = 1m\n"
                              "max_connections = 100\nmax_connections_per_peer = 10\n"
                              "ledger_retry = 500ms\nsample_interval = 100ms\n",
                              "f", &c)
                  .ok());
  EXPECT_EQ(c.max_request_bytes, 2u << 20);
  EXPECT_EQ(c.max_env_bytes, 64u << 10);
  EXPECT_EQ(c.max_argv_bytes, 8u << 10);
  EXPECT_EQ(c.max_queued_jobs_per_user, 20u);
  EXPECT_EQ(c.header_timeout_ms, 2000);
  EXPECT_EQ(c.idle_timeout_ms, 60000);
  EXPECT_EQ(c.max_connections, 100u);
  EXPECT_EQ(c.max_connections_per_peer, 10u);
  EXPECT_EQ(c.ledger_retry_ms, 500);
  EXPECT_EQ(c.sample_interval_ms, 100);
  EXPECT_EQ(DaemonConfig().sample_interval_ms, 1000);
  for (const char* bad : {"max_request_bytes = 1", "max_queued_jobs_per_user = 0",
                          "header_timeout = 0s", "max_connections = lots"}) {
    core::Status s = ParseConfigText(bad, "f", &c);
    EXPECT_FALSE(s.ok()) << bad;
  }
}

}  // namespace gpuslice::daemon

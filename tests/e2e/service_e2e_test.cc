// End-to-end: an autoscaled service on the real gpusliced, gpuslice, shim and
// simulated GPU. A busy replica (a simulated kernel loop at 95% duty) makes
// the service grow from 1 to 2 replicas with short windows set by flags;
// `service rm` cancels both. Every wait polls with a generous timeout.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "harness.h"

namespace gpuslice::e2e {
namespace {

using nlohmann::json;

json Services(Daemon& d) {
  CliResult r = d.Cli({"service", "ls", "--json"});
  json j = json::parse(r.out, nullptr, false);
  return j.is_object() ? j : json();
}

json Service(Daemon& d, const std::string& name) {
  json all = Services(d);
  if (all.is_null()) return json();
  for (const json& s : all["services"]) {
    if (s["name"] == name) return s;
  }
  return json();
}

std::vector<json> LiveJobs(Daemon& d) {
  CliResult r = d.Cli({"ps", "--json"});
  json list = json::parse(r.out, nullptr, false);
  std::vector<json> out;
  if (!list.is_object()) return out;
  for (const json& j : list["jobs"]) out.push_back(j);
  return out;
}

class ServiceE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(d.Start()) << ReadFile(d.dir() + "/daemon.log");
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << "daemon log:\n" << ReadFile(d.dir() + "/daemon.log");
  }
  Daemon d;
};

TEST_F(ServiceE2E, ABusyReplicaMakesTheServiceGrowAndRmCleansUp) {
  CliResult c = d.Cli({"service",    "create",
                       "web",        "--replicas",
                       "1-2",        "--target-util",
                       "50%",        "--scale-up-after",
                       "2s",         "--scale-down-after",
                       "1h",         "--cooldown",
                       "1s",         "--mem",
                       "4GiB",       "--",
                       WorkerPath(), "--name",
                       "web",        "--mem",
                       "1GiB",       "--duty",
                       "95%",        "--seconds",
                       "300"});
  ASSERT_EQ(c.exit_code, 0) << c.out << c.err;
  EXPECT_NE(c.out.find("service web: 1 replica(s) of 4 GiB"), std::string::npos) << c.out;

  json s = Service(d, "web");
  ASSERT_FALSE(s.is_null());
  EXPECT_EQ(s["replicas"]["desired"], 1);
  EXPECT_EQ(s["replicas"]["range"], "1-2");
  ASSERT_EQ(s["members"].size(), 1u);
  EXPECT_EQ(s["members"][0]["name"], "web-1");

  // The replica's kernel loop keeps its slice above 50%: a second replica
  // comes after the 2 s window.
  bool busy_seen = false;
  ASSERT_TRUE(Daemon::WaitFor(
      [&] {
        s = Service(d, "web");
        if (s.is_null()) return false;
        if (s["mean_util_pct"].is_number() && s["mean_util_pct"].get<double>() > 50) {
          busy_seen = true;
        }
        return s["replicas"]["desired"] == 2 && s["replicas"]["running"] == 2;
      },
      90))
      << s.dump(2);
  EXPECT_TRUE(busy_seen) << "the sampler saw the busy replica";
  ASSERT_TRUE(s["last_decision"].is_object()) << s.dump(2);
  EXPECT_NE(s["last_decision"]["message"].get<std::string>().find("1 -> 2"), std::string::npos)
      << s.dump(2);

  // Both replicas are ordinary jobs, named and tagged.
  std::vector<json> jobs = LiveJobs(d);
  ASSERT_EQ(jobs.size(), 2u);
  std::set<std::string> names;
  for (const json& j : jobs) names.insert(j.value("name", ""));
  EXPECT_EQ(names, (std::set<std::string>{"web-1", "web-2"}));

  // The human listing.
  CliResult ls = d.Cli({"service", "ls"});
  EXPECT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_NE(ls.out.find("2/0/2"), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("1 -> 2"), std::string::npos) << ls.out;

  // A count outside the range is refused, naming the range.
  CliResult bad = d.Cli({"service", "scale", "web", "3"});
  EXPECT_EQ(bad.exit_code, 125);
  EXPECT_NE(bad.err.find("1-2"), std::string::npos) << bad.err;

  CliResult rm = d.Cli({"service", "rm", "web"});
  ASSERT_EQ(rm.exit_code, 0) << rm.out << rm.err;
  EXPECT_NE(rm.out.find("removed"), std::string::npos) << rm.out;
  EXPECT_TRUE(Daemon::WaitFor([&] { return LiveJobs(d).empty(); }, 60))
      << "the replicas were cancelled";
  json after = Services(d);
  ASSERT_FALSE(after.is_null());
  EXPECT_TRUE(after["services"].empty()) << after.dump(2);
  // Every decision is an event.
  CliResult ev = d.Cli({"events", "--limit", "1000"});
  EXPECT_EQ(ev.exit_code, 0) << ev.err;
  for (const char* kind : {"service_created", "service_scale", "service_removed"}) {
    EXPECT_NE(ev.out.find(kind), std::string::npos) << kind << " in\n" << ev.out;
  }
  EXPECT_EQ(ev.out.find("service_replace"), std::string::npos) << "no replica ended on its own:\n"
                                                               << ev.out;
  // Nothing comes back: no replacement for replicas the service stopped.
  CliResult ps = d.Cli({"ps", "--json"});
  EXPECT_TRUE(LiveJobs(d).empty()) << ps.out;
}

TEST_F(ServiceE2E, BadRequestsAreRefusedWithTheField) {
  CliResult r =
      d.Cli({"service", "create", "web", "--replicas", "4-1", "--mem", "1GiB", "--", "true"});
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_NE(r.err.find("--replicas"), std::string::npos) << r.err;
  r = d.Cli({"service", "create", "web", "--replicas", "1-2", "--mem", "500GiB", "--", "true"});
  EXPECT_EQ(r.exit_code, 125) << "no GPU here could hold a replica";
  EXPECT_TRUE(Services(d)["services"].empty());
  r = d.Cli({"service", "rm", "nope"});
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_NE(r.err.find("no service 'nope'"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace gpuslice::e2e

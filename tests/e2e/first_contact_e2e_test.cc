// A machine set up as the README's quick start, used by more than one user:
// a second user's first `gpuslice run` works; a user the socket
// does not let in is told why and what to do; `cancel --state` means the
// caller's own jobs; events name users, not `$LOGNAME`. Built on the
// security suite's fixture: a root gpusliced and the test users gsattack_a,
// gsattack_b (members of the socket group) and gsattack_c (not one).

#include <grp.h>
#include <sys/stat.h>

#include <filesystem>

#include "../security/fixture.h"

namespace gpuslice::security {
namespace {

using nlohmann::json;

class FirstContactTest : public SecurityTest {
 protected:
  void SetUp() override {
    SecurityTest::SetUp();
    if (IsSkipped()) return;
    // The demo worker, where the users may run it.
    worker_ = Drop("gpuslice-demo-worker");
    std::filesystem::copy_file(GPUSLICE_SEC_WORKER, worker_,
                               std::filesystem::copy_options::overwrite_existing);
    chmod(worker_.c_str(), 0755);
  }
  std::string worker_;
};

TEST_F(FirstContactTest, ASecondUsersFirstRunWorksOnAMachineSetUpByTheQuickStart) {
  StartDaemon(DaemonOptions().QuickStart());
  // The first user's job, then the second's: both open the simulated GPU
  // the root daemon created.
  for (const User* u : {&a_, &b_}) {
    ProcResult r =
        Cli(u, {"run", "--mem", "4GiB", "--", worker_, "--mem", "1GiB", "--seconds", "1"});
    EXPECT_EQ(r.exit_code, 0) << u->name << ":\n" << r.out << r.err;
  }
  struct stat st;
  ASSERT_EQ(stat(sim_state().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u) << "for the socket group, not the world";
  EXPECT_EQ(st.st_gid, sock_gid_);
}

TEST_F(FirstContactTest, AUserOutsideTheSocketGroupIsToldTheGroupAndWhatToDo) {
  StartDaemon(DaemonOptions().QuickStart());
  ProcResult r = Cli(&c_, {"ps"});
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_NE(r.err.find("only members of group gsattack_sock may use gpusliced"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("usermod -aG gsattack_sock gsattack_c"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("srw-rw---- root:gsattack_sock"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("is it running"), std::string::npos) << r.err;
}

// `cancel --state queued` run by a user means the caller's own jobs, not
// every user's queue (refused job after job).
TEST_F(FirstContactTest, CancelByStateTouchesOnlyTheCallersOwnJobs) {
  StartDaemon();
  const std::string holder = Submit(nullptr, {"--gpus", "1", "--", "sleep", "600"});
  ASSERT_TRUE(WaitFor([&] { return State(holder) == "running"; }, 30));
  const std::string a1 = Submit(&a_, {"--mem", "1GiB", "--", "true"});
  const std::string a2 = Submit(&a_, {"--mem", "1GiB", "--", "true"});
  const std::string b1 = Submit(&b_, {"--mem", "1GiB", "--", "true"});
  ASSERT_EQ(State(a1), "queued");
  ProcResult r = Cli(&a_, {"cancel", "--state", "queued"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("belongs to"), std::string::npos) << r.err;
  EXPECT_EQ(State(a1), "cancelled");
  EXPECT_EQ(State(a2), "cancelled");
  EXPECT_EQ(State(b1), "queued");
  EXPECT_EQ(State(holder), "running");
  // An admin may name every user's.
  ProcResult all = Cli(nullptr, {"cancel", "--state", "queued", "--all-users"});
  EXPECT_EQ(all.exit_code, 0) << all.err;
  EXPECT_EQ(State(b1), "cancelled");
  Cli(nullptr, {"cancel", holder});
}

// The environment redaction leaves the user's own name (LOGNAME, USER):
// events and reasons must not say `$LOGNAME`.
TEST_F(FirstContactTest, EventsAndReasonsNameTheUserNotLogname) {
  StartDaemon();
  const std::string holder = Submit(nullptr, {"--gpus", "1", "--", "sleep", "600"});
  ASSERT_TRUE(WaitFor([&] { return State(holder) == "running"; }, 30));
  const std::string id = Submit(&a_, {"--mem", "1GiB", "--", "true"});
  ASSERT_EQ(Cli(&a_, {"cancel", id}).exit_code, 0);
  const json job = Job(id);
  EXPECT_EQ(job.value("reason", ""), "cancelled by gsattack_a") << job.dump();
  ProcResult events = Cli(&b_, {"events", "--job", id});
  EXPECT_EQ(events.out.find("$LOGNAME"), std::string::npos) << events.out;
  EXPECT_EQ(events.out.find("$USER"), std::string::npos) << events.out;
  EXPECT_NE(events.out.find("gsattack_a"), std::string::npos) << events.out;
  Cli(nullptr, {"cancel", holder});
}

}  // namespace
}  // namespace gpuslice::security

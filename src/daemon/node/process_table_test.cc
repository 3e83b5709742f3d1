#include "daemon/node/process_table.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace gpuslice::daemon {
namespace {

pid_t Sleeper() {
  pid_t pid = fork();
  if (pid == 0) {
    pause();
    _exit(0);
  }
  return pid;
}

// Checking a process's owner, then signalling its pid, would signal another
// user's process that reused the pid in between. The check and the signal
// go through one pidfd.
TEST(ProcProcessTable, SignalsAProcessOnlyWhileItIsTheGivenUsers) {
  ProcProcessTable procs;
  const pid_t child = Sleeper();
  ASSERT_GT(child, 0);
  const uint32_t me = getuid();
  core::Status wrong = procs.SignalIfOwnedBy(child, me + 1, SIGKILL);
  EXPECT_EQ(wrong.code(), core::StatusCode::kPermissionDenied) << wrong.ToString();
  EXPECT_EQ(kill(child, 0), 0) << "not signalled";
  EXPECT_TRUE(procs.SignalIfOwnedBy(child, me, SIGKILL).ok());
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_EQ(procs.SignalIfOwnedBy(child, me, SIGKILL).code(), core::StatusCode::kNotFound);
  EXPECT_EQ(procs.SignalIfOwnedBy(0, me, SIGKILL).code(), core::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpuslice::daemon

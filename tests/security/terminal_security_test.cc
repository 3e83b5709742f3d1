// A job's text against an admin's terminal. A user chooses
// their job's command line, and so what the daemon later quotes of it (a
// failure's reason, an event): terminal escape sequences in those (OSC 52
// writes the clipboard, OSC 0 the window title, CSI clears the screen or
// moves the cursor to forge lines, C1 controls do the same in one byte) must
// reach no terminal of root's. Every human view shows them visibly
// ("\x1b"); --json keeps them exact (JSON escapes control characters
// itself). Names and labels never hold them (refused at submission, and the
// refusal, which quotes them, is shown cleaned).

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fixture.h"

namespace gpuslice::security {
namespace {

using nlohmann::json;

using Terminal = SecurityTest;

// OSC 52 (clipboard: "rm -rf ~"), then clear screen and home.
const std::string kName = "train\x1b]52;c;cm0gLXJmIH4K\x07\x1b[2J\x1b[H";
// Window title, a forged line, and a one-byte CSI (U+009B) set red.
const std::string kArg =
    "\x1b]0;root@node\x07\nstate: cancelled\r\xc2\x9b"
    "31m";
const std::string kBadCommand = "/nonexistent\x1b[2J\x1b]0;t\x07";

// What a terminal would act on: ESC, BEL, C1 CSI in UTF-8, any C0 control
// but the newlines a view prints itself.
std::string Controls(const std::string& text) {
  std::string found;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\n') || c == 0x7f ||
        (c == 0xc2 && i + 1 < text.size() &&
         (static_cast<unsigned char>(text[i + 1]) & 0xe0) == 0x80)) {
      found += "byte " + std::to_string(c) + " at " + std::to_string(i) + "; ";
    }
  }
  return found;
}

TEST_F(Terminal, AJobsEscapeSequencesReachNoHumanViewAndJsonKeepsThemExact) {
  StartDaemon();
  const std::string running =
      Submit(&a_, {"--mem", "1GiB", "--name", "train", "--", "/bin/sh", "-c", "sleep 60", kArg});
  ASSERT_FALSE(running.empty());
  const std::string failed = Submit(&a_, {"--mem", "1GiB", "--name", "bad", "--", kBadCommand});
  ASSERT_FALSE(failed.empty());
  ASSERT_TRUE(WaitFor([&] { return State(failed) == "failed" && State(running) == "running"; }, 20))
      << State(failed) << " " << State(running);

  struct View {
    std::vector<std::string> args;
    std::vector<std::string> visible;  // Each must be in the output.
  };
  const View views[] = {
      {{"ps", "-a"}, {"/nonexistent\\x1b[2J\\x1b]0;t\\x07"}},
      {{"show", running}, {"\\x1b]0;root@node\\x07\\nstate: cancelled\\r\\u009b31m"}},
      {{"show", failed}, {"/nonexistent\\x1b[2J\\x1b]0;t\\x07"}},
      {{"events"}, {"/nonexistent\\x1b[2J\\x1b]0;t\\x07"}},
      {{"events", "--job", failed}, {"/nonexistent\\x1b[2J"}},
      {{"gpus"}, {}},
      {{"top", "-n", "1"}, {"/nonexistent\\x1b"}},  // In its events; the width may cut the rest.
      {{"usage", "--by", "job"}, {}},
  };
  for (const View& v : views) {
    const std::string what = "gpuslice " + v.args[0];
    ProcResult r = Cli(nullptr, v.args);
    ASSERT_EQ(r.exit_code, 0) << what << ": " << r.err;
    EXPECT_EQ(Controls(r.out + r.err), "") << what << " emitted control bytes:\n" << r.out;
    for (const std::string& want : v.visible) {
      EXPECT_NE(r.out.find(want), std::string::npos) << what << " does not show " << want << "\n"
                                                     << r.out;
    }
  }
  // The owner's view of their own job is the same.
  ProcResult own = Cli(&a_, {"ps", "-a"});
  EXPECT_EQ(Controls(own.out), "") << own.out;

  // JSON: the exact bytes.
  json jobs = json::parse(Cli(nullptr, {"ps", "-a", "--json"}).out, nullptr, false);
  ASSERT_TRUE(jobs.is_object());
  bool reason_exact = false;
  for (const json& j : jobs["jobs"]) {
    reason_exact = reason_exact || j.value("reason", "").find(kBadCommand) != std::string::npos;
  }
  EXPECT_TRUE(reason_exact) << jobs.dump();
  json shown = json::parse(Cli(nullptr, {"show", running, "--json"}).out, nullptr, false);
  ASSERT_TRUE(shown.is_object());
  EXPECT_EQ(shown["argv"], json({"/bin/sh", "-c", "sleep 60", kArg}));
  json events =
      json::parse(Cli(nullptr, {"events", "--job", failed, "--json"}).out, nullptr, false);
  ASSERT_TRUE(events.is_object());
  bool exact = false;
  for (const json& e : events["events"]) {
    exact = exact || e.value("message", "").find(kBadCommand) != std::string::npos;
  }
  EXPECT_TRUE(exact) << events.dump();

  // Names and labels never hold a control character: refused at
  // submission, and the refusal, which quotes the name, is shown cleaned.
  ProcResult named = Cli(&a_, {"submit", "--mem", "1GiB", "--name", kName, "--", "true"});
  EXPECT_NE(named.exit_code, 0);
  EXPECT_EQ(Controls(named.out + named.err), "") << named.err;
  EXPECT_NE(named.err.find("train\\x1b]52;c;cm0gLXJmIH4K\\x07\\x1b[2J\\x1b[H"), std::string::npos)
      << named.err;
  json body = {
      {"mem", "1GiB"}, {"argv", {"true"}}, {"cwd", "/tmp"}, {"labels", {{"pod", "x\x1b]0;t\x07"}}}};
  ProcResult label = Attack(&a_, {"http", "--to", unix_ep(), "--method", "POST", "--path",
                                  "/v1/jobs", "--body", body.dump()});
  EXPECT_EQ(label.out.rfind("status 400", 0), 0u) << label.out;
  EXPECT_NE(label.out.find("printable ASCII"), std::string::npos) << label.out;
  Cli(nullptr, {"cancel", running});
}

}  // namespace
}  // namespace gpuslice::security

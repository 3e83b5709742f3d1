#pragma once

// gpuslice-attacker: the hostile programs of the security suite
// (tests/security), one subcommand each. The suite runs them as unprivileged
// users (a job's user, another user of the socket group, a user outside it)
// against a root daemon; each plays one known escape and writes what it
// did to an output file the test reads. They know nothing of the product's
// current layouts beyond the version-1 formats they recognise by magic; any
// other file they can open is attacked generically (value substitution,
// random bytes), so the suite stays valid whatever layout the product moves
// to.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gpuslice::security {

// `--key value` and `--flag` arguments; repeated keys keep every value.
class Flags {
 public:
  // Parses argv[first..argc); `booleans` are the keys that take no value.
  // Exits with status 2 and a message on a malformed command line.
  Flags(int argc, char** argv, int first, const std::vector<std::string>& booleans);

  bool Has(const std::string& key) const { return values_.count(key) != 0; }
  std::string Get(const std::string& key, const std::string& fallback = "") const;
  std::vector<std::string> GetAll(const std::string& key) const;
  double GetDouble(const std::string& key, double fallback) const;
  // A size ("20GiB", "4294967296", "unlimited" = all ones).
  uint64_t GetBytes(const std::string& key, uint64_t fallback) const;

 private:
  std::multimap<std::string, std::string> values_;
};

// Wall-clock milliseconds (CLOCK_REALTIME): the test compares them with its own.
int64_t NowMs();
// Appends one line to `path` (created 0666) with a single write(2), so lines
// of concurrent writers never interleave.
void AppendLine(const std::string& path, const std::string& line);
[[noreturn]] void Die(const std::string& what);
// Waits until `path` exists (a test's "go" signal); false after `timeout_s`.
bool WaitForFile(const std::string& path, double timeout_s);

// Subcommands (attacker_files.cc).
int Scribble(const Flags& f);  // Writes into every file it can open.
int Grep(const Flags& f);      // Reads every file it can, looking for a secret.
int TruncateLoop(const Flags& f);  // Shrinks and regrows a file (its region) in a loop.

// Subcommands (attacker_gpu.cc).
int Alloc(const Flags& f);       // Allocates device memory and holds it.
int SetsidHold(const Flags& f);  // A child leaves the job (setsid) and holds memory.
int Unsuspend(const Flags& f);   // Restores + unlocks a suspended process itself.
int Work(const Flags& f);        // Launches kernels and reports its progress.
int Swarm(const Flags& f);       // N processes, each with a context and memory.

// Subcommands (attacker_resume.cc).
int AskResume(const Flags& f);  // Asks for resumes: its own, others', a flood of them.

// Subcommands (attacker_net.cc).
int Http(const Flags& f);     // One request; prints the status and the body.
int Submit(const Flags& f);   // Submits N jobs over the API; counts refusals.
int Flood(const Flags& f);    // Holds N idle (or half-sent) connections.
int Latency(const Flags& f);  // N sequential requests; prints p50/p99.
int HandOver(const Flags& f);  // A connection used after its process ended.

}  // namespace gpuslice::security

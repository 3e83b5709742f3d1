#pragma once

// Running a program with a chosen environment and capturing what it says;
// for the shim's end-to-end tests.

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace gpuslice::testing {

using Env = std::map<std::string, std::string>;

struct Output {
  int exit_code = -1;  // -signal when killed.
  std::string out;
  std::string err;
  // "key=value" lines of `out`.
  std::map<std::string, std::string> values;
  long long Int(const std::string& key) const;  // -1 if absent.
};

// Runs `argv` with exactly `env` and waits for it (at most `timeout_s`).
Output Run(const std::vector<std::string>& argv, const Env& env, int timeout_s = 60);

// A child we talk to line by line over its stdin/stdout.
class Session {
 public:
  Session(const std::vector<std::string>& argv, const Env& env);
  ~Session();
  // Sends one line and returns the next "key=value" line's value for `key`
  // (skipping others); "" on EOF.
  std::string Ask(const std::string& line, const std::string& key);
  // Sends one line without waiting for an answer; false if it could not.
  bool Send(const std::string& line);
  std::string WaitFor(const std::string& key);
  pid_t pid() const { return pid_; }
  void Kill(int signal);

 private:
  pid_t pid_ = -1;
  int to_ = -1;
  int from_ = -1;
  std::string buffer_;
};

}  // namespace gpuslice::testing

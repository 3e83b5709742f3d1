#pragma once

// The CLI's subcommands as a table: each has a name, a one-line help, a
// function that declares its options on a CLI11 subcommand, and a function
// that runs it and returns the process exit code.

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "client/client.h"
#include "core/status.h"

namespace gpuslice::cli {

// The commands speak to the daemon through the client library (src/client).
using client::Client;
using client::DefaultSocketPath;
using client::ErrorFromResponse;
using client::HttpResult;

// Options shared by the subcommands that ask for resources.
struct RequestOptions {
  std::optional<std::string> gpus, mem, compute, compute_mode, mig, priority, name, max_runtime,
      pool, cpus, host_mem;
  // GPU models (`--gpu-model a100,h100`), or Slurm's `--gres gpu:a100:2`
  // (a count of whole GPUs and a model).
  std::optional<std::string> gpu_model, gres;
  // Idle reclaim leaves the job alone.
  bool no_idle_reclaim = false;
  // A container job: its image and engine (podman when unset).
  std::optional<std::string> image, engine;
  bool restartable = false;
  // With --gpus MIN-MAX: the job may grow onto idle GPUs while it runs.
  bool grow = false;
  // run -i: the command runs here, attached to this terminal (a "shell" job
  // with a command: the daemon grants the slice, the CLI starts it).
  bool interactive = false;
  std::vector<std::string> command;
};

struct Context {
  std::string socket_flag;
  bool json = false;
  // Per-command state filled by CLI11.
  RequestOptions request;
  uint64_t job_id = 0;
  bool all = false;
  bool follow = false;
  std::unique_ptr<Client> client;
};

struct Command {
  const char* name;
  const char* help;
  void (*setup)(CLI::App* sub, Context* ctx);
  int (*run)(Context& ctx);
};

// Every subcommand: the basic ones (commands.cc) and those of the tables
// below, each defined in its own file.
const std::vector<Command>& Commands();
std::vector<Command> JobCommands();      // job_commands.cc: cancel, show
std::vector<Command> EventCommands();    // events_command.cc: events
std::vector<Command> PolicyCommands();   // policy_commands.cc: quota, resize, ...
std::vector<Command> MonitorCommands();  // monitor_commands.cc: top, usage
std::vector<Command> ServiceCommands();  // service_commands.cc: service ...
std::vector<Command> ContainerCommands();  // container_commands.cc: container-args

// Milliseconds since the Unix epoch, now.
int64_t NowMs();
// The name of the user running the CLI.
std::string CurrentUser();

// Exit codes of the CLI itself (a job's own exit code passes through `run`).
inline constexpr int kExitUsage = 2;
inline constexpr int kExitDaemonError = 125;  // Like docker: the request failed.

// Prints `status` (as JSON with --json) to stderr; returns kExitDaemonError.
int ReportError(const Context& ctx, const core::Status& status);
// The same for what the CLI finds wrong in its own arguments before asking
// the daemon (a bad option value); returns kExitUsage.
int UsageError(const Context& ctx, const core::Status& status);

// The request options checked as the daemon checks them (core::BuildRequest),
// so that a bad value is a usage error, told before anything is sent.
core::Status CheckRequest(const RequestOptions& r);

// The JSON body of a submission from the request options, with the caller's
// directory and environment.
nlohmann::json SubmitBody(const RequestOptions& r, const std::string& mode);

// Declared in run_command.cc.
int RunJob(Context& ctx, const std::string& mode);
int ShellJob(Context& ctx);
// A "shell" job: the daemon grants the slice, this process starts `command`
// (empty: the user's $SHELL) in it, attached to the terminal, and reports
// its pid and exit status (run -i, shell).
int AttachedJob(Context& ctx, const std::vector<std::string>& command);
int FollowLogs(Context& ctx, uint64_t id, bool follow, bool for_run, int* exit_code);

}  // namespace gpuslice::cli

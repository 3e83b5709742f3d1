#pragma once

// The monitor commands' entry points (listed by MonitorCommands() in
// monitor_commands.cc). Each keeps its option state in its own file.

#include <CLI/CLI.hpp>

#include "cli/commands/commands.h"

namespace gpuslice::cli {

// top.cc: `gpuslice top`, a live view of the node (docs/USER_VIEWS.md).
void SetupTop(CLI::App* sub, Context* ctx);
int RunTop(Context& ctx);

// usage_command.cc: `gpuslice usage`, accounting (docs/ACCOUNTING.md).
void SetupUsage(CLI::App* sub, Context* ctx);
int RunUsage(Context& ctx);

}  // namespace gpuslice::cli

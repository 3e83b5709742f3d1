// The CLI's monitor commands (see commands.h): `top` and `usage`, each in its
// own file (top.cc, usage_command.cc) with its own option state.

#include "cli/commands/commands.h"
#include "cli/commands/monitor.h"

namespace gpuslice::cli {

std::vector<Command> MonitorCommands() {
  return {
      {"top",
       "A live view of the GPUs, their slices and processes, the queue and recent events; on a "
       "terminal, select a job (up/down) and cancel, suspend or resume it (c, s, r)",
       SetupTop, RunTop},
      {"usage", "GPU-hours and more per user, group or job over a time window", SetupUsage,
       RunUsage},
  };
}

}  // namespace gpuslice::cli

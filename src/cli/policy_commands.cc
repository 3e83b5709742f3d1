// The CLI's policy commands (see commands.h). The table grows with issue 6/7
// work; each command keeps its option state in this file.

#include "cli/commands.h"

namespace gpuslice::cli {

std::vector<Command> PolicyCommands() { return {}; }

}  // namespace gpuslice::cli

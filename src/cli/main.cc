// gpuslice: the command-line client of gpusliced. See docs/DAEMON.md.

#include <CLI/CLI.hpp>
#include <iostream>

#include "cli/commands.h"

int main(int argc, char** argv) {
  namespace gc = gpuslice::cli;
  CLI::App app{"gpuslice: GPU compute on demand on this machine"};
  app.require_subcommand(1);
  gc::Context ctx;
  app.add_option("--socket", ctx.socket_flag,
                 "The daemon's socket (default $GPUSLICE_SOCKET or /run/gpuslice/gpuslice.sock)");
  app.add_flag("--json", ctx.json, "Machine-readable output");
  std::vector<std::pair<CLI::App*, const gc::Command*>> subs;
  for (const gc::Command& c : gc::Commands()) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    // --json is accepted after the subcommand too ("gpuslice ps --json").
    sub->add_flag("--json", ctx.json, "Machine-readable output");
    c.setup(sub, &ctx);
    subs.emplace_back(sub, &c);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : gc::kExitUsage;
  }
  ctx.client = std::make_unique<gc::Client>(gc::DefaultSocketPath(ctx.socket_flag));
  for (auto& [sub, cmd] : subs) {
    if (sub->parsed()) return cmd->run(ctx);
  }
  return gc::kExitUsage;
}

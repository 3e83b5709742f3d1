// gpuslice: the command-line client of gpusliced. See docs/DAEMON.md.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>

#include "cli/commands/commands.h"
#include "cli/parse/suggest.h"
#include "core/version.h"

namespace {

// The first word that is not an option of the top-level command (where the
// subcommand should be), or nullptr.
const char* CommandWord(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--") return nullptr;
    if (a == "--socket") {
      ++i;
      continue;
    }
    if (!a.empty() && a[0] == '-') continue;
    return argv[i];
  }
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  namespace gc = gpuslice::cli;
  CLI::App app{"gpuslice: GPU compute on demand on this machine"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "gpuslice " + std::string(gpuslice::core::Version()));
  gc::Context ctx;
  app.add_option("--socket", ctx.socket_flag,
                 "The daemon's socket (default $GPUSLICE_SOCKET or /run/gpuslice/gpuslice.sock)");
  app.add_flag("--json", ctx.json, "Machine-readable output");
  std::vector<std::pair<CLI::App*, const gc::Command*>> subs;
  std::vector<std::string> names;
  for (const gc::Command& c : gc::Commands()) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    // --json is accepted after the subcommand too ("gpuslice ps --json").
    sub->add_flag("--json", ctx.json, "Machine-readable output");
    c.setup(sub, &ctx);
    subs.emplace_back(sub, &c);
    names.emplace_back(c.name);
  }
  if (const char* word = CommandWord(argc, argv);
      word != nullptr && std::find(names.begin(), names.end(), word) == names.end()) {
    std::cerr << "gpuslice: unknown command '" << word << "'";
    if (auto near = gc::NearestName(word, names)) std::cerr << "; did you mean '" << *near << "'?";
    std::cerr << "\nRun 'gpuslice --help' for the commands.\n";
    return gc::kExitUsage;
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

// The CLI's container commands (see commands.h): `container-args`, the
// flags that put a container of any engine into a running job's slice
// (docs/CONTAINERS.md). Engines with CDI need only `--device
// gpuslice.dev/slice=ID`; Docker 20.10 (Debian 12) has no CDI and gets the
// same slice as plain --device / -v / -e flags; docker-compose gets it as an
// override file (--compose SERVICE, compose_fragment.h).

#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands/commands.h"
#include "core/container_flags.h"
#include "cli/parse/compose_fragment.h"

namespace gpuslice::cli {
namespace {

using nlohmann::json;

struct ContainerArgsOptions {
  bool cdi = false;
  bool in_job = false;                 // --in-job: the container under the job's cgroup.
  std::optional<std::string> compose;  // The service of --compose SERVICE.
} g_args;

void SetupContainerArgs(CLI::App* sub, Context* ctx) {
  sub->add_option("id", ctx->job_id, "A running job of yours")->required();
  sub->add_flag("--cdi", g_args.cdi,
                "Print the CDI device (--device gpuslice.dev/slice=ID: podman, containerd, "
                "Docker >= 25) instead of the plain flags");
  sub->add_flag("--in-job", g_args.in_job,
                "Also put the container under the job's cgroup (--cgroup-parent): its processes "
                "are then the job's, ended with it and accounted to it. Needs an engine using "
                "the cgroupfs cgroup manager/driver (podman --cgroup-manager cgroupfs, dockerd "
                "--exec-opt native.cgroupdriver=cgroupfs): with systemd's, a parent must be a "
                "slice and the engine refuses a path");
  sub->add_option("--compose", g_args.compose,
                  "Print a docker-compose override file that puts service SERVICE into the "
                  "slice instead of the flags")
      ->option_text("SERVICE");
  sub->footer(
      "The plain flags work with docker and podman alike:\n"
      "  docker run $(gpuslice container-args 12) IMAGE CMD...\n"
      "  podman run $(gpuslice container-args --cdi 12) IMAGE CMD...\n"
      "One flag per word and no quoting, so that $(...) splits them right; a value with "
      "white space is refused.\n"
      "For docker-compose, an override file for one service:\n"
      "  gpuslice container-args --compose trainer 12 > slice.yml\n"
      "  docker compose -f docker-compose.yml -f slice.yml up -d");
}

// A word of $(...) cannot carry white space.
core::Status CheckWord(const std::string& what, const std::string& value) {
  for (char c : value) {
    if (c == ' ' || c == '\t' || c == '\n') {
      return core::FailedPreconditionError(what + " '" + value +
                                           "' cannot be passed as a plain flag; use --cdi");
    }
  }
  return core::Status::Ok();
}

int ContainerArgs(Context& ctx) {
  if (g_args.compose) {
    if (g_args.cdi) {
      return UsageError(ctx, core::InvalidArgumentError(
                                 "--compose and --cdi cannot be used together: --compose writes "
                                 "the slice as compose keys (devices, volumes, environment), "
                                 "--cdi prints one flag for `run`"));
    }
    // Told before anything is asked of the daemon.
    if (core::Status s = CheckComposeServiceName(*g_args.compose); !s.ok()) {
      return UsageError(ctx, s);
    }
  }
  auto r = ctx.client->Call("GET", "/v1/jobs/" + std::to_string(ctx.job_id) + "/container");
  if (!r.ok()) return ReportError(ctx, r.status());
  if (ctx.json) {
    std::cout << r->dump(2) << "\n";
    return 0;
  }
  // Without --in-job the job's cgroup is not handed on: engines with
  // systemd's cgroup manager (the default on most hosts) refuse a path.
  if (!g_args.in_job) r->erase("cgroup_parent");
  if (g_args.compose) {
    auto fragment = ComposeFragment(*g_args.compose, *r);
    if (!fragment.ok()) return ReportError(ctx, fragment.status());
    std::cout << *fragment;
    return 0;
  }
  // Inside the job's cgroup the container's processes are the job's: ended
  // with it, its GPU use accounted to it (not to "foreign" processes).
  std::vector<std::string> words;
  const std::string parent = r->value("cgroup_parent", std::string());
  if (!parent.empty()) {
    if (auto s = CheckWord("cgroup", parent); !s.ok()) return ReportError(ctx, s);
    words.push_back("--cgroup-parent");
    words.push_back(parent);
  }
  if (g_args.cdi) {
    words.push_back("--device");
    words.push_back((*r)["cdi_device"].get<std::string>());
  } else {
    std::vector<core::ContainerMount> mounts;
    for (const json& m : (*r)["mounts"]) {
      mounts.push_back({m["host_path"].get<std::string>(), m["container_path"].get<std::string>(),
                        m.value("read_only", true)});
    }
    auto flags = core::PlainContainerFlags((*r)["device_nodes"].get<std::vector<std::string>>(),
                                           mounts, (*r)["env"].get<std::vector<std::string>>());
    if (!flags.ok()) {
      return ReportError(ctx, core::FailedPreconditionError(flags.status().message() +
                                                            " (container-args --cdi)"));
    }
    for (const std::string& w : *flags) {
      if (auto s = CheckWord("flag", w); !s.ok()) return ReportError(ctx, s);
    }
    words.insert(words.end(), flags->begin(), flags->end());
    // An external job's slice group (CDI gives it as additionalGids).
    for (const json& gid : r->value("additional_gids", json::array())) {
      words.push_back("--group-add");
      words.push_back(std::to_string(gid.get<uint32_t>()));
    }
  }
  std::string line;
  for (const std::string& w : words) line += (line.empty() ? "" : " ") + w;
  std::cout << line << "\n";
  return 0;
}

}  // namespace

std::vector<Command> ContainerCommands() {
  return {
      {"container-args", "Flags that put a container into a running job's slice",
       SetupContainerArgs, ContainerArgs},
  };
}

}  // namespace gpuslice::cli

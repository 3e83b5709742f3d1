// `gpuslice events`: the daemon's decisions and happenings, from the ledger
// (GET /v1/events). With -f it keeps polling and prints new ones.

#include <unistd.h>

#include <ctime>
#include <iostream>

#include "cli/commands/commands.h"
#include "cli/view/table.h"
#include "core/units.h"

namespace gpuslice::cli {
namespace {

using nlohmann::json;

struct EventsOptions {
  uint64_t job = 0;
  std::string since;
  uint64_t limit = 50;
  bool follow = false;
} g_events;

void SetupEvents(CLI::App* sub, Context*) {
  sub->add_option("--job", g_events.job, "Only this job's events");
  sub->add_option("--since", g_events.since,
                  "Only events of the last DURATION (e.g. 30m, 2h, 7d)");
  sub->add_option("--limit", g_events.limit, "At most this many (the newest; default 50)")
      ->check(CLI::Range(1, 10000));
  sub->add_flag("-f,--follow", g_events.follow, "Keep printing new events");
}

std::string LocalTime(int64_t ms) {
  time_t t = static_cast<time_t>(ms / 1000);
  struct tm tm;
  localtime_r(&t, &tm);
  char buf[32];
  strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string Line(const json& e) {
  uint64_t job = e.value("job", uint64_t{0});
  return LocalTime(e.value("at_ms", int64_t{0})) + "  " + Shown(e.value("kind", "")) + "  " +
         (job ? "job " + std::to_string(job) + "  " : "") + Shown(e.value("user", "")) + "  " +
         Shown(e.value("message", ""));
}

int Events(Context& ctx) {
  int64_t since_ms = 0;
  if (!g_events.since.empty()) {
    auto d = core::ParseDuration(g_events.since);
    if (!d.ok()) return ReportError(ctx, d.status().WithContext("--since"));
    since_ms = NowMs() - d->count();
  }
  auto target = [&](int64_t since) {
    std::string t = "/v1/events?limit=" + std::to_string(g_events.limit) +
                    "&since_ms=" + std::to_string(std::max<int64_t>(0, since));
    if (g_events.job) t += "&job=" + std::to_string(g_events.job);
    return t;
  };
  auto r = ctx.client->Call("GET", target(since_ms));
  if (!r.ok()) return ReportError(ctx, r.status());
  const json& events = (*r)["events"];
  if (ctx.json && !g_events.follow) {
    std::cout << r->dump(2) << "\n";
    return 0;
  }
  uint64_t last_id = 0;
  if (ctx.json) {
    for (const json& e : events) std::cout << e.dump() << "\n";
  } else if (g_events.follow) {
    for (const json& e : events) std::cout << Line(e) << "\n";
  } else {
    Table t({"TIME", "KIND", "JOB", "USER", "MESSAGE"});
    for (const json& e : events) {
      uint64_t job = e.value("job", uint64_t{0});
      t.Add({LocalTime(e.value("at_ms", int64_t{0})), e.value("kind", ""),
             job ? std::to_string(job) : "-", e.value("user", ""), e.value("message", "")});
    }
    std::cout << t.Render();
  }
  for (const json& e : events) last_id = std::max(last_id, e.value("id", uint64_t{0}));
  if (!g_events.follow) return 0;
  // Follow: poll from the newest time seen; ids tell repeats apart.
  int64_t from = events.empty() ? NowMs() : events.back().value("at_ms", NowMs());
  std::cout.flush();
  for (;;) {
    sleep(1);
    auto more = ctx.client->Call("GET", target(from));
    if (!more.ok()) return ReportError(ctx, more.status());
    for (const json& e : (*more)["events"]) {
      uint64_t id = e.value("id", uint64_t{0});
      if (id <= last_id) continue;
      last_id = id;
      from = e.value("at_ms", from);
      std::cout << (ctx.json ? e.dump() : Line(e)) << "\n";
    }
    std::cout.flush();
  }
}

}  // namespace

std::vector<Command> EventCommands() {
  return {{"events", "What the daemon decided and when (submissions, starts, ends, policies)",
           SetupEvents, Events}};
}

}  // namespace gpuslice::cli

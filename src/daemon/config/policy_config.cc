#include "daemon/config/policy_config.h"

#include <charconv>

#include "core/units.h"

namespace gpuslice::daemon {
namespace {

core::Status Bad(std::string_view key, std::string_view value, const std::string& expected) {
  return core::InvalidArgumentError(std::string(key) + ": expected " + expected + ", got '" +
                                    std::string(value) + "'");
}

bool ValidPoolName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

std::string_view WatchdogActionName(WatchdogAction a) {
  switch (a) {
    case WatchdogAction::kOff:
      return "off";
    case WatchdogAction::kReport:
      return "report";
    case WatchdogAction::kStop:
      return "stop";
    case WatchdogAction::kKill:
      return "kill";
  }
  return "report";
}

std::string_view DefragModeName(DefragMode m) {
  switch (m) {
    case DefragMode::kOff:
      return "off";
    case DefragMode::kSuggest:
      return "suggest";
    case DefragMode::kAuto:
      return "auto";
  }
  return "auto";
}

std::string_view ForeignActionName(ForeignAction a) {
  switch (a) {
    case ForeignAction::kReport:
      return "report";
    case ForeignAction::kProtect:
      return "protect";
    case ForeignAction::kKill:
      return "kill";
  }
  return "report";
}

std::string_view IdleActionName(IdleAction a) {
  switch (a) {
    case IdleAction::kWarn:
      return "warn";
    case IdleAction::kPause:
      return "pause";
    case IdleAction::kSuspend:
      return "suspend";
    case IdleAction::kEnd:
      return "end";
  }
  return "warn";
}

core::Status ApplyPolicyValue(PolicyConfig* c, std::string_view key, std::string_view value,
                              bool* known) {
  *known = true;
  std::string v(value);
  if (key.substr(0, 5) == "pool.") {
    std::string name(key.substr(5));
    if (!ValidPoolName(name)) {
      return core::InvalidArgumentError("pool name '" + name +
                                        "': use letters, digits, '-', '_' or '.'");
    }
    PoolSpec spec{name, {}};
    std::string_view rest = value;
    while (!rest.empty()) {
      size_t comma = rest.find(',');
      std::string_view item = rest.substr(0, comma);
      while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
      while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
      if (item.empty()) return Bad(key, value, "a list of GPU indices or UUIDs such as '0,1'");
      spec.gpus.emplace_back(item);
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
    if (spec.gpus.empty()) return Bad(key, value, "a list of GPU indices or UUIDs such as '0,1'");
    std::erase_if(c->pools, [&](const PoolSpec& p) { return p.name == name; });
    c->pools.push_back(std::move(spec));
    return core::Status::Ok();
  }
  if (key == "default_pool") {
    if (!ValidPoolName(v)) return Bad(key, value, "a pool name");
    c->default_pool = v;
    return core::Status::Ok();
  }
  if (key == "preemption") {
    auto p = core::ParsePreemptionPolicy(v);
    if (!p.ok()) return p.status();
    c->preemption = *p;
    return core::Status::Ok();
  }
  auto duration = [&](int64_t* out) -> core::Status {
    auto d = core::ParseDuration(v);
    if (!d.ok()) return d.status().WithContext(key);
    *out = d->count();
    return core::Status::Ok();
  };
  if (key == "preemption_grace") return duration(&c->preemption_grace_ms);
  if (key == "idle_after") return duration(&c->idle_after_ms);
  if (key == "elastic_cooldown") return duration(&c->elastic_cooldown_ms);
  if (key == "watchdog") {
    for (WatchdogAction a : {WatchdogAction::kOff, WatchdogAction::kReport, WatchdogAction::kStop,
                             WatchdogAction::kKill}) {
      if (v == WatchdogActionName(a)) {
        c->watchdog = a;
        return core::Status::Ok();
      }
    }
    return Bad(key, value, "off, report, stop or kill");
  }
  if (key == "watchdog_compute") {
    // No `stop`: a stopped job's use falls to nothing, so it would flap
    // between stopped and running with each window.
    for (WatchdogAction a :
         {WatchdogAction::kOff, WatchdogAction::kReport, WatchdogAction::kKill}) {
      if (v == WatchdogActionName(a)) {
        c->watchdog_compute = a;
        return core::Status::Ok();
      }
    }
    return Bad(key, value, "off, report or kill");
  }
  if (key == "watchdog_compute_window") {
    GPUSLICE_RETURN_IF_ERROR(duration(&c->watchdog_compute_window_ms));
    if (c->watchdog_compute_window_ms < 1000) return Bad(key, value, "at least 1s");
    return core::Status::Ok();
  }
  if (key == "watchdog_compute_margin") {
    auto m = core::ParseShareMilli(v);
    if (!m.ok()) return m.status().WithContext(key);
    c->watchdog_compute_margin_pct = *m / 10.0;
    return core::Status::Ok();
  }
  if (key == "foreign") {
    for (ForeignAction a :
         {ForeignAction::kReport, ForeignAction::kProtect, ForeignAction::kKill}) {
      if (v == ForeignActionName(a)) {
        c->foreign = a;
        return core::Status::Ok();
      }
    }
    return Bad(key, value, "report, protect or kill");
  }
  if (key == "foreign_allowed_groups") {
    c->foreign_allowed_groups.clear();
    std::string_view rest = value;
    while (!rest.empty()) {
      size_t comma = rest.find(',');
      std::string_view item = rest.substr(0, comma);
      while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
      while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
      if (!item.empty()) c->foreign_allowed_groups.emplace_back(item);
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
    return core::Status::Ok();
  }
  if (key == "watchdog_allowance") {
    if (v == "auto") {
      c->watchdog_allowance_bytes.reset();
      return core::Status::Ok();
    }
    auto b = core::ParseBytes(v);
    if (!b.ok()) return Bad(key, value, "auto or a size such as 512MiB");
    c->watchdog_allowance_bytes = *b;
    return core::Status::Ok();
  }
  if (key == "watchdog_allowance_max") {
    auto b = core::ParseBytes(v);
    if (!b.ok()) return b.status().WithContext(key);
    c->watchdog_allowance_max_bytes = *b;
    return core::Status::Ok();
  }
  if (key == "idle_threshold") {
    auto m = core::ParseShareMilli(v);
    if (!m.ok()) return m.status().WithContext(key);
    c->idle_threshold_pct = *m / 10.0;
    return core::Status::Ok();
  }
  if (key == "idle_action") {
    for (IdleAction a :
         {IdleAction::kWarn, IdleAction::kPause, IdleAction::kEnd, IdleAction::kSuspend}) {
      if (v == IdleActionName(a)) {
        c->idle_action = a;
        return core::Status::Ok();
      }
    }
    return Bad(key, value, "warn, pause, end or suspend");
  }
  if (key == "idle_suspend_fallback") {
    for (IdleAction a : {IdleAction::kWarn, IdleAction::kPause, IdleAction::kEnd}) {
      if (v == IdleActionName(a)) {
        c->idle_suspend_fallback = a;
        return core::Status::Ok();
      }
    }
    return Bad(key, value, "warn, pause or end");
  }
  if (key == "defragment") {
    for (DefragMode m : {DefragMode::kOff, DefragMode::kSuggest, DefragMode::kAuto}) {
      if (v == DefragModeName(m)) {
        c->defragment = m;
        return core::Status::Ok();
      }
    }
    return Bad(key, value, "auto, suggest or off");
  }
  if (key == "defragment_max_moves" || key == "defragment_moves_per_hour") {
    uint32_t n = 0;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (v.empty() || ec != std::errc() || end != v.data() + v.size() || n < 1 || n > 64) {
      return Bad(key, value, "a number from 1 to 64");
    }
    (key == "defragment_max_moves" ? c->defragment_max_moves : c->defragment_moves_per_hour) = n;
    return core::Status::Ok();
  }
  if (key == "idle_exempt_priority") {
    if (v == "none") {
      c->idle_exempt_priority.reset();
      return core::Status::Ok();
    }
    auto p = core::ParsePriority(v);
    if (!p.ok()) return Bad(key, value, "low, normal, high or none");
    c->idle_exempt_priority = *p;
    return core::Status::Ok();
  }
  {
    bool mine = false;
    GPUSLICE_RETURN_IF_ERROR(c->runtime_estimates.Apply(key, value, &mine));
    if (!mine) GPUSLICE_RETURN_IF_ERROR(c->fair_share.Apply(key, value, &mine));
    if (mine) return core::Status::Ok();
  }
  if (key == "idle_action_always" || key == "suspended_counts_in_quota" ||
      key == "preempt_by_suspend" || key == "quota_borrowing" || key == "resume_on_demand") {
    bool* flag = key == "idle_action_always"          ? &c->idle_action_always
                 : key == "suspended_counts_in_quota" ? &c->suspended_counts_in_quota
                 : key == "quota_borrowing"           ? &c->quota_borrowing
                 : key == "resume_on_demand"          ? &c->resume_on_demand
                                                      : &c->preempt_by_suspend;
    if (v == "true" || v == "yes" || v == "on" || v == "1") {
      *flag = true;
    } else if (v == "false" || v == "no" || v == "off" || v == "0") {
      *flag = false;
    } else {
      return Bad(key, value, "true or false");
    }
    return core::Status::Ok();
  }
  if (key == "elastic_signal") {
    static const std::pair<const char*, int> kSignals[] = {
        {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"HUP", SIGHUP}, {"CONT", SIGCONT}};
    std::string name = v.rfind("SIG", 0) == 0 ? v.substr(3) : v;
    for (const auto& [n, sig] : kSignals) {
      if (name == n) {
        c->elastic_signal = sig;
        return core::Status::Ok();
      }
    }
    return Bad(key, value, "USR1, USR2, HUP or CONT");
  }
  *known = false;
  return core::Status::Ok();
}

}  // namespace gpuslice::daemon

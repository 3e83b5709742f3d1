// EventLog: the ledger's events and their counts (event_log.h).

#include "daemon/store/event_log.h"

#include <utility>

namespace gpuslice::daemon {

void EventLog::Record(Event e) {
  ++counts_[e.kind];
  if (ledger_) {
    auto id = ledger_->AddEvent(e);
    if (id.ok()) return;
    write_failed_(id.status());
  }
  // Without a ledger the newest events still show, from memory.
  e.id = unsaved_.empty() ? 1 : unsaved_.back().id + 1;
  unsaved_.push_back(std::move(e));
  if (unsaved_.size() > kMaxUnsaved) unsaved_.erase(unsaved_.begin());
}

core::Result<std::vector<Event>> EventLog::Query(const EventQuery& query) const {
  if (ledger_) return ledger_->Events(query);
  std::vector<Event> out;
  for (const Event& e : unsaved_) {
    if (e.at_ms >= query.since_ms && (query.job_id == 0 || e.job_id == query.job_id)) {
      out.push_back(e);
    }
  }
  if (out.size() > query.limit) out.erase(out.begin(), out.end() - query.limit);
  return out;
}

void EventLog::LoadCounts() {
  if (!ledger_) return;
  // Unreadable counts are not fatal: the metrics count from zero.
  if (auto counts = ledger_->EventCountsByKind(); counts.ok()) {
    for (auto& [kind, n] : *counts) counts_[kind] = n;
  }
}

bool EventLog::WriteUnsaved() {
  if (!ledger_) return false;
  while (!unsaved_.empty()) {
    if (!ledger_->AddEvent(unsaved_.front()).ok()) return false;
    unsaved_.erase(unsaved_.begin());
  }
  return true;
}

}  // namespace gpuslice::daemon

#pragma once

// The daemon's event log: every decision worth telling a user (docs/DAEMON.md,
// "Events"), kept in the ledger's `events` table and counted per kind for the
// metrics. While the ledger is unavailable (never opened), the newest events
// are kept in memory and read from there; while its writes fail, they wait in
// memory until WriteUnsaved succeeds. One thread, as Service.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "daemon/store/ledger.h"

namespace gpuslice::daemon {

class EventLog {
 public:
  // At most this many events wait in memory; older ones are dropped.
  static constexpr size_t kMaxUnsaved = 1000;

  // `ledger`: the daemon's, null while it is unavailable (read on each call,
  // so the log follows its opening and closing). `write_failed`: told the
  // error of each failed write (the daemon degrades); it may record an event
  // itself.
  EventLog(const std::unique_ptr<Ledger>& ledger,
           std::function<void(const core::Status&)> write_failed)
      : ledger_(ledger), write_failed_(std::move(write_failed)) {}

  // Counts it, and writes it to the ledger, or keeps it in memory when that
  // fails or there is no ledger.
  void Record(Event event);
  // The ledger's events (those in memory while there is no ledger).
  core::Result<std::vector<Event>> Query(const EventQuery& query) const;
  // Events per kind since the ledger began (LoadCounts) plus those recorded.
  const std::map<std::string, uint64_t>& Counts() const { return counts_; }
  // At start, once the ledger is open: its counts per kind.
  void LoadCounts();
  // Writes the events a failed write left in memory, oldest first; false at
  // the first that fails again (the rest wait for the next call).
  bool WriteUnsaved();

 private:
  const std::unique_ptr<Ledger>& ledger_;
  std::function<void(const core::Status&)> write_failed_;
  std::map<std::string, uint64_t> counts_;
  std::vector<Event> unsaved_;
};

}  // namespace gpuslice::daemon

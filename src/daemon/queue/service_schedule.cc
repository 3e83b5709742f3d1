// Service: fair share at start (docs/DAEMON.md, "Placement and the queue").
// The queue's order, run-time estimates and packing are the ranker's
// (ranking/queue_ranker.h); this reads it the ledger's history as
// `gpuslice usage` does (api/usage_api.h, a room the ranker's is below).
// Automatic moves and the reclaim of borrowed capacity for the head are
// makeroom/'s (defragmenter.h, preemptions.h).

#include "daemon/api/usage_api.h"
#include "daemon/jobs/service.h"

namespace gpuslice::daemon {

void Service::SeedFairShare() {
  if (!ledger_) {
    ranker_.Seed(nullptr);
    return;
  }
  ranker_.Seed(
      [this](int64_t since_ms, int64_t now_ms) -> core::Result<std::vector<core::UsageRecord>> {
        auto rows = ledger_->UsageRows(since_ms, now_ms);
        if (!rows.ok()) return rows.status();
        auto mig = MigSlices(*ledger_, *rows);
        if (!mig.ok()) return mig.status();
        // The same rows and weights as `gpuslice usage` (docs/ACCOUNTING.md).
        return UsageRecords(*rows, inventory_, *mig);
      });
}

}  // namespace gpuslice::daemon

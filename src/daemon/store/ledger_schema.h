#pragma once

// The ledger's numbered schema migrations. Migration N (1-based) takes the
// schema from version N-1 to N; they are applied in order, each in its own
// transaction, and never edited once released: a change is a new entry.

#include <span>

namespace gpuslice::daemon {

std::span<const char* const> LedgerMigrations();

}  // namespace gpuslice::daemon

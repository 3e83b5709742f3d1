// JobHolds: the queued jobs held by `gpuslice hold` (holds.h).

#include "daemon/waits/holds.h"

namespace gpuslice::daemon {

std::string JobHolds::WaitingText(const core::Job& job) {
  switch (job.hold) {
    case core::HoldKind::kNone:
      return "";
    case core::HoldKind::kAdmin:
      return "held by an admin (an admin releases it: gpuslice release " + std::to_string(job.id) +
             ")";
    case core::HoldKind::kUser:
      break;
  }
  return "held (gpuslice release " + std::to_string(job.id) + ")";
}

}  // namespace gpuslice::daemon

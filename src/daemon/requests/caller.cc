#include "daemon/requests/caller.h"

namespace gpuslice::daemon {

std::string CallerName(const Caller& caller) {
  return caller.user.empty() ? std::to_string(caller.uid) : caller.user;
}

core::Status CheckOwner(const Caller& caller, const core::Job& job) {
  if (caller.admin || (caller.local && caller.uid == job.uid)) return core::Status::Ok();
  return core::PermissionDeniedError("job " + std::to_string(job.id) + " belongs to " + job.user +
                                     "; only its owner, root or the admin group may "
                                     "do this");
}

}  // namespace gpuslice::daemon

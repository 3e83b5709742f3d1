#pragma once

// Who calls the daemon, and the one rule of ownership every verb applies.

#include <cstdint>
#include <memory>
#include <string>

#include "core/jobs/job.h"
#include "core/status.h"

namespace gpuslice::daemon {

class PeerProcess;  // launch/peer_process.h

// Who is calling, from SO_PEERCRED (unix socket) or a bearer token (TCP).
struct Caller {
  uint32_t uid = 0;
  uint32_t gid = 0;
  // The process that opened the connection, pinned at accept (unix socket
  // only; null over TCP, for the daemon's own submissions, and when the
  // peer's pid is not visible here). Whatever is decided from the caller's
  // pid uses it, never a pid looked up later (launch/peer_process.h).
  std::shared_ptr<const PeerProcess> process;
  std::string user;
  bool admin = false;  // root, the admin group, or the TCP token holder.
  bool local = true;   // Came over the unix socket (can own jobs).
  // The TCP bearer token holder: reads and cancels only (Api::Handle checks
  // each route's scope), never anyone's environment.
  bool token = false;
};

// How events and reasons name who did something: the caller's user name,
// or its uid when the name is unknown.
std::string CallerName(const Caller& caller);

// Ok when `caller` may act on `job`: its owner calling locally, or an
// admin; kPermissionDenied naming the owner otherwise.
core::Status CheckOwner(const Caller& caller, const core::Job& job);

}  // namespace gpuslice::daemon

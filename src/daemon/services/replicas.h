#pragma once

// Autoscaled services (`gpuslice service ...`, docs/SERVICES.md): each keeps
// between a minimum and a maximum of replicas, every replica an ordinary job
// submitted through the Service as the service's owner, named NAME-k and
// tagged GPUSLICE_SERVICE=NAME in its environment. The ReplicaManager
// watches them once a second (Tick): replaces replicas that ended (with a
// backoff after quick failures), asks core/autoscale whether to scale on the
// mean use of the running replicas' slices, and stops or submits replicas to
// match. Every decision is an event (service_scale, service_replace, ...).
//
// Services live in the ledger's tables `services` and `service_replicas`
// (replica_table.h). After a daemon restart Start() reloads them and
// re-associates their replica jobs (also a job submitted just before a crash,
// by its GPUSLICE_SERVICE_ID tag), so nothing is submitted twice.
//
// One thread: the daemon's event loop calls every method, like Service.

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/jobs/autoscale.h"
#include "core/status.h"
#include "daemon/base/clock.h"
#include "daemon/jobs/service.h"
#include "daemon/services/service_body.h"
#include "daemon/store/replica_table.h"

namespace gpuslice::daemon {

// What `service create` asks for.
struct ReplicaView {
  uint64_t job_id = 0;
  std::string name;  // NAME-k
  core::JobState state = core::JobState::kQueued;
  bool stopping = false;
  std::optional<double> use_pct;  // Use of its slice (0-100), once sampled.
};

struct ServiceView {
  uint64_t id = 0;
  std::string name;
  std::string user;
  uint32_t uid = 0;
  core::AutoscalePolicy policy;
  std::string request_describe;  // "8 GiB + 30%"
  nlohmann::json request;
  std::vector<std::string> argv;
  int64_t created_ms = 0;
  uint32_t desired = 0;
  uint32_t running = 0;
  uint32_t pending = 0;
  uint32_t stopping = 0;
  std::optional<double> mean_use_pct;
  int64_t last_decision_ms = 0;  // 0: none yet.
  std::string last_decision;
  bool crash_loop = false;
  uint32_t consecutive_failures = 0;
  int64_t restart_not_before_ms = 0;
  std::vector<ReplicaView> replicas;
};

class ReplicaManager {
 public:
  ReplicaManager(Service& service, Clock& clock);

  // Opens the services tables in the ledger the Service uses
  // (<state_dir>/ledger.db), reloads the services and re-associates their
  // replicas. Call after Service::Start(). On error (the ledger unusable)
  // services cannot be created; the daemon runs on without them.
  core::Status Start();

  // Replaces, scales and reconciles every service. The event loop calls it
  // about once a second; calling it more often only re-checks.
  void Tick();

  core::Result<ServiceView> Create(const Caller& caller, ServiceCreateSpec spec);
  // `desired` and/or `range` (owner or admin).
  core::Result<ServiceView> Scale(const Caller& caller, const std::string& name,
                                  std::optional<uint32_t> desired,
                                  std::optional<core::ReplicaRange> range);
  // Cancels its replicas and forgets it (owner or admin). Returns the
  // cancelled job ids.
  core::Result<std::vector<uint64_t>> Remove(const Caller& caller, const std::string& name);
  core::Result<ServiceView> Get(const std::string& name);
  std::vector<ServiceView> List();

 private:
  struct Replica {
    uint32_t index = 0;
    bool stopping = false;
  };
  struct Managed {
    StoredService stored;
    core::AutoscalePolicy policy;
    core::AutoscaleState state;
    SubmitSpec templ;  // A replica's submission, less its name and tags.
    std::string describe;
    std::map<uint64_t, Replica> replicas;  // By job id.
    std::optional<double> mean_use_pct;
    int64_t last_decision_ms = 0;
    std::string last_decision;
  };

  core::Result<Managed> Build(StoredService stored) const;
  core::Status CheckOwner(const Caller& caller, const Managed& m) const;
  Managed* Find(const std::string& name);
  Caller OwnerOf(const Managed& m) const;
  void TickOne(Managed& m, int64_t now);
  // Submits one replica; records its row. Errors are the Service's.
  core::Result<uint64_t> SubmitReplica(Managed& m);
  void StopReplica(Managed& m, uint64_t job_id, const std::string& why);
  void Persist(Managed& m, int64_t now);
  void Decided(Managed& m, int64_t now, const std::string& kind, uint64_t job_id,
               const std::string& message);
  ServiceView View(const Managed& m);

  Service& service_;
  Clock& clock_;
  std::unique_ptr<ServiceTable> table_;
  std::map<std::string, Managed> services_;  // By name.
};

// The service a job belongs to, from its environment tag; "" when none.
std::string ServiceOfJob(const core::Job& job);

// Service names: 1-48 characters of [A-Za-z0-9._-], starting with a letter or
// digit, so NAME-k is a valid job name and NAME a URL path segment.
core::Status ValidateServiceName(const std::string& name);

}  // namespace gpuslice::daemon

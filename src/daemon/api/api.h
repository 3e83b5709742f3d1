#pragma once

// The HTTP API's routes, as a table (docs/API.md). Transport-free: the
// server (http_server.h) turns a Beast request into an ApiRequest, with the
// caller from SO_PEERCRED or the bearer token, and writes back the
// ApiResponse. Errors are JSON {"error": {"code", "message"}} with the HTTP
// status of their StatusCode.

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "daemon/jobs/service.h"
#include "daemon/node/doctor.h"

namespace gpuslice::daemon {

struct ApiRequest {
  std::string method;  // "GET", "POST"
  std::string path;    // Without the query.
  std::map<std::string, std::string> query;
  std::string body;
  Caller caller;
  // Segments captured by an added route's "{name}" pattern parts.
  std::map<std::string, std::string> params;
};

struct ApiResponse {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
};

int HttpStatusOf(core::StatusCode code);

// Splits "/v1/jobs?all=1&x=%2F" into path and decoded query parameters.
core::Status ParseTarget(std::string_view target, std::string* path,
                         std::map<std::string, std::string>* query);

// What a route does, for the TCP token's scope (docs/API.md): the token may
// read and cancel, nothing else. One column of the route table, so a new
// route states its scope where it is added.
enum class RouteScope {
  kRead,    // GET: allowed to the token.
  kCancel,  // Ends a job: allowed to the token.
  kWrite,   // Anything else that changes state: unix-socket callers only.
};

class Api {
 public:
  using ExtraHandler = std::function<ApiResponse(const ApiRequest&)>;

  Api(Service& service, Doctor& doctor);
  ApiResponse Handle(const ApiRequest& request);

  // Routes of the daemon's other modules (metrics, services, usage...), so
  // they live beside their code. `pattern` segments "{x}" match one
  // non-empty segment, given to the handler as params["x"]. Checked after
  // the built-in table. The scope defaults to kRead for GET and kWrite for
  // any other method.
  void AddRoute(std::string method, std::string pattern, ExtraHandler handler);
  void AddRoute(std::string method, std::string pattern, RouteScope scope, ExtraHandler handler);

  struct RouteInfo {
    std::string method;
    std::string pattern;
    RouteScope scope;
  };
  // Every route, built-in and added, for tests that walk the whole table.
  std::vector<RouteInfo> Routes() const;

 private:
  using Handler = ApiResponse (Api::*)(const ApiRequest&, uint64_t id);
  struct Route {
    const char* method;
    const char* pattern;  // "{id}" matches a job id.
    RouteScope scope;
    Handler handler;
  };
  static const Route kRoutes[];

  ApiResponse Status(const ApiRequest&, uint64_t);
  ApiResponse Gpus(const ApiRequest&, uint64_t);
  ApiResponse ListJobs(const ApiRequest&, uint64_t);
  ApiResponse JobsSummary(const ApiRequest&, uint64_t);
  ApiResponse SubmitJob(const ApiRequest&, uint64_t);
  ApiResponse GetJob(const ApiRequest&, uint64_t id);
  ApiResponse CancelJob(const ApiRequest&, uint64_t id);
  ApiResponse JobLogs(const ApiRequest&, uint64_t id);
  ApiResponse AttachJob(const ApiRequest&, uint64_t id);
  ApiResponse JobExit(const ApiRequest&, uint64_t id);
  ApiResponse DoctorReport(const ApiRequest&, uint64_t);
  ApiResponse ListEvents(const ApiRequest&, uint64_t);
  // Policies.
  ApiResponse ResizeJob(const ApiRequest&, uint64_t id);
  ApiResponse ResumeJob(const ApiRequest&, uint64_t id);
  ApiResponse SuspendJob(const ApiRequest&, uint64_t id);
  ApiResponse MoveJob(const ApiRequest&, uint64_t id);
  ApiResponse LabelJob(const ApiRequest&, uint64_t id);
  ApiResponse HoldJob(const ApiRequest&, uint64_t id);
  ApiResponse ReleaseJob(const ApiRequest&, uint64_t id);
  ApiResponse UpdateJob(const ApiRequest&, uint64_t id);
  ApiResponse JobContainer(const ApiRequest&, uint64_t id);
  ApiResponse ListQuotas(const ApiRequest&, uint64_t);
  ApiResponse SetQuota(const ApiRequest&, uint64_t);
  ApiResponse RemoveQuota(const ApiRequest& request);  // DELETE /v1/quotas/{scope}/{name}

  struct ExtraRoute {
    std::string method;
    std::string pattern;
    RouteScope scope;
    ExtraHandler handler;
  };
  std::vector<ExtraRoute> extra_;

  Service& service_;
  Doctor& doctor_;
};

}  // namespace gpuslice::daemon

// Fuzzes the API's JSON bodies: POST /v1/jobs (ParseSubmitBody), the small
// integer bodies of /attach and /exit, POST /v1/quotas (ParseQuotaBody, then
// BuildQuota), POST /v1/jobs/{id}/resize (ParseResizeBody), and the services'
// POST /v1/services (ParseServiceBody) and /scale (ParseScaleBody). Arbitrary bytes must give a value or a
// clear error, never a crash, an exception or an unbounded allocation; an
// accepted submission's request fields then go through BuildRequest.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "daemon/api/api_json.h"
#include "daemon/services/service_body.h"

using namespace gpuslice;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view body(reinterpret_cast<const char*>(data), size);
  auto spec = daemon::ParseSubmitBody(body);
  if (spec.ok()) {
    if (spec->argv.size() > daemon::kMaxArgs || spec->env.size() > daemon::kMaxEnv) {
      __builtin_trap();
    }
    auto r = core::BuildRequest(spec->fields);
    if (r.ok() && !r->Validate().ok()) __builtin_trap();
  } else if (spec.status().message().empty()) {
    __builtin_trap();  // Every error says what is wrong.
  }
  auto pid = daemon::ParseIntField(body, "pid", 1 << 30);
  if (pid.ok() && (*pid < 0 || *pid > (1 << 30))) __builtin_trap();
  auto quota = daemon::ParseQuotaBody(body);
  if (quota.ok()) {
    if (!daemon::ValidatePrincipalName(quota->first.name).ok()) __builtin_trap();
    auto q = core::BuildQuota(quota->second);
    if (!q.ok() && q.status().message().empty()) __builtin_trap();
  } else if (quota.status().message().empty()) {
    __builtin_trap();
  }
  auto resize = daemon::ParseResizeBody(body);
  if (!resize.ok() && resize.status().message().empty()) __builtin_trap();
  auto service = daemon::ParseServiceBody(body);
  if (service.ok()) {
    // What the parser accepted is a service the manager can hold: a valid
    // policy, a command, and request fields that build a valid request.
    if (!service->policy.Validate().ok() || service->argv.empty() || service->name.empty()) {
      __builtin_trap();
    }
    if (service->argv.size() > daemon::kMaxArgs || service->env.size() > daemon::kMaxEnv) {
      __builtin_trap();
    }
  } else if (service.status().message().empty()) {
    __builtin_trap();
  }
  auto scale = daemon::ParseScaleBody(body);
  if (scale.ok()) {
    if (!scale->desired && !scale->range) __builtin_trap();
    if (scale->desired && *scale->desired > core::kMaxReplicas) __builtin_trap();
  } else if (scale.status().message().empty()) {
    __builtin_trap();
  }
  return 0;
}

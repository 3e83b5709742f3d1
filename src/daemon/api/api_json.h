#pragma once

// JSON bodies of the HTTP API (docs/API.md): parsing what clients send and
// rendering what the daemon answers. Parsing never throws and never trusts
// sizes: every field is type-checked and bounded, and errors name the field.
// A fuzz target (fuzz/api_json_fuzz.cc) feeds it arbitrary bytes.

#include <nlohmann/json.hpp>
#include <string_view>

#include "core/status.h"
#include "daemon/jobs/service.h"
#include "daemon/node/inventory.h"

namespace gpuslice::daemon {

// Limits on what a submission may carry.
inline constexpr size_t kMaxArgs = 4096;
inline constexpr size_t kMaxEnv = 4096;
inline constexpr size_t kMaxStringBytes = 128 * 1024;
inline constexpr size_t kMaxGpuUuids = 256;

// POST /v1/jobs body -> SubmitSpec. The resource fields are strings as a user
// types them ("8GiB", "30%"); byte counts may also be given as integers.
core::Result<SubmitSpec> ParseSubmitBody(std::string_view body);
// {"key": "value", ...} -> labels, validated (core::ValidateLabels).
core::Result<std::map<std::string, std::string>> ParseLabels(const nlohmann::json& v);
// A body that is a JSON object holding exactly `field` (e.g. {"gpu": ...}):
// its value. Errors name the problem; `shape` shows the expected body.
core::Result<nlohmann::json> ParseSingleFieldBody(std::string_view body, const std::string& field,
                                                  const std::string& shape);

// A small object body such as {"pid": 123}: the named non-negative integer.
core::Result<int64_t> ParseIntField(std::string_view body, const char* field, int64_t max);

// Policies. POST /v1/quotas: {"scope": "user"|"group", "name", "mem", "gpus",
// "compute", "jobs"} (limits as a user types them). POST /v1/jobs/{id}/resize:
// {"mem", "compute", "gpus", "priority", "force"}.
core::Result<std::pair<core::Principal, core::QuotaFields>> ParseQuotaBody(std::string_view body);
core::Result<ResizeSpec> ParseResizeBody(std::string_view body);
// POST /v1/jobs/{id}/update: {"mem", "compute", "priority", "after"} (at
// least one; "after" as at submission, "" drops the dependencies).
core::Result<UpdateSpec> ParseUpdateBody(std::string_view body);
// A user or group name as quotas take it: 1-64 printable characters, no
// spaces, quotes or slashes.
core::Status ValidatePrincipalName(std::string_view name);
nlohmann::json QuotaToJson(const QuotaView& quota);

nlohmann::json JobToJson(const JobView& view);
nlohmann::json TransitionToJson(const Transition& t);
nlohmann::json EventToJson(const Event& e);
nlohmann::json UsageToJson(const JobUsage& u);
nlohmann::json GpuToJson(const GpuInfo& gpu);
nlohmann::json ErrorJson(const core::Status& status);

}  // namespace gpuslice::daemon

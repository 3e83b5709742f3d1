#pragma once

// The daemon's read-only status page (docs/USER_VIEWS.md):
//   GET /status       one self-contained HTML page (inline CSS and JS, no
//                     external assets) showing the GPUs with bars, the slices
//                     on each, the queue and recent events; it re-reads
//                     /status.json every few seconds.
//   GET /status.json  the snapshot the page draws.
// Both are served on the unix socket and, through the metrics listener
// (--metrics-listen), on TCP without authentication, so the snapshot holds
// nothing a job's owner would not show on `gpuslice ps`: no environment, no
// working directory; commands are cut to kMaxCommandChars.
//
// Safety: the page draws every string from the daemon with textContent, never
// as markup, and the snapshot embedded in the page has '<', '>' and '&'
// escaped, so a job name or command such as "<script>" stays text. The
// responses also carry a Content-Security-Policy that allows only the page's
// own inline code and fetches to its own origin.

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "daemon/api/api.h"
#include "daemon/jobs/service.h"

namespace gpuslice::daemon {

inline constexpr size_t kMaxCommandChars = 200;
inline constexpr size_t kStatusEvents = 20;

// Registers GET /status and GET /status.json on `api`. `service` must outlive it.
void RegisterStatusPage(Api& api, Service& service);

// The snapshot as /status.json returns it.
nlohmann::json StatusSnapshot(Service& service);

// The page with `snapshot` embedded, so it is complete before the first refresh.
std::string StatusPageHtml(const nlohmann::json& snapshot);

// JSON text safe inside an HTML <script> element: '<', '>' and '&' as \u003c,
// \u003e, \u0026 (they occur only inside JSON strings, where these escapes mean
// the same characters).
std::string JsonForScript(const nlohmann::json& j);

}  // namespace gpuslice::daemon

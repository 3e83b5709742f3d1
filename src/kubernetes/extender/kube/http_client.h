#pragma once

// A small blocking HTTP/1.1 client (Boost.Beast): plain http:// and, with
// OpenSSL, https:// with the server's certificate checked against a CA file
// and its host name. One request per connection (Connection: close), every
// step bounded by one timeout, so a dead peer costs the caller at most that.
// Used by the extender to poll the nodes' daemons and to talk to the
// Kubernetes API server (kube_api.h). Thread-safe: no shared state.

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace gpuslice::kubernetes {

struct Url {
  bool https = false;
  std::string host;  // Without brackets for IPv6.
  std::string port;  // "80"/"443" when the URL names none.
  std::string path;  // Starts with '/'; "/" when the URL has none.
};

// "http://10.0.0.5:9400/v1/node", "https://[fd00::1]:6443". Errors on other
// schemes, a missing host, a bad port.
core::Result<Url> ParseUrl(std::string_view url);

struct HttpRequest {
  std::string method = "GET";
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;  // Sent with Content-Length when not empty.
  std::chrono::milliseconds timeout{2000};
  // https only: PEM file of the CAs to trust ("" = the system's defaults),
  // or no check at all (tests and emergencies; never the default).
  std::string ca_file;
  bool insecure_skip_verify = false;
};

struct HttpResponse {
  int status = 0;
  std::string body;
};

// Errors (kUnavailable) name the URL and what failed: resolve, connect,
// TLS handshake, write, read, timeout. Any HTTP status is a response.
core::Result<HttpResponse> Fetch(const HttpRequest& request);

}  // namespace gpuslice::kubernetes

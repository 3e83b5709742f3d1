#pragma once

// The daemon's HTTP/1.1 server (Boost.Beast over Asio): a unix socket whose
// callers are identified by SO_PEERCRED, an optional TCP listener whose
// callers must present the bearer token, and an optional metrics listener
// (plain HTTP, no credentials) that answers only GET on a fixed list of
// read-only paths (/metrics and the status page) and 404 to anything else.
// Runs on the daemon's one event thread; each request is handed to
// Api::Handle synchronously.
//
// Connections are bounded (1,019 idle connections would freeze an unbounded
// daemon): every connection must send its request headers within
// header_timeout (idle_timeout for the next request of a keep-alive
// connection) and its body within body_timeout, or it is closed; each peer
// (a uid on the unix socket, an IP address on TCP) may hold
// max_connections_per_peer and all together max_connections. A connection
// over a cap is accepted, answered 503 in one non-blocking write and closed,
// so refusing costs the daemon almost nothing. When the process runs out of
// descriptors (EMFILE), a reserve descriptor is freed to accept and close
// the pending connection, then the acceptor pauses briefly instead of
// spinning on an always-readable listening socket.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <boost/asio.hpp>
#include <string>

#include "core/status.h"
#include "daemon/api/api.h"

namespace gpuslice::daemon {

struct ServerOptions {
  std::optional<uint32_t> admin_gid;
  std::string tcp_token;  // Required for TCP callers.
  size_t body_limit = 1 << 20;  // max_request_bytes
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds body_timeout{30'000};   // Also bounds writing a response.
  std::chrono::milliseconds idle_timeout{60'000};   // Keep-alive, until the next headers.
  uint32_t max_connections = 4096;
  uint32_t max_connections_per_peer = 128;  // root (uid 0) is exempt.
};

// What the server holds now, for tests and metrics.
struct ServerCounters {
  uint64_t open = 0;       // Connections open now.
  uint64_t refused = 0;    // Refused over a cap or for lack of descriptors, ever.
  uint64_t timed_out = 0;  // Closed by a timeout, ever.
};

class HttpServer {
 public:
  HttpServer(boost::asio::io_context& io, Api& api, ServerOptions options);
  ~HttpServer();
  // Binds `path` (replacing a stale socket file), chmod `mode`, chgrp `gid`
  // when given. Errors when another daemon answers on it.
  core::Status ListenUnix(const std::string& path, uint32_t mode, std::optional<uint32_t> gid);
  // Returns the address bound, "HOST:PORT" (port 0 picks a free one).
  core::Result<std::string> ListenTcp(const std::string& host_port);
  // Plain HTTP on HOST:PORT ("[::1]:PORT" for IPv6) for Prometheus and the
  // status page: no authentication, so only GET of exactly `paths` is passed
  // to the Api (as an anonymous, non-admin, non-local caller); every other
  // request gets 404. Port 0 picks a free port. Returns the bound
  // "HOST:PORT".
  core::Result<std::string> ListenMetrics(const std::string& host_port,
                                          std::vector<std::string> paths);
  // Called after each handled request (the daemon runs housekeeping then).
  void set_after_request(std::function<void()> f) { after_request_ = std::move(f); }
  ServerCounters counters() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
  std::function<void()> after_request_;
};

}  // namespace gpuslice::daemon

#pragma once

// The CLI's connection to gpusliced: HTTP/1.1 over the daemon's unix socket
// (Boost.Beast, synchronous). One Client keeps one connection alive across
// requests. Errors: kUnavailable when the daemon cannot be reached (the
// message says which socket and how to start it); an HTTP error from the
// daemon becomes a Status carrying the daemon's JSON error message.

#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace gpuslice::client {

struct HttpResult {
  int status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // Lower-case names.
};

// --socket, else $GPUSLICE_SOCKET, else /run/gpuslice/gpuslice.sock.
std::string DefaultSocketPath(const std::string& flag);

class Client {
 public:
  explicit Client(std::string socket_path);
  ~Client();
  // Any HTTP answer is a HttpResult (even 4xx); transport failures are errors.
  core::Result<HttpResult> Raw(const std::string& method, const std::string& target,
                               const std::string& body = "");
  // JSON in and out; non-2xx answers become errors with the daemon's message.
  core::Result<nlohmann::json> Call(const std::string& method, const std::string& target,
                                    const nlohmann::json* body = nullptr);
  const std::string& socket_path() const { return socket_path_; }

 private:
  class Conn;
  std::string socket_path_;
  std::unique_ptr<Conn> conn_;
};

// The Status for a daemon error body {"error": {"code", "message"}}.
core::Status ErrorFromResponse(const HttpResult& r);

}  // namespace gpuslice::client

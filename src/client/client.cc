#include "client/client.h"

#include <utility>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "client/socket_help.h"

namespace gpuslice::client {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using local = asio::local::stream_protocol;

std::string DefaultSocketPath(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = getenv("GPUSLICE_SOCKET"); env && *env) return env;
  return "/run/gpuslice/gpuslice.sock";
}

class Client::Conn {
 public:
  asio::io_context io;
  local::socket socket{io};
  beast::flat_buffer buffer;
  bool connected = false;
};

Client::Client(std::string socket_path)
    : socket_path_(std::move(socket_path)), conn_(std::make_unique<Conn>()) {}
Client::~Client() = default;

core::Result<HttpResult> Client::Raw(const std::string& method, const std::string& target,
                                     const std::string& body) {
  // One retry on a fresh connection: the daemon may have closed an idle one.
  for (int attempt = 0; attempt < 2; ++attempt) {
    beast::error_code ec;
    if (!conn_->connected) {
      conn_->socket = local::socket(conn_->io);
      conn_->buffer.clear();
      conn_->socket.connect(local::endpoint(socket_path_), ec);
      if (ec) {
        // Why, in the words of the file system: not there, not listening,
        // or not for this user (whose group and what to do).
        return core::UnavailableError(SocketHelp(GatherSocketFacts(socket_path_, ec.value())));
      }
      conn_->connected = true;
    }
    http::request<http::string_body> req{http::string_to_verb(method), target, 11};
    req.set(http::field::host, "gpusliced");
    req.set(http::field::user_agent, "gpuslice");
    if (!body.empty()) req.set(http::field::content_type, "application/json");
    req.body() = body;
    req.keep_alive(true);
    req.prepare_payload();
    http::write(conn_->socket, req, ec);
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 << 20);
    if (!ec) http::read(conn_->socket, conn_->buffer, parser, ec);
    if (ec) {
      conn_->connected = false;
      beast::error_code ignored;
      conn_->socket.close(ignored);
      if (attempt == 0) continue;
      return core::UnavailableError("lost connection to gpusliced at " + socket_path_ + ": " +
                                    ec.message());
    }
    auto& res = parser.get();
    HttpResult out;
    out.status = static_cast<int>(res.result_int());
    out.body = std::move(res.body());
    for (const auto& f : res) {
      std::string name(f.name_string());
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      out.headers[name] = std::string(f.value());
    }
    if (!res.keep_alive()) {
      conn_->connected = false;
      beast::error_code ignored;
      conn_->socket.close(ignored);
    }
    return out;
  }
  return core::UnavailableError("cannot talk to gpusliced at " + socket_path_);
}

core::Status ErrorFromResponse(const HttpResult& r) {
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  std::string message = "HTTP " + std::to_string(r.status);
  std::string code;
  if (j.is_object() && j.contains("error") && j["error"].is_object()) {
    const auto& e = j["error"];
    if (e.contains("message") && e["message"].is_string()) message = e["message"];
    if (e.contains("code") && e["code"].is_string()) code = e["code"];
  }
  core::StatusCode sc = core::StatusCode::kInternal;
  static const std::pair<const char*, core::StatusCode> kCodes[] = {
      {"invalid_argument", core::StatusCode::kInvalidArgument},
      {"not_found", core::StatusCode::kNotFound},
      {"already_exists", core::StatusCode::kAlreadyExists},
      {"permission_denied", core::StatusCode::kPermissionDenied},
      {"resource_exhausted", core::StatusCode::kResourceExhausted},
      {"failed_precondition", core::StatusCode::kFailedPrecondition},
      {"out_of_range", core::StatusCode::kOutOfRange},
      {"unavailable", core::StatusCode::kUnavailable},
      {"unimplemented", core::StatusCode::kUnimplemented},
  };
  for (const auto& [name, c] : kCodes) {
    if (code == name) sc = c;
  }
  return core::Status(sc, message);
}

core::Result<nlohmann::json> Client::Call(const std::string& method, const std::string& target,
                                          const nlohmann::json* body) {
  GPUSLICE_ASSIGN_OR_RETURN(HttpResult r, Raw(method, target, body ? body->dump() : ""));
  if (r.status < 200 || r.status >= 300) return ErrorFromResponse(r);
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (j.is_discarded()) return core::InternalError("gpusliced sent a reply that is not JSON");
  return j;
}

}  // namespace gpuslice::client

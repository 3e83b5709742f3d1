#include "daemon/http_server.h"

#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <utility>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "daemon/api_json.h"
#include "daemon/log.h"

namespace gpuslice::daemon {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using local = asio::local::stream_protocol;
using tcp = asio::ip::tcp;

namespace {

std::string UserName(uint32_t uid) {
  struct passwd pw;
  struct passwd* found = nullptr;
  char buf[4096];
  if (getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found != nullptr) return pw.pw_name;
  return std::to_string(uid);
}

bool InGroup(uint32_t uid, uint32_t gid, uint32_t group) {
  if (gid == group) return true;
  struct passwd pw;
  struct passwd* found = nullptr;
  char buf[4096];
  if (getpwuid_r(uid, &pw, buf, sizeof buf, &found) != 0 || found == nullptr) return false;
  int n = 256;
  std::vector<gid_t> groups(n);
  if (getgrouplist(pw.pw_name, gid, groups.data(), &n) < 0) return false;
  for (int i = 0; i < n; ++i) {
    if (groups[i] == group) return true;
  }
  return false;
}

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

class HttpServer::Impl {
 public:
  Impl(asio::io_context& io, Api& api, ServerOptions options, HttpServer* owner)
      : io_(io), api_(api), options_(std::move(options)), owner_(owner) {}

  template <typename Socket>
  class Session : public std::enable_shared_from_this<Session<Socket>> {
   public:
    Session(Impl* impl, Socket socket, std::optional<Caller> caller, bool metrics_only = false)
        : impl_(impl),
          socket_(std::move(socket)),
          caller_(std::move(caller)),
          metrics_only_(metrics_only) {}
    void Start() { Read(); }

   private:
    void Read() {
      parser_.emplace();
      parser_->body_limit(impl_->options_.body_limit);
      http::async_read(socket_, buffer_, *parser_,
                       [self = this->shared_from_this()](beast::error_code ec, size_t) {
                         self->OnRead(ec);
                       });
    }
    void OnRead(beast::error_code ec) {
      if (ec == http::error::end_of_stream || ec == asio::error::eof ||
          ec == asio::error::connection_reset) {
        return Close();
      }
      if (ec) {
        // A malformed request or one over the body limit: answer and close.
        response_ = {};
        response_.result(ec == http::error::body_limit ? http::status::payload_too_large
                                                        : http::status::bad_request);
        response_.set(http::field::content_type, "application/json");
        response_.body() = ErrorJson(core::InvalidArgumentError("bad HTTP request: " +
                                                                ec.message()))
                               .dump();
        response_.keep_alive(false);
        response_.prepare_payload();
        return Write();
      }
      const auto& req = parser_->get();
      ApiRequest ar;
      ar.method = std::string(req.method_string());
      ar.body = req.body();
      core::Status target =
          ParseTarget(std::string_view(req.target().data(), req.target().size()), &ar.path,
                      &ar.query);
      ApiResponse resp;
      if (!target.ok()) {
        resp = {400, ErrorJson(target).dump(), "application/json", {}};
      } else if (metrics_only_) {
        resp = impl_->HandleMetricsOnly(ar);
      } else if (caller_) {
        ar.caller = *caller_;
        resp = impl_->api_.Handle(ar);
      } else {
        // TCP: the bearer token is the only credential.
        std::string auth(req[http::field::authorization]);
        const std::string prefix = "Bearer ";
        if (impl_->options_.tcp_token.empty() || auth.rfind(prefix, 0) != 0 ||
            !ConstantTimeEquals(auth.substr(prefix.size()), impl_->options_.tcp_token)) {
          resp = {401,
                  ErrorJson(core::PermissionDeniedError("missing or wrong bearer token")).dump(),
                  "application/json",
                  {{"WWW-Authenticate", "Bearer"}}};
        } else {
          ar.caller.admin = true;
          ar.caller.local = false;
          ar.caller.uid = UINT32_MAX;
          ar.caller.user = "api-token";
          resp = impl_->api_.Handle(ar);
        }
      }
      response_ = {};
      response_.version(req.version());
      response_.result(static_cast<http::status>(resp.status));
      response_.set(http::field::server, "gpusliced");
      response_.set(http::field::content_type, resp.content_type);
      for (const auto& [k, v] : resp.headers) response_.set(k, v);
      response_.body() = std::move(resp.body);
      response_.keep_alive(req.keep_alive());
      response_.prepare_payload();
      if (impl_->owner_->after_request_) impl_->owner_->after_request_();
      Write();
    }
    void Write() {
      http::async_write(socket_, response_,
                        [self = this->shared_from_this()](beast::error_code ec, size_t) {
                          if (ec || !self->response_.keep_alive()) return self->Close();
                          self->Read();
                        });
    }
    void Close() {
      beast::error_code ignored;
      socket_.shutdown(Socket::shutdown_send, ignored);
      socket_.close(ignored);
    }

    Impl* impl_;
    Socket socket_;
    std::optional<Caller> caller_;
    bool metrics_only_ = false;  // The metrics listener's rules apply.
    beast::flat_buffer buffer_;
    std::optional<http::request_parser<http::string_body>> parser_;
    http::response<http::string_body> response_;
  };

  void AcceptUnix() {
    unix_acceptor_->async_accept([this](beast::error_code ec, local::socket socket) {
      if (!ec) {
        ucred cred{};
        socklen_t len = sizeof cred;
        if (getsockopt(socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
          Caller c;
          c.uid = cred.uid;
          c.gid = cred.gid;
          c.pid = cred.pid;
          c.user = UserName(cred.uid);
          c.local = true;
          c.admin = cred.uid == 0 ||
                    (options_.admin_gid && InGroup(cred.uid, cred.gid, *options_.admin_gid));
          std::make_shared<Session<local::socket>>(this, std::move(socket), c)->Start();
        }
      }
      if (ec != asio::error::operation_aborted) AcceptUnix();
    });
  }

  // The metrics listener: anonymous reads of the allowed paths only.
  ApiResponse HandleMetricsOnly(ApiRequest& ar) {
    bool allowed = ar.method == "GET";
    if (allowed) {
      allowed = false;
      for (const std::string& p : metrics_paths_) allowed = allowed || ar.path == p;
    }
    if (!allowed) {
      return {404,
              ErrorJson(core::NotFoundError("the metrics listener serves only GET of " +
                                            metrics_paths_text_))
                  .dump(),
              "application/json",
              {}};
    }
    ar.caller = Caller{};
    ar.caller.uid = UINT32_MAX;
    ar.caller.gid = UINT32_MAX;
    ar.caller.user = "metrics-listener";
    ar.caller.admin = false;
    ar.caller.local = false;
    return api_.Handle(ar);
  }

  void AcceptMetrics() {
    metrics_acceptor_->async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (!ec) {
        socket.set_option(tcp::no_delay(true));
        std::make_shared<Session<tcp::socket>>(this, std::move(socket), std::nullopt, true)
            ->Start();
      }
      if (ec != asio::error::operation_aborted) AcceptMetrics();
    });
  }

  void AcceptTcp() {
    tcp_acceptor_->async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (!ec) {
        socket.set_option(tcp::no_delay(true));
        std::make_shared<Session<tcp::socket>>(this, std::move(socket), std::nullopt)->Start();
      }
      if (ec != asio::error::operation_aborted) AcceptTcp();
    });
  }

  asio::io_context& io_;
  Api& api_;
  ServerOptions options_;
  HttpServer* owner_;
  std::optional<local::acceptor> unix_acceptor_;
  std::optional<tcp::acceptor> tcp_acceptor_;
  std::optional<tcp::acceptor> metrics_acceptor_;
  std::vector<std::string> metrics_paths_;
  std::string metrics_paths_text_;
};

HttpServer::HttpServer(asio::io_context& io, Api& api, ServerOptions options)
    : impl_(std::make_unique<Impl>(io, api, std::move(options), this)) {}

HttpServer::~HttpServer() = default;

core::Status HttpServer::ListenUnix(const std::string& path, uint32_t mode,
                                    std::optional<uint32_t> gid) {
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    return core::InvalidArgumentError("socket path too long (max 107 bytes): " + path);
  }
  // A leftover socket file from a crashed daemon is replaced; a live daemon
  // answering on it is not.
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return core::AlreadyExistsError(path + " exists and is not a socket");
    }
    local::socket probe(impl_->io_);
    beast::error_code ec;
    probe.connect(local::endpoint(path), ec);
    if (!ec) return core::AlreadyExistsError("another daemon is listening on " + path);
    unlink(path.c_str());
  }
  beast::error_code ec;
  impl_->unix_acceptor_.emplace(impl_->io_);
  impl_->unix_acceptor_->open(local(), ec);
  if (!ec) impl_->unix_acceptor_->bind(local::endpoint(path), ec);
  if (!ec) impl_->unix_acceptor_->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return core::UnavailableError("listen on " + path + ": " + ec.message());
  if (chmod(path.c_str(), mode) != 0) return core::InternalError("chmod " + path + " failed");
  if (gid && chown(path.c_str(), static_cast<uid_t>(-1), *gid) != 0) {
    return core::PermissionDeniedError("chgrp " + path + " failed");
  }
  impl_->AcceptUnix();
  return core::Status::Ok();
}

core::Status HttpServer::ListenTcp(const std::string& host_port) {
  size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) return core::InvalidArgumentError("tcp: expected HOST:PORT");
  if (impl_->options_.tcp_token.empty()) {
    return core::InvalidArgumentError("tcp listener needs a bearer token (tcp_token_file)");
  }
  beast::error_code ec;
  auto addr = asio::ip::make_address(host_port.substr(0, colon), ec);
  if (ec) return core::InvalidArgumentError("tcp: bad address in '" + host_port + "'");
  int port = std::atoi(host_port.c_str() + colon + 1);
  if (port < 0 || port > 65535) return core::InvalidArgumentError("tcp: bad port");
  impl_->tcp_acceptor_.emplace(impl_->io_);
  tcp::endpoint ep(addr, static_cast<unsigned short>(port));
  impl_->tcp_acceptor_->open(ep.protocol(), ec);
  if (!ec) impl_->tcp_acceptor_->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl_->tcp_acceptor_->bind(ep, ec);
  if (!ec) impl_->tcp_acceptor_->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return core::UnavailableError("listen on " + host_port + ": " + ec.message());
  LogInfo("TCP API on " + host_port + " (bearer token required)");
  impl_->AcceptTcp();
  return core::Status::Ok();
}

}  // namespace gpuslice::daemon

namespace gpuslice::daemon {

core::Result<std::string> HttpServer::ListenMetrics(const std::string& host_port,
                                                    std::vector<std::string> paths) {
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == host_port.size()) {
    return core::InvalidArgumentError("metrics_listen: expected HOST:PORT, got '" + host_port +
                                      "'");
  }
  std::string host = host_port.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const std::string port_text = host_port.substr(colon + 1);
  char* end = nullptr;
  const long port = std::strtol(port_text.c_str(), &end, 10);
  if (*end != '\0' || port < 0 || port > 65535) {
    return core::InvalidArgumentError("metrics_listen: bad port '" + port_text + "' in '" +
                                      host_port + "'");
  }
  beast::error_code ec;
  auto addr = asio::ip::make_address(host, ec);
  if (ec) {
    return core::InvalidArgumentError("metrics_listen: bad address '" + host + "' in '" +
                                      host_port + "' (an IP address is needed)");
  }
  impl_->metrics_paths_ = std::move(paths);
  impl_->metrics_paths_text_.clear();
  for (const std::string& p : impl_->metrics_paths_) {
    impl_->metrics_paths_text_ += (impl_->metrics_paths_text_.empty() ? "" : ", ") + p;
  }
  auto& acceptor = impl_->metrics_acceptor_.emplace(impl_->io_);
  tcp::endpoint ep(addr, static_cast<unsigned short>(port));
  acceptor.open(ep.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(ep, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return core::UnavailableError("metrics listener on " + host_port + ": " + ec.message());
  const tcp::endpoint bound = acceptor.local_endpoint(ec);
  if (ec) return core::InternalError("metrics listener: local address: " + ec.message());
  const std::string address = bound.address().is_v6()
                                  ? "[" + bound.address().to_string() + "]"
                                  : bound.address().to_string();
  impl_->AcceptMetrics();
  return address + ":" + std::to_string(bound.port());
}

}  // namespace gpuslice::daemon

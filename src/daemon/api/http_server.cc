#include "daemon/api/http_server.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <chrono>
#include <map>
#include <utility>

#include "daemon/api/api_json.h"
#include "daemon/base/log.h"
#include "daemon/launch/peer_process.h"

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

// Open connections per peer and in all, shared by the sessions so that a
// session destroyed after the server (the io_context's destructor drops
// pending handlers) still finds it.
struct Census {
  std::map<std::string, uint32_t> by_peer;
  ServerCounters counters;
  void Release(const std::string& peer) {
    --counters.open;
    auto it = by_peer.find(peer);
    if (it != by_peer.end() && --it->second == 0) by_peer.erase(it);
  }
};

// One non-blocking write of a canned answer, then close: a refused
// connection costs a syscall or two, never a session.
void RefuseFd(int fd, const std::string& why) {
  std::string body = ErrorJson(core::ResourceExhaustedError(why)).dump();
  std::string response = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                         "Connection: close\r\nContent-Length: " +
                         std::to_string(body.size()) + "\r\n\r\n" + body;
  (void)!send(fd, response.data(), response.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
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
      : io_(io), api_(api), options_(std::move(options)), owner_(owner) {
    // Held for the moment descriptors run out (AfterAcceptError).
    reserve_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  ~Impl() {
    if (reserve_fd_ >= 0) close(reserve_fd_);
  }

  template <typename Socket>
  class Session : public std::enable_shared_from_this<Session<Socket>> {
   public:
    Session(Impl* impl, Socket socket, std::optional<Caller> caller, std::string peer,
            bool metrics_only = false, core::Status unpinned = core::Status::Ok())
        : impl_(impl),
          census_(impl->census_),
          socket_(std::move(socket)),
          timer_(impl->io_),
          caller_(std::move(caller)),
          peer_(std::move(peer)),
          metrics_only_(metrics_only),
          unpinned_(std::move(unpinned)) {
      ++census_->counters.open;
      ++census_->by_peer[peer_];
    }
    ~Session() { census_->Release(peer_); }
    void Start() { Read(); }

   private:
    // Closes the connection unless the next step completes within `limit`.
    void Arm(std::chrono::milliseconds limit) {
      timer_.expires_after(limit);
      timer_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
        if (ec) return;  // Re-armed or cancelled.
        self->timed_out_ = true;
        ++self->census_->counters.timed_out;
        self->Close();
      });
    }
    void Read() {
      parser_.emplace();
      parser_->body_limit(impl_->options_.body_limit);
      parser_->header_limit(16 * 1024);
      Arm(requests_ == 0 ? impl_->options_.header_timeout : impl_->options_.idle_timeout);
      http::async_read_header(socket_, buffer_, *parser_,
                              [self = this->shared_from_this()](beast::error_code ec, size_t) {
                                self->OnHeader(ec);
                              });
    }
    void OnHeader(beast::error_code ec) {
      if (ec || parser_->is_done()) return OnRead(ec);
      Arm(impl_->options_.body_timeout);
      http::async_read(socket_, buffer_, *parser_,
                       [self = this->shared_from_this()](beast::error_code ec, size_t) {
                         self->OnRead(ec);
                       });
    }
    void OnRead(beast::error_code ec) {
      if (timed_out_) return;  // Already closed.
      if (ec == http::error::end_of_stream || ec == asio::error::eof ||
          ec == asio::error::connection_reset || ec == asio::error::operation_aborted) {
        return Close();
      }
      ++requests_;
      if (ec) {
        // A malformed request or one over a limit: answer and close.
        response_ = {};
        const bool too_big = ec == http::error::body_limit;
        response_.result(too_big ? http::status::payload_too_large
                                 : ec == http::error::header_limit
                                       ? http::status::request_header_fields_too_large
                                       : http::status::bad_request);
        response_.set(http::field::content_type, "application/json");
        core::Status why =
            too_big ? core::InvalidArgumentError(
                          "request body over the limit of " +
                          std::to_string(impl_->options_.body_limit) +
                          " bytes (max_request_bytes in gpusliced's configuration, "
                          "docs/CONFIG.md)")
                    : core::InvalidArgumentError("bad HTTP request: " + ec.message());
        response_.body() = ErrorJson(why).dump();
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
        // The connection speaks for the process that opened it, and only
        // while that process runs (peer_process.h): once it has ended its
        // pid may be anyone's, and so may whatever holds the connection.
        core::Status running = caller_->process ? caller_->process->CheckRunning() : unpinned_;
        if (running.ok()) {
          ar.caller = *caller_;
          resp = impl_->api_.Handle(ar);
        } else {
          resp = {HttpStatusOf(running.code()), ErrorJson(running).dump(), "application/json", {}};
        }
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
          ar.caller.token = true;
          ar.caller.uid = UINT32_MAX;
          ar.caller.gid = UINT32_MAX;
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
      if (req.method() == http::verb::head) {
        // What GET would send, said in the headers only (RFC 9110 9.3.2).
        const size_t length = response_.body().size();
        response_.body().clear();
        response_.content_length(length);
      }
      if (impl_->owner_->after_request_) impl_->owner_->after_request_();
      Write();
    }
    void Write() {
      Arm(impl_->options_.body_timeout);
      http::async_write(socket_, response_,
                        [self = this->shared_from_this()](beast::error_code ec, size_t) {
                          if (self->timed_out_) return;
                          if (ec || !self->response_.keep_alive()) return self->Close();
                          self->Read();
                        });
    }
    void Close() {
      beast::error_code ignored;
      timer_.cancel();
      if (!socket_.is_open()) return;
      socket_.shutdown(Socket::shutdown_send, ignored);
      socket_.close(ignored);
    }

    Impl* impl_;
    std::shared_ptr<Census> census_;
    Socket socket_;
    asio::steady_timer timer_;
    std::optional<Caller> caller_;
    std::string peer_;           // "uid N" or the IP address: the per-peer cap's key.
    bool metrics_only_ = false;  // The metrics listener's rules apply.
    // Why the unix-socket caller's process could not be pinned at accept
    // (it had ended, or its pid named another process): every request is
    // refused with it. Ok when it was pinned or is not visible here.
    core::Status unpinned_;
    bool timed_out_ = false;
    uint64_t requests_ = 0;
    beast::flat_buffer buffer_;
    std::optional<http::request_parser<http::string_body>> parser_;
    http::response<http::string_body> response_;
  };

  // Whether a new connection from `peer` is over a cap; if so it is refused
  // (answered 503 and closed) and true is returned.
  bool OverCap(int fd, const std::string& peer, bool exempt) {
    std::string why;
    if (census_->counters.open >= options_.max_connections) {
      why = "too many connections to gpusliced (max_connections = " +
            std::to_string(options_.max_connections) + ")";
    } else if (!exempt) {
      auto it = census_->by_peer.find(peer);
      if (it != census_->by_peer.end() && it->second >= options_.max_connections_per_peer) {
        why = "too many connections from " + peer + " (max_connections_per_peer = " +
              std::to_string(options_.max_connections_per_peer) + ")";
      }
    }
    if (why.empty()) return false;
    ++census_->counters.refused;
    RefuseFd(fd, why + "; try again later");
    auto now = std::chrono::steady_clock::now();
    if (now - last_refusal_log_ > std::chrono::seconds(10)) {
      last_refusal_log_ = now;
      LogWarn("refusing connections: " + why + " (" +
              std::to_string(census_->counters.refused) + " refused so far)");
    }
    return true;
  }

  // After an accept error. Out of descriptors (EMFILE/ENFILE) the listening
  // socket stays readable, so accepting again at once would spin at 100% CPU
  // and starve every other connection: free the reserve descriptor, take the
  // waiting connection and close it, take the reserve back, and pause before
  // accepting again.
  template <typename Acceptor>
  void AfterAcceptError(beast::error_code ec, Acceptor& acceptor, std::function<void()> again) {
    if (ec == asio::error::operation_aborted) return;
    auto pause = std::chrono::milliseconds(1);
    if (ec == asio::error::no_descriptors || ec.value() == ENFILE ||
        ec == asio::error::no_buffer_space || ec == asio::error::no_memory) {
      pause = std::chrono::milliseconds(50);
      if (reserve_fd_ >= 0) {
        close(reserve_fd_);
        reserve_fd_ = -1;
      }
      pollfd p{acceptor.native_handle(), POLLIN, 0};
      if (poll(&p, 1, 0) == 1) {
        int fd = accept4(acceptor.native_handle(), nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) {
          RefuseFd(fd, "gpusliced is out of file descriptors; try again later");
          close(fd);
        }
      }
      reserve_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
      ++census_->counters.refused;
      auto now = std::chrono::steady_clock::now();
      if (now - last_refusal_log_ > std::chrono::seconds(10)) {
        last_refusal_log_ = now;
        LogWarn("out of file descriptors (" + ec.message() + "): refusing connections");
      }
    }
    auto timer = std::make_shared<asio::steady_timer>(io_, pause);
    timer->async_wait([timer, again = std::move(again)](beast::error_code e) {
      if (!e) again();
    });
  }

  void AcceptUnix() {
    unix_acceptor_->async_accept([this](beast::error_code ec, local::socket socket) {
      if (ec) return AfterAcceptError(ec, *unix_acceptor_, [this] { AcceptUnix(); });
      ucred cred{};
      socklen_t len = sizeof cred;
      if (getsockopt(socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
        std::string peer = "uid " + std::to_string(cred.uid);
        if (!OverCap(socket.native_handle(), peer, cred.uid == 0)) {
          Caller c;
          c.uid = cred.uid;
          c.gid = cred.gid;
          c.user = UserName(cred.uid);
          c.local = true;
          c.admin = cred.uid == 0 ||
                    (options_.admin_gid && InGroup(cred.uid, cred.gid, *options_.admin_gid));
          // Who the caller's process is, once and for all: its pid may be
          // reused.
          auto pinned = PinPeerProcess(socket.native_handle());
          core::Status unpinned = core::Status::Ok();
          if (pinned.ok()) {
            c.process = std::move(*pinned);
          } else if (pinned.status().code() == core::StatusCode::kResourceExhausted) {
            ++census_->counters.refused;
            RefuseFd(socket.native_handle(), pinned.status().message());
            return AcceptUnix();
          } else if (pinned.status().code() != core::StatusCode::kNotFound) {
            unpinned = pinned.status();
          }
          std::make_shared<Session<local::socket>>(this, std::move(socket), c, std::move(peer),
                                                   false, std::move(unpinned))
              ->Start();
        }
      }
      AcceptUnix();
    });
  }

  // The IP address of a TCP peer ("" when it is already gone).
  static std::string PeerAddress(const tcp::socket& socket) {
    beast::error_code ec;
    tcp::endpoint ep = socket.remote_endpoint(ec);
    return ec ? std::string() : ep.address().to_string();
  }

  // The metrics listener: anonymous reads of the allowed paths only.
  ApiResponse HandleMetricsOnly(ApiRequest& ar) {
    bool allowed = ar.method == "GET" || ar.method == "HEAD";
    if (allowed) {
      allowed = false;
      for (const std::string& p : metrics_paths_) allowed = allowed || ar.path == p;
    }
    if (!allowed) {
      return {404,
              ErrorJson(core::NotFoundError("the metrics listener serves only GET and HEAD of " +
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
      if (ec) return AfterAcceptError(ec, *metrics_acceptor_, [this] { AcceptMetrics(); });
      std::string peer = PeerAddress(socket);
      if (!peer.empty() && !OverCap(socket.native_handle(), peer, false)) {
        beast::error_code ignored;
        socket.set_option(tcp::no_delay(true), ignored);
        std::make_shared<Session<tcp::socket>>(this, std::move(socket), std::nullopt,
                                               std::move(peer), true)
            ->Start();
      }
      AcceptMetrics();
    });
  }

  void AcceptTcp() {
    tcp_acceptor_->async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (ec) return AfterAcceptError(ec, *tcp_acceptor_, [this] { AcceptTcp(); });
      std::string peer = PeerAddress(socket);
      if (!peer.empty() && !OverCap(socket.native_handle(), peer, false)) {
        beast::error_code ignored;
        socket.set_option(tcp::no_delay(true), ignored);
        std::make_shared<Session<tcp::socket>>(this, std::move(socket), std::nullopt,
                                               std::move(peer))
            ->Start();
      }
      AcceptTcp();
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
  std::shared_ptr<Census> census_ = std::make_shared<Census>();
  int reserve_fd_ = -1;
  std::chrono::steady_clock::time_point last_refusal_log_{};
};

HttpServer::HttpServer(asio::io_context& io, Api& api, ServerOptions options)
    : impl_(std::make_unique<Impl>(io, api, std::move(options), this)) {}

HttpServer::~HttpServer() = default;

ServerCounters HttpServer::counters() const { return impl_->census_->counters; }

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
    // A connect alone is not proof: a job supervisor forked a moment before
    // a SIGKILL may still hold a copy of the dead daemon's listening socket
    // (found by the SIGKILL test), and the kernel accepts connects into its
    // backlog although nobody answers. A live daemon answers within 2 s.
    local::socket probe(impl_->io_);
    beast::error_code ec;
    probe.connect(local::endpoint(path), ec);
    if (!ec) {
      const char kPing[] = "GET /v1/status HTTP/1.0\r\n\r\n";
      (void)!send(probe.native_handle(), kPing, sizeof kPing - 1, MSG_NOSIGNAL);
      // A signal must not cut the wait short: a live daemon's socket taken
      // for a dead one would be replaced under it.
      pollfd p{probe.native_handle(), POLLIN, 0};
      char byte;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      int ready = 0;
      for (auto left = std::chrono::milliseconds(2000); left.count() > 0;
           left = std::chrono::duration_cast<std::chrono::milliseconds>(
               deadline - std::chrono::steady_clock::now())) {
        ready = poll(&p, 1, static_cast<int>(left.count()));
        if (ready >= 0 || errno != EINTR) break;
      }
      if (ready == 1 && recv(probe.native_handle(), &byte, 1, MSG_DONTWAIT) == 1) {
        return core::AlreadyExistsError("another daemon is listening on " + path);
      }
      LogWarn("replacing " + path + ": it accepts connections but nothing answers (a dead "
              "daemon's socket)");
    }
    probe.close(ec);
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

core::Result<std::string> HttpServer::ListenTcp(const std::string& host_port) {
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
  // The port the kernel gave, so `tcp_listen = HOST:0` says which it took.
  const tcp::endpoint bound = impl_->tcp_acceptor_->local_endpoint(ec);
  if (ec) return core::InternalError("tcp listener: local address: " + ec.message());
  const std::string address = (bound.address().is_v6() ? "[" + bound.address().to_string() + "]"
                                                       : bound.address().to_string()) +
                              ":" + std::to_string(bound.port());
  LogInfo("TCP API on " + address + " (bearer token required)");
  impl_->AcceptTcp();
  return address;
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

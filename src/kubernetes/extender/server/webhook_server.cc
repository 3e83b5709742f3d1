#include "kubernetes/extender/server/webhook_server.h"

#include <sys/socket.h>
#include <sys/stat.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <iostream>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "kubernetes/extender/server/extender_http.h"
#include "kubernetes/extender/server/webhook.h"

namespace gpuslice::kubernetes {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

namespace {

// An AdmissionReview carries one Pod: far below this.
constexpr size_t kMaxBody = 8u << 20;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// What identifies a file's content for reloading: its inode and change time
// (the kubelet replaces a Secret's files by swapping a symbolic link).
struct FileStamp {
  dev_t dev = 0;
  ino_t ino = 0;
  int64_t ctime_ns = 0;
  int64_t size = 0;
  bool operator==(const FileStamp&) const = default;
};

FileStamp StampOf(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return {};
  return {st.st_dev, st.st_ino, st.st_ctim.tv_sec * 1000000000ll + st.st_ctim.tv_nsec, st.st_size};
}

core::Result<std::shared_ptr<ssl::context>> LoadTls(const std::string& cert,
                                                    const std::string& key) {
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  beast::error_code ec;
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                       ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1,
                   ec);
  if (!ec) ctx->use_certificate_chain_file(cert, ec);
  if (ec) return core::InvalidArgumentError("--webhook-cert '" + cert + "': " + ec.message());
  ctx->use_private_key_file(key, ssl::context::pem, ec);
  if (ec) return core::InvalidArgumentError("--webhook-key '" + key + "': " + ec.message());
  return ctx;
}

}  // namespace

class WebhookServer::Impl {
 public:
  Impl(Extender& ex, WebhookServerOptions options)
      : ex_(ex), options_(std::move(options)), acceptor_(io_) {}

  core::Result<std::string> Listen(const std::string& host_port) {
    GPUSLICE_RETURN_IF_ERROR(Reload(/*initial=*/true));
    GPUSLICE_ASSIGN_OR_RETURN(auto hp, SplitListenAddress(host_port, "--webhook-listen"));
    beast::error_code ec;
    auto addr = asio::ip::make_address(hp.first, ec);
    tcp::endpoint ep(addr, static_cast<unsigned short>(hp.second));
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return core::UnavailableError("--webhook-listen " + host_port + ": " + ec.message());
    auto bound = acceptor_.local_endpoint();
    const std::string h = bound.address().to_string();
    return (bound.address().is_v6() ? "[" + h + "]" : h) + ":" + std::to_string(bound.port());
  }

  void Run() {
    std::thread reaper([this] { Reap(); });
    for (;;) {
      tcp::socket socket(io_);
      beast::error_code ec;
      acceptor_.accept(socket, ec);
      if (stopping_) {
        acceptor_.close(ec);
        break;
      }
      if (ec) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // EMFILE and friends.
        continue;
      }
      if (open_ >= kMaxConnections) continue;  // Closed at once by the socket's destructor.
      if (core::Status s = Reload(false); !s.ok() && !reload_error_logged_) {
        std::cerr << "gpuslice-scheduler-extender: webhook keeps its previous certificate: "
                  << s.message() << "\n";
        reload_error_logged_ = true;
      }
      std::shared_ptr<ssl::context> ctx;
      std::shared_ptr<Conn> conn = std::make_shared<Conn>();
      conn->fd = socket.native_handle();
      conn->deadline_ms = NowMs() + kRequestTimeoutMs;
      {
        std::lock_guard<std::mutex> lock(mu_);
        ctx = tls_;
        conns_.push_back(conn);
      }
      ++open_;
      std::thread([this, ctx, conn, s = std::move(socket)]() mutable {
        Serve(*ctx, std::move(s), *conn);
        {
          std::lock_guard<std::mutex> lock(mu_);
          conns_.remove(conn);
        }
        --open_;
      }).detach();
    }
    reaper.join();
  }

  void Stop() {
    stopping_ = true;
    // Closing a socket does not wake a thread blocked in accept(2) on
    // Linux; shutting it down does (accept fails with EINVAL).
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);
  }

 private:
  // One connection's state, for the reaper.
  struct Conn {
    int fd = -1;  // Guarded by mu_ once published; -1 once the thread is done.
    std::atomic<int64_t> deadline_ms{0};
  };

  // Loads the pair again when either file changed.
  core::Status Reload(bool initial) {
    const FileStamp cert = StampOf(options_.cert_file), key = StampOf(options_.key_file);
    if (!initial && cert == cert_stamp_ && key == key_stamp_) return core::Status::Ok();
    auto ctx = LoadTls(options_.cert_file, options_.key_file);
    if (!ctx.ok()) {
      if (!initial) {
        // Not again until the files change once more.
        cert_stamp_ = cert;
        key_stamp_ = key;
      }
      return ctx.status();
    }
    std::lock_guard<std::mutex> lock(mu_);
    tls_ = *ctx;
    cert_stamp_ = cert;
    key_stamp_ = key;
    reload_error_logged_ = false;
    return core::Status::Ok();
  }

  // Shuts down connections past their deadline: their blocked read or
  // handshake then fails and their thread ends.
  void Reap() {
    while (!stopping_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      const int64_t now = NowMs();
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& c : conns_) {
        if (c->fd >= 0 && c->deadline_ms.load() < now) ::shutdown(c->fd, SHUT_RDWR);
      }
    }
  }

  void Serve(ssl::context& ctx, tcp::socket socket, Conn& conn) {
    beast::ssl_stream<beast::tcp_stream> stream(beast::tcp_stream(std::move(socket)), ctx);
    // Destroyed before the stream: the reaper forgets the descriptor before
    // it is closed and its number can be reused by the next connection.
    struct Forget {
      Impl* impl;
      Conn* conn;
      ~Forget() {
        std::lock_guard<std::mutex> lock(impl->mu_);
        conn->fd = -1;
      }
    } forget{this, &conn};
    beast::error_code ec;
    stream.handshake(ssl::stream_base::server, ec);
    if (ec) return;
    // One request per connection, all of it within the connection's
    // deadline. (Waiting for a kept-alive connection's next request with
    // poll(2) does not work under TLS: the request may already sit in the
    // TLS layer's buffers, read with the handshake.)
    beast::flat_buffer buffer;
    http::request_parser<http::string_body> parser;
    parser.body_limit(kMaxBody);
    http::read(stream, buffer, parser, ec);
    if (ec) return;
    const auto& req = parser.get();
    HttpAnswer a = Route(std::string(req.method_string()), std::string(req.target()), req.body());
    http::response<http::string_body> res{static_cast<http::status>(a.status), req.version()};
    res.set(http::field::server, "gpuslice-scheduler-extender");
    res.set(http::field::content_type, a.content_type);
    res.keep_alive(false);
    res.body() = std::move(a.body);
    res.prepare_payload();
    http::write(stream, res, ec);
    // TLS's close_notify waits for the peer's: give it a second at most.
    conn.deadline_ms = NowMs() + 1000;
    stream.shutdown(ec);
  }

  HttpAnswer Route(const std::string& method, const std::string& target, const std::string& body) {
    const std::string path = target.substr(0, target.find('?'));
    if (path == "/mutate") {
      if (method != "POST") return {405, R"({"error": "POST /mutate only"})"};
      return HandleAdmissionReview(body, options_.scheduler_name);
    }
    if (path == "/healthz") return HandleExtenderRequest(ex_, nullptr, method, path, body);
    return {404, R"j({"error": "no route (POST /mutate; GET /healthz)"})j"};
  }

  Extender& ex_;
  const WebhookServerOptions options_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> open_{0};
  bool reload_error_logged_ = false;  // Accept thread only.
  FileStamp cert_stamp_, key_stamp_;  // Accept thread only (and Listen before it).
  std::mutex mu_;
  std::shared_ptr<ssl::context> tls_;       // Guarded by mu_.
  std::list<std::shared_ptr<Conn>> conns_;  // Guarded by mu_.
};

WebhookServer::WebhookServer(Extender& extender, WebhookServerOptions options)
    : impl_(std::make_unique<Impl>(extender, std::move(options))) {}
WebhookServer::~WebhookServer() = default;
core::Result<std::string> WebhookServer::Listen(const std::string& host_port) {
  return impl_->Listen(host_port);
}
void WebhookServer::Run() { impl_->Run(); }
void WebhookServer::Stop() { impl_->Stop(); }

}  // namespace gpuslice::kubernetes

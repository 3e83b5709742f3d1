#include "kubernetes/extender/server/extender_http.h"

#include <poll.h>
#include <sys/socket.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "kubernetes/extender/placement/extender_json.h"
#include "kubernetes/extender/placement/pod_request.h"

namespace gpuslice::kubernetes {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using nlohmann::json;

namespace {

// Bodies of 1,000+ full Node objects run to megabytes.
constexpr size_t kMaxBody = 64u << 20;
constexpr auto kIdleTimeout = std::chrono::milliseconds(120000);

std::string ErrorBody(const std::string& message) { return json{{"error", message}}.dump(); }

// Nodes first seen in this request are polled before it is answered (one
// round, each node bounded by the poller's timeout): otherwise they would
// fail as unknown, and kube-scheduler would leave the pod unschedulable
// for up to a minute, as the first pods after the extender starts were.
void LearnNodes(NodePoller* poller, const ExtenderArgs& args) {
  if (poller != nullptr && args.node_list && poller->Learn(args.node_names, args.internal_ips)) {
    poller->PollOnce();
  }
}

HttpAnswer Filter(Extender& ex, NodePoller* poller, const std::string& body) {
  auto args = ParseExtenderArgs(body);
  if (!args.ok()) return {400, RenderFilterError(args.status().message())};
  LearnNodes(poller, *args);
  auto pod = ParsePod(args->pod);
  if (!pod.ok()) return {400, RenderFilterError(pod.status().message())};
  return {200, RenderFilterResult(*args, ex.Filter(*pod, args->node_names))};
}

HttpAnswer Prioritize(Extender& ex, NodePoller* poller, const std::string& body) {
  auto args = ParseExtenderArgs(body);
  if (!args.ok()) return {400, ErrorBody(args.status().message())};
  LearnNodes(poller, *args);
  auto pod = ParsePod(args->pod);
  if (!pod.ok()) return {400, ErrorBody(pod.status().message())};
  std::vector<int64_t> scores = ex.Prioritize(*pod, args->node_names);
  std::vector<std::pair<std::string, int64_t>> out;
  out.reserve(scores.size());
  for (size_t i = 0; i < scores.size(); ++i) out.emplace_back(args->node_names[i], scores[i]);
  return {200, RenderPriorities(out)};
}

HttpAnswer Bind(Extender& ex, NodePoller*, const std::string& body) {
  auto args = ParseBindingArgs(body);
  if (!args.ok()) return {400, RenderBindingResult(args.status().message())};
  core::Status s = ex.Bind(*args);
  // kube-scheduler reads the Error field of a 200 answer.
  return {200, RenderBindingResult(s.ok() ? "" : s.message())};
}

HttpAnswer Healthz(Extender& ex, NodePoller*, const std::string&) {
  SnapshotPtr snap = ex.snapshot();
  size_t reporting = 0, known = 0;
  if (snap) {
    known = snap->nodes.size();
    for (const auto& [name, e] : snap->nodes) reporting += e.has_report ? 1 : 0;
  }
  return {200, json{{"status", "ok"},
                    {"nodes_known", known},
                    {"nodes_reporting", reporting},
                    {"assumed", ex.AssumedNow().size()}}
                   .dump()};
}

struct Route {
  const char* method;
  const char* path;
  HttpAnswer (*handler)(Extender&, NodePoller*, const std::string&);
};

constexpr Route kRoutes[] = {
    {"POST", "/filter", Filter},
    {"POST", "/prioritize", Prioritize},
    {"POST", "/bind", Bind},
    {"GET", "/healthz", Healthz},
};

}  // namespace

HttpAnswer HandleExtenderRequest(Extender& extender, NodePoller* poller, const std::string& method,
                                 const std::string& path, const std::string& body) {
  const std::string p = path.substr(0, path.find('?'));
  bool known = false;
  for (const Route& r : kRoutes) {
    if (p != r.path) continue;
    known = true;
    if (method == r.method) return r.handler(extender, poller, body);
  }
  if (known) return {405, ErrorBody(method + " " + p + ": method not allowed")};
  return {404, ErrorBody("no route " + p + " (POST /filter, /prioritize, /bind; GET /healthz)")};
}

core::Result<std::pair<std::string, int>> SplitListenAddress(const std::string& host_port,
                                                             const std::string& flag) {
  size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) {
    return core::InvalidArgumentError(flag + " '" + host_port + "': not HOST:PORT");
  }
  std::string host = host_port.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  beast::error_code ec;
  asio::ip::make_address(host, ec);
  if (ec) return core::InvalidArgumentError(flag + " '" + host_port + "': not an IP address");
  const std::string digits = host_port.substr(colon + 1);
  int port = digits.empty() || digits.size() > 5 ||
                     digits.find_first_not_of("0123456789") != std::string::npos
                 ? -1
                 : std::stoi(digits);
  if (port < 0 || port > 65535) {
    return core::InvalidArgumentError(flag + " '" + host_port + "': bad port");
  }
  return std::make_pair(host, port);
}

class ExtenderServer::Impl {
 public:
  Impl(Extender& ex, NodePoller* poller) : ex_(ex), poller_(poller), acceptor_(io_) {}

  core::Result<std::string> Listen(const std::string& host_port) {
    GPUSLICE_ASSIGN_OR_RETURN(auto hp, SplitListenAddress(host_port, "--listen"));
    beast::error_code ec;
    auto addr = asio::ip::make_address(hp.first, ec);
    const int port = hp.second;
    tcp::endpoint ep(addr, static_cast<unsigned short>(port));
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return core::UnavailableError("--listen " + host_port + ": " + ec.message());
    auto bound = acceptor_.local_endpoint();
    const std::string h = bound.address().to_string();
    return (bound.address().is_v6() ? "[" + h + "]" : h) + ":" + std::to_string(bound.port());
  }

  void Run() {
    for (;;) {
      tcp::socket socket(io_);
      beast::error_code ec;
      acceptor_.accept(socket, ec);
      if (stopping_) {
        acceptor_.close(ec);
        return;
      }
      if (ec) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // EMFILE and friends.
        continue;
      }
      if (open_ >= kMaxConnections) continue;  // Closed at once by the socket's destructor.
      ++open_;
      std::thread([this, s = std::move(socket)]() mutable {
        Serve(std::move(s));
        --open_;
      }).detach();
    }
  }

  void Stop() {
    stopping_ = true;
    // Closing a socket does not wake a thread blocked in accept(2) on
    // Linux; shutting it down does (accept fails with EINVAL).
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);
    // Connections finish their request; Run has returned by then.
  }

 private:
  void Serve(tcp::socket socket) {
    beast::tcp_stream stream(std::move(socket));
    beast::flat_buffer buffer;
    for (;;) {
      // Synchronous reads ignore Beast's stream timeouts: wait for the next
      // request with poll(2), so an idle keep-alive connection gives its
      // thread back after kIdleTimeout.
      if (buffer.size() == 0) {
        pollfd pfd{stream.socket().native_handle(), POLLIN, 0};
        if (::poll(&pfd, 1, static_cast<int>(kIdleTimeout.count())) <= 0) break;
      }
      http::request_parser<http::string_body> parser;
      parser.body_limit(kMaxBody);
      beast::error_code ec;
      http::read(stream, buffer, parser, ec);
      if (ec) return;
      const auto& req = parser.get();
      HttpAnswer a = HandleExtenderRequest(ex_, poller_, std::string(req.method_string()),
                                           std::string(req.target()), req.body());
      http::response<http::string_body> res{static_cast<http::status>(a.status), req.version()};
      res.set(http::field::server, "gpuslice-scheduler-extender");
      res.set(http::field::content_type, a.content_type);
      res.keep_alive(req.keep_alive());
      res.body() = std::move(a.body);
      res.prepare_payload();
      http::write(stream, res, ec);
      if (ec || !res.keep_alive()) break;
    }
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
  }

  Extender& ex_;
  NodePoller* poller_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> open_{0};
};

ExtenderServer::ExtenderServer(Extender& extender, NodePoller* poller)
    : impl_(std::make_unique<Impl>(extender, poller)) {}
ExtenderServer::~ExtenderServer() = default;
core::Result<std::string> ExtenderServer::Listen(const std::string& host_port) {
  return impl_->Listen(host_port);
}
void ExtenderServer::Run() { impl_->Run(); }
void ExtenderServer::Stop() { impl_->Stop(); }

}  // namespace gpuslice::kubernetes

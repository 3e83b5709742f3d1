#include "kubernetes/extender/kube/http_client.h"

#include <openssl/ssl.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cctype>
#include <type_traits>

namespace gpuslice::kubernetes {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

core::Result<Url> ParseUrl(std::string_view url) {
  Url u;
  std::string_view rest;
  if (url.rfind("http://", 0) == 0) {
    rest = url.substr(7);
  } else if (url.rfind("https://", 0) == 0) {
    u.https = true;
    rest = url.substr(8);
  } else {
    return core::InvalidArgumentError("URL '" + std::string(url) +
                                      "': only http:// and https:// are supported");
  }
  size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  u.path = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {
    size_t close = authority.find(']');
    if (close == std::string_view::npos) {
      return core::InvalidArgumentError("URL '" + std::string(url) + "': unclosed '['");
    }
    u.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') {
        return core::InvalidArgumentError("URL '" + std::string(url) + "': bad host");
      }
      port = after.substr(1);
    }
  } else {
    size_t colon = authority.rfind(':');
    u.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  if (u.host.empty()) return core::InvalidArgumentError("URL '" + std::string(url) + "': no host");
  if (port.empty()) {
    u.port = u.https ? "443" : "80";
  } else {
    for (char c : port) {
      if (!std::isdigit(static_cast<unsigned char>(c))) {
        return core::InvalidArgumentError("URL '" + std::string(url) + "': bad port");
      }
    }
    if (port.size() > 5 || std::stoul(std::string(port)) > 65535) {
      return core::InvalidArgumentError("URL '" + std::string(url) + "': bad port");
    }
    u.port = std::string(port);
  }
  return u;
}

namespace {

core::Status Failed(const HttpRequest& r, const char* step, const beast::error_code& ec) {
  if (ec == beast::error::timeout) {
    return core::Status(core::StatusCode::kDeadlineExceeded,
                        r.method + " " + r.url + ": timed out (" + step + ")");
  }
  return core::UnavailableError(r.method + " " + r.url + ": " + step + ": " + ec.message());
}

http::request<http::string_body> BuildRequest(const HttpRequest& r, const Url& u) {
  http::request<http::string_body> req{http::string_to_verb(r.method), u.path, 11};
  const bool default_port = u.port == (u.https ? "443" : "80");
  std::string host = u.host.find(':') != std::string::npos ? "[" + u.host + "]" : u.host;
  req.set(http::field::host, default_port ? host : host + ":" + u.port);
  req.set(http::field::user_agent, "gpuslice-scheduler-extender");
  req.set(http::field::connection, "close");
  for (const auto& [k, v] : r.headers) req.set(k, v);
  if (!r.body.empty()) req.body() = r.body;
  req.prepare_payload();
  return req;
}

// Connects, shakes hands (TLS, when `handshake`), writes `req` and reads
// the answer, all as async
// operations on one io_context: Beast's stream timeouts bound only async
// operations, and a peer that accepts and never answers must not hold a
// poller thread forever.
template <typename Stream>
core::Result<HttpResponse> Exchange(asio::io_context& io, Stream& stream, beast::tcp_stream& lowest,
                                    const tcp::resolver::results_type& endpoints,
                                    const HttpRequest& r, http::request<http::string_body>& req,
                                    bool handshake) {
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 << 20);
  beast::error_code result;
  const char* step = "connect";
  auto on_read = [&](beast::error_code ec, size_t) { result = ec; };
  auto on_write = [&](beast::error_code ec, size_t) {
    if (ec) {
      result = ec;
      return;
    }
    step = "read";
    http::async_read(stream, buffer, parser, on_read);
  };
  auto write = [&] {
    step = "write";
    http::async_write(stream, req, on_write);
  };
  auto on_handshake = [&](beast::error_code ec) {
    if (ec) {
      result = ec;
      return;
    }
    write();
  };
  lowest.async_connect(endpoints, [&](beast::error_code ec, const tcp::endpoint&) {
    if (ec) {
      result = ec;
      return;
    }
    if (handshake) {
      step = "TLS handshake";
      if constexpr (!std::is_same_v<Stream, beast::tcp_stream>) {
        stream.async_handshake(ssl::stream_base::client, on_handshake);
      }
      return;
    }
    write();
  });
  io.run();
  if (result) return Failed(r, step, result);
  HttpResponse out;
  out.status = static_cast<int>(parser.get().result_int());
  out.body = std::move(parser.get().body());
  return out;
}

}  // namespace

core::Result<HttpResponse> Fetch(const HttpRequest& r) {
  GPUSLICE_ASSIGN_OR_RETURN(Url u, ParseUrl(r.url));
  asio::io_context io;
  beast::error_code ec;
  tcp::resolver resolver(io);
  auto endpoints = resolver.resolve(u.host, u.port, ec);
  if (ec) return Failed(r, "resolve", ec);
  http::request<http::string_body> req = BuildRequest(r, u);

  if (!u.https) {
    beast::tcp_stream stream(io);
    stream.expires_after(r.timeout);
    auto out = Exchange(io, stream, stream, endpoints, r, req, false);
    stream.socket().shutdown(tcp::socket::shutdown_both, ec);
    return out;
  }

  ssl::context ctx(ssl::context::tls_client);
  ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                  ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
  if (r.insecure_skip_verify) {
    ctx.set_verify_mode(ssl::verify_none);
  } else {
    if (r.ca_file.empty()) {
      ctx.set_default_verify_paths(ec);
    } else {
      ctx.load_verify_file(r.ca_file, ec);
    }
    if (ec) return Failed(r, ("CA file '" + r.ca_file + "'").c_str(), ec);
    ctx.set_verify_mode(ssl::verify_peer);
    ctx.set_verify_callback(ssl::host_name_verification(u.host));
  }
  beast::ssl_stream<beast::tcp_stream> stream(io, ctx);
  // SNI: API servers behind a proxy pick their certificate by it.
  if (!SSL_set_tlsext_host_name(stream.native_handle(), u.host.c_str())) {
    return core::UnavailableError(r.method + " " + r.url + ": cannot set the TLS server name");
  }
  beast::get_lowest_layer(stream).expires_after(r.timeout);
  auto out = Exchange(io, stream, beast::get_lowest_layer(stream), endpoints, r, req, true);
  // No TLS close_notify exchange: it would wait on the peer for nothing
  // (the answer is complete and the connection is not reused).
  beast::get_lowest_layer(stream).close();
  return out;
}

}  // namespace gpuslice::kubernetes

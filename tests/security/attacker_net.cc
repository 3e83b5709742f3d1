// gpuslice-attacker http / submit / flood / latency: the daemon's API seen
// from a socket, with no client library in the way: one HTTP/1.1 request
// per connection ("Connection: close"), endpoints "unix:PATH" or
// "tcp:HOST:PORT".

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "attacker.h"

namespace gpuslice::security {
namespace {

struct Response {
  int status = 0;  // 0: no answer (refused, closed, timed out).
  std::string body;
  std::string error;
};

// Connects to `ep`; non-blocking when `nonblocking` (the connect may then
// still be in progress). -1 on failure.
int Connect(const std::string& ep, bool nonblocking = false) {
  int fd = -1;
  int flags = SOCK_STREAM | SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0);
  if (ep.rfind("unix:", 0) == 0) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::string path = ep.substr(5);
    if (path.size() >= sizeof(a.sun_path)) return -1;
    std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
    fd = socket(AF_UNIX, flags, 0);
    if (fd < 0) return -1;
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 && errno != EINPROGRESS &&
        errno != EAGAIN) {
      close(fd);
      return -1;
    }
    return fd;
  }
  if (ep.rfind("tcp:", 0) == 0) {
    std::string hp = ep.substr(4);
    size_t colon = hp.rfind(':');
    if (colon == std::string::npos) return -1;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(std::atoi(hp.c_str() + colon + 1)));
    if (inet_pton(AF_INET, hp.substr(0, colon).c_str(), &a.sin_addr) != 1) return -1;
    fd = socket(AF_INET, flags, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 && errno != EINPROGRESS) {
      close(fd);
      return -1;
    }
    return fd;
  }
  Die("endpoint must be unix:PATH or tcp:HOST:PORT, got '" + ep + "'");
}

std::string ReadToken(const std::string& file) {
  if (file.empty()) return "";
  std::ifstream in(file);
  std::string t;
  std::getline(in, t);
  return t;
}

// One request on the connected `fd` and its response; the connection stays
// open for another when `keep_alive`.
Response Exchange(int fd, const std::string& method, const std::string& path,
                  const std::string& body, const std::string& token, int timeout_ms,
                  bool keep_alive) {
  Response r;
  struct timeval tv {
    timeout_ms / 1000, (timeout_ms % 1000) * 1000
  };
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: gpuslice\r\nConnection: " +
                    (keep_alive ? "keep-alive" : "close") + "\r\n";
  if (!token.empty()) req += "Authorization: Bearer " + token + "\r\n";
  if (!body.empty() || method == "POST") {
    req +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  req += "\r\n" + body;
  // The server may answer (413) and close before it read everything: keep
  // what was sent and go on to read the answer.
  for (size_t sent = 0; sent < req.size();) {
    ssize_t n = send(fd, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  std::string in;
  char buf[65536];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    in.append(buf, static_cast<size_t>(n));
    // Stop once a complete response with a Content-Length is in.
    size_t head = in.find("\r\n\r\n");
    if (head != std::string::npos) {
      std::string lower = in.substr(0, head);
      std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
      size_t cl = lower.find("content-length:");
      if (cl != std::string::npos &&
          in.size() >= head + 4 + std::strtoull(lower.c_str() + cl + 15, nullptr, 10)) {
        break;
      }
    }
  }
  if (in.rfind("HTTP/1.", 0) != 0 || in.size() < 12) {
    r.error = in.empty() ? "no answer" : "not HTTP: " + in.substr(0, 80);
    return r;
  }
  r.status = std::atoi(in.c_str() + 9);
  size_t head = in.find("\r\n\r\n");
  if (head != std::string::npos) r.body = in.substr(head + 4);
  return r;
}

Response Request(const std::string& ep, const std::string& method, const std::string& path,
                 const std::string& body, const std::string& token, int timeout_ms) {
  int fd = Connect(ep);
  if (fd < 0) {
    Response r;
    r.error = std::string("connect: ") + std::strerror(errno);
    return r;
  }
  Response r = Exchange(fd, method, path, body, token, timeout_ms, /*keep_alive=*/false);
  close(fd);
  return r;
}

void RaiseFdLimit(rlim_t want) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  rl.rlim_cur = std::min<rlim_t>(std::max<rlim_t>(rl.rlim_cur, want), rl.rlim_max);
  setrlimit(RLIMIT_NOFILE, &rl);
}

}  // namespace

int Http(const Flags& f) {
  std::string body = f.Get("body");
  if (f.Has("body-file")) {
    std::ifstream in(f.Get("body-file"));
    std::stringstream ss;
    ss << in.rdbuf();
    body = ss.str();
  }
  Response r =
      Request(f.Get("to"), f.Get("method", "GET"), f.Get("path", "/v1/status"), body,
              ReadToken(f.Get("token-file")), static_cast<int>(f.GetDouble("timeout-ms", 10000)));
  std::printf("status %d\n%s\n", r.status, r.status ? r.body.c_str() : r.error.c_str());
  return r.status ? 0 : 1;
}

// The connection outlives the process that opened it: this
// process connects and makes a first request (so the daemon has accepted
// the connection from it), then forks and exits; its child keeps the
// connection and, once --go exists (by then the test has put a root process
// at this process's pid), sends --method --path --body on it. Lines in
// --out: "first STATUS pid=PID", then the child's "answer STATUS BODY".
int HandOver(const Flags& f) {
  const std::string out = f.Get("out");
  const int fd = Connect(f.Get("to"));
  if (fd < 0) Die(std::string("connect: ") + std::strerror(errno));
  Response first = Exchange(fd, "GET", "/v1/status", "", "", 10000, /*keep_alive=*/true);
  const pid_t child = fork();
  if (child < 0) Die(std::string("fork: ") + std::strerror(errno));
  if (child > 0) {
    AppendLine(out, "first " + std::to_string(first.status) + " pid=" + std::to_string(getpid()) +
                        " at=" + std::to_string(NowMs()));
    _exit(0);
  }
  // A group of its own: a pid stays taken while a process group of that
  // number has members, and the test must be able to give it to root.
  setpgid(0, 0);
  if (!WaitForFile(f.Get("go"), f.GetDouble("wait", 60))) {
    AppendLine(out, "no-go at=" + std::to_string(NowMs()));
    _exit(1);
  }
  Response r = Exchange(fd, f.Get("method", "POST"), f.Get("path", "/v1/jobs"), f.Get("body"), "",
                        10000, /*keep_alive=*/false);
  std::string body = r.status ? r.body : r.error;
  std::replace(body.begin(), body.end(), '\n', ' ');
  AppendLine(out,
             "answer " + std::to_string(r.status) + " " + body + " at=" + std::to_string(NowMs()));
  _exit(0);
}

// Submits --count jobs over the API as this user, one connection each. The
// body is what the CLI would send; --env-bytes pads the environment with
// strings of at most 120 KiB (the per-string limit of the API) to that size.
int Submit(const Flags& f) {
  nlohmann::json body;
  if (f.Has("gpus")) {
    body["gpus"] = f.Get("gpus");
  } else {
    body["mem"] = f.Get("mem", "1GiB");
  }
  body["mode"] = f.Get("mode", "submit");
  std::vector<std::string> argv = f.GetAll("argv");
  if (argv.empty() && body["mode"] != "shell") argv = {"/bin/true"};
  if (!argv.empty()) body["argv"] = argv;
  body["cwd"] = f.Get("cwd", "/tmp");
  std::vector<std::string> env = {"PATH=/usr/bin:/bin"};
  for (const auto& e : f.GetAll("env")) env.push_back(e);
  for (uint64_t pad = f.GetBytes("env-bytes", 0), i = 0; pad > 0; ++i) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(pad, 120 << 10));
    env.push_back("GSATTACK_PAD" + std::to_string(i) + "=" + std::string(n, 'x'));
    pad -= n;
  }
  body["env"] = env;
  const std::string text = body.dump();
  const int count = static_cast<int>(f.GetDouble("count", 1));
  int accepted = 0, refused = 0, failed = 0;
  std::string first_refusal, ids;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < count; ++i) {
    Response r =
        Request(f.Get("to"), "POST", "/v1/jobs", text, ReadToken(f.Get("token-file")), 30000);
    if (r.status == 201) {
      ++accepted;
      nlohmann::json j = nlohmann::json::parse(r.body, nullptr, false);
      if (j.is_object() && j.contains("id")) ids += std::to_string(j["id"].get<uint64_t>()) + " ";
    } else if (r.status != 0) {
      if (refused++ == 0) first_refusal = std::to_string(r.status) + " " + r.body;
      if (f.Has("stop-at-refusal")) break;
    } else {
      if (failed++ == 0 && first_refusal.empty()) first_refusal = "0 " + r.error;
      if (f.Has("stop-at-refusal")) break;
    }
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("accepted %d refused %d failed %d seconds %.2f bytes %zu\nids %s\nfirst_refusal %s\n",
              accepted, refused, failed, s, text.size(), ids.c_str(), first_refusal.c_str());
  return 0;
}

// Opens --count connections and holds them: idle (connected, nothing sent)
// or, every --half-sent-every'th, with half a request header (slowloris).
// Reports how many it opened and, at the end, how many the server closed.
int Flood(const Flags& f) {
  const int count = static_cast<int>(f.GetDouble("count", 2000));
  const int half_every = static_cast<int>(f.GetDouble("half-sent-every", 0));
  const std::string out = f.Get("out");
  RaiseFdLimit(static_cast<rlim_t>(count) + 64);
  std::vector<int> fds;
  int failed = 0;
  for (int i = 0; i < count; ++i) {
    int fd = Connect(f.Get("to"), /*nonblocking=*/true);
    if (fd < 0) {
      ++failed;
      continue;
    }
    if (half_every > 0 && i % half_every == 0) {
      // Wait for the connection, then send a header that never ends.
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, 1000);
      const char part[] = "GET /v1/status HTTP/1.1\r\nHost: x\r\nX-Slow: ";
      ssize_t n = send(fd, part, sizeof(part) - 1, MSG_NOSIGNAL);
      (void)n;
    }
    fds.push_back(fd);
  }
  AppendLine(out, "opened " + std::to_string(fds.size()) + " failed " + std::to_string(failed) +
                      " at=" + std::to_string(NowMs()));
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(f.GetDouble("hold", 30));
  int closed = 0;
  while (std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (int fd : fds) {
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) ++closed;
    close(fd);
  }
  AppendLine(out, "done closed_by_server " + std::to_string(closed));
  return 0;
}

// --count sequential GETs of --path, each on a new connection; prints
// "n N ok K p50 X p99 Y max Z" (milliseconds).
int Latency(const Flags& f) {
  const int count = static_cast<int>(f.GetDouble("count", 200));
  const int timeout_ms = static_cast<int>(f.GetDouble("timeout-ms", 5000));
  const std::string token = ReadToken(f.Get("token-file"));
  // A daemon that stopped answering would make every request wait for the
  // timeout: after --max-failures failures the rest count as failed.
  const int max_failures = static_cast<int>(f.GetDouble("max-failures", 5));
  std::vector<double> ms;
  int ok = 0, failures = 0;
  for (int i = 0; i < count && failures < max_failures; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    Response r = Request(f.Get("to"), "GET", f.Get("path", "/v1/status"), "", token, timeout_ms);
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    if (r.status == 200) {
      ++ok;
    } else {
      ++failures;
    }
  }
  std::sort(ms.begin(), ms.end());
  auto q = [&](double p) {
    return ms.empty() ? 0 : ms[std::min(ms.size() - 1, size_t(p * ms.size()))];
  };
  std::printf("n %d ok %d p50 %.2f p99 %.2f max %.2f\n", count, ok, q(0.50), q(0.99),
              ms.empty() ? 0 : ms.back());
  return 0;
}

}  // namespace gpuslice::security

#include "kubernetes/extender/kube/node_poller.h"

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kubernetes/extender/kube/http_client.h"

namespace gpuslice::kubernetes {

namespace {

std::string Trim(std::string s) {
  const char* ws = " \t\r\n";
  s.erase(0, s.find_first_not_of(ws));
  size_t end = s.find_last_not_of(ws);
  s.erase(end == std::string::npos ? 0 : end + 1);
  // YAML allows quoted scalars.
  if (s.size() >= 2 && (s.front() == '"' || s.front() == '\'') && s.back() == s.front()) {
    s = s.substr(1, s.size() - 2);
  }
  return s;
}

}  // namespace

core::Result<std::map<std::string, std::string>> ParseNodesFile(std::string_view text) {
  std::map<std::string, std::string> out;
  const std::string t = Trim(std::string(text));
  if (!t.empty() && t.front() == '{') {
    nlohmann::json j = nlohmann::json::parse(t, nullptr, false);
    if (!j.is_object()) return core::InvalidArgumentError("nodes file: not a JSON object");
    for (const auto& [name, url] : j.items()) {
      if (!url.is_string()) {
        return core::InvalidArgumentError("nodes file: '" + name + "': the URL is not a string");
      }
      out[name] = url.get<std::string>();
    }
  } else {
    std::istringstream in{std::string(text)};
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
      ++n;
      if (size_t hash = line.find(" #"); hash != std::string::npos) line.erase(hash);
      if (Trim(line).empty() || Trim(line)[0] == '#') continue;
      // "name: url": the first ": " splits (URLs hold ':' without a space).
      size_t colon = line.find(": ");
      if (colon == std::string::npos) {
        return core::InvalidArgumentError("nodes file line " + std::to_string(n) +
                                          ": not 'node-name: http://host:port'");
      }
      std::string name = Trim(line.substr(0, colon));
      std::string url = Trim(line.substr(colon + 2));
      if (name.empty() || url.empty()) {
        return core::InvalidArgumentError("nodes file line " + std::to_string(n) +
                                          ": empty name or URL");
      }
      out[name] = url;
    }
  }
  for (const auto& [name, url] : out) {
    if (auto u = ParseUrl(url); !u.ok()) {
      return core::InvalidArgumentError("nodes file: '" + name + "': " + u.status().message());
    }
  }
  return out;
}

std::string NodeStateUrl(const std::string& base) {
  std::string b = base;
  const std::string path = "/v1/node";
  if (b.size() >= path.size() && b.compare(b.size() - path.size(), path.size(), path) == 0) {
    return b;
  }
  while (!b.empty() && b.back() == '/') b.pop_back();
  return b + path;
}

NodePoller::NodePoller(PollerOptions options, std::map<std::string, std::string> nodes,
                       Publish publish, NowFn now)
    : options_(options), publish_(std::move(publish)), now_(std::move(now)) {
  for (auto& [name, url] : nodes) {
    urls_[name] = NodeStateUrl(url);
    current_.nodes[name].url = urls_[name];
  }
}

NodePoller::~NodePoller() { Stop(); }

bool NodePoller::Learn(const std::vector<std::string>& names, const std::vector<std::string>& ips) {
  if (options_.daemon_port <= 0) return false;
  std::lock_guard<std::mutex> lock(mu_);
  bool learnt = false;
  for (size_t i = 0; i < names.size() && i < ips.size(); ++i) {
    if (ips[i].empty() || urls_.count(names[i])) continue;
    const std::string host = ips[i].find(':') != std::string::npos ? "[" + ips[i] + "]" : ips[i];
    urls_[names[i]] = NodeStateUrl("http://" + host + ":" + std::to_string(options_.daemon_port));
    learnt = true;
  }
  return learnt;
}

void NodePoller::PollOnce() {
  std::lock_guard<std::mutex> round(round_mu_);
  std::vector<std::pair<std::string, std::string>> work;
  {
    std::lock_guard<std::mutex> lock(mu_);
    work.assign(urls_.begin(), urls_.end());
  }
  struct Outcome {
    core::Result<NodeReport> report = core::UnavailableError("not polled");
    int64_t at_ms = 0;
  };
  std::vector<Outcome> results(work.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < work.size(); i = next++) {
      HttpRequest r;
      r.url = work[i].second;
      r.timeout = options_.timeout;
      auto resp = Fetch(r);
      Outcome& o = results[i];
      o.at_ms = now_();
      if (!resp.ok()) {
        o.report = resp.status();
      } else if (resp->status != 200) {
        o.report = core::UnavailableError(r.url + " answered " + std::to_string(resp->status));
      } else {
        o.report = ParseNodeReport(resp->body);
      }
    }
  };
  const size_t threads = std::min<size_t>(kMaxParallel, work.size());
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();

  auto snap = std::make_shared<Snapshot>(current_);
  snap->generation = current_.generation + 1;
  for (size_t i = 0; i < work.size(); ++i) {
    NodeEntry& e = snap->nodes[work[i].first];
    e.url = work[i].second;
    if (results[i].report.ok()) {
      e.has_report = true;
      e.report = std::move(*results[i].report);
      e.received_ms = results[i].at_ms;
      e.last_error.clear();
    } else {
      e.last_error = results[i].report.status().message();
    }
  }
  current_ = *snap;
  publish_(std::move(snap));
}

void NodePoller::Start() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_ = false;
  }
  thread_ = std::thread([this] {
    for (;;) {
      const auto started = std::chrono::steady_clock::now();
      PollOnce();
      std::unique_lock<std::mutex> lock(stop_mu_);
      if (stop_cv_.wait_until(lock, started + options_.interval, [this] { return stop_; })) return;
    }
  });
}

void NodePoller::Stop() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace gpuslice::kubernetes

// The scheduler extender end to end: three real gpusliced daemons on
// simulated GPUs with different loads, the real extender binary polling
// them, and a fake API server (a tiny Beast server in this test) recording
// what bind sends. The test plays kube-scheduler: it POSTs ExtenderArgs and
// ExtenderBindingArgs bodies of the shape kube-scheduler sends.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "harness.h"
#include "kubernetes/extender/kube/http_client.h"

namespace gpuslice::e2e {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using kubernetes::Fetch;
using kubernetes::HttpRequest;
using nlohmann::json;

constexpr uint64_t kGiB = 1ull << 30;

// The API server's side of bind: records every request, answers 201 to a
// Binding and 200 to anything else.
class FakeApiServer {
 public:
  struct Request {
    std::string method, target, body, authorization;
  };
  FakeApiServer() : acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~FakeApiServer() {
    stop_ = true;
    beast::error_code ec;
    // Wake the blocking accept with a connection of our own.
    tcp::socket s(io_);
    s.connect(acceptor_.local_endpoint(), ec);
    thread_.join();
  }
  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
  }
  std::vector<Request> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  void Run() {
    while (!stop_) {
      tcp::socket socket(io_);
      beast::error_code ec;
      acceptor_.accept(socket, ec);
      if (ec || stop_) continue;
      beast::flat_buffer buffer;
      http::request<http::string_body> req;
      http::read(socket, buffer, req, ec);
      if (ec) continue;
      {
        std::lock_guard<std::mutex> lock(mu_);
        requests_.push_back({std::string(req.method_string()), std::string(req.target()),
                             req.body(), std::string(req[http::field::authorization])});
      }
      const bool binding = req.target().ends_with("/binding");
      http::response<http::string_body> res{binding ? http::status::created : http::status::ok, 11};
      res.set(http::field::content_type, "application/json");
      res.body() = binding ? R"({"kind":"Status","status":"Success"})" : "{}";
      res.keep_alive(false);
      res.prepare_payload();
      http::write(socket, res, ec);
    }
  }

  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<Request> requests_;
};

core::Result<kubernetes::HttpResponse> Get(const std::string& url) {
  HttpRequest r;
  r.url = url;
  return Fetch(r);
}

json Pod(const std::string& name, json limits) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", name},
            {"namespace", "ml"},
            {"uid", "uid-" + name},
            {"annotations", {{"gpuslice.dev/priority", "normal"}}}}},
          {"spec",
           {{"schedulerName", "default-scheduler"},
            {"containers",
             {{{"name", "main"},
               {"image", "pytorch"},
               {"resources", {{"limits", limits}, {"requests", limits}}}}}}}}};
}

json Fraction(int gib, int pct) {
  return {{"gpuslice.dev/gpu-memory", std::to_string(gib)},
          {"gpuslice.dev/gpu-share", std::to_string(pct)}};
}

class ExtenderE2e : public ::testing::Test {
 protected:
  // node-a: 1 GPU holding 40 GiB + 50%; node-b: 2 idle GPUs; node-c: 1 GPU
  // holding 70 GiB + 80%.
  void SetUp() override {
    nodes_["node-a"] = std::make_unique<Daemon>("1xH100-80GB", MetricsArgs());
    nodes_["node-b"] = std::make_unique<Daemon>("2xH100-80GB", MetricsArgs());
    nodes_["node-c"] = std::make_unique<Daemon>("1xH100-80GB", MetricsArgs());
    std::string nodes_file_text = "# node name: its gpusliced's metrics listener\n";
    for (auto& [name, d] : nodes_) {
      ASSERT_TRUE(d->Start()) << name << ": " << ReadFile(d->dir() + "/daemon.log");
      const std::string addr_file = d->state_dir() + "/metrics.addr";
      ASSERT_TRUE(Daemon::WaitFor([&] { return !Trim(ReadFile(addr_file)).empty(); }, 20));
      addrs_[name] = Trim(ReadFile(addr_file));
      nodes_file_text += name + ": http://" + addrs_[name] + "\n";
    }
    Load("node-a", "40GiB", "50%");
    Load("node-c", "70GiB", "80%");

    dir_ = nodes_["node-a"]->dir();
    const std::string nodes_file = dir_ + "/nodes.yaml";
    std::ofstream(nodes_file) << nodes_file_text;
    std::ofstream(dir_ + "/token") << "secret-token\n";
    extender_ = Launch("extender", {"--nodes-file", nodes_file}, &url_);
    ASSERT_GT(extender_, 0);
    // Every node reported, with its load.
    ASSERT_TRUE(Daemon::WaitFor([&] {
      auto h = Get(url_ + "/healthz");
      return h.ok() && json::parse(h->body, nullptr, false).value("nodes_reporting", 0) == 3;
    })) << ReadFile(dir_ + "/extender.log");
  }
  void TearDown() override {
    for (pid_t p : {extender_, second_}) {
      if (p > 0) {
        kill(p, SIGTERM);
        int status;
        waitpid(p, &status, 0);
      }
    }
  }

  // Starts an extender named `name` (its log and address files in dir_)
  // with `extra` arguments; its URL in *url.
  pid_t Launch(const std::string& name, const std::vector<std::string>& extra, std::string* url) {
    const std::string addr_file = dir_ + "/" + name + ".addr";
    std::vector<std::string> argv = {GPUSLICE_E2E_EXTENDER,
                                     "--listen",
                                     "127.0.0.1:0",
                                     "--address-file",
                                     addr_file,
                                     "--poll-interval-ms",
                                     "200",
                                     "--stale-after-ms",
                                     "2000",
                                     "--kube-api",
                                     api_.url(),
                                     "--kube-token-file",
                                     dir_ + "/token"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    pid_t pid = fork();
    if (pid == 0) {
      int fd = open((dir_ + "/" + name + ".log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      std::vector<char*> a;
      for (auto& s : argv) a.push_back(s.data());
      a.push_back(nullptr);
      execv(a[0], a.data());
      _exit(127);
    }
    if (!Daemon::WaitFor([&] { return !Trim(ReadFile(addr_file)).empty(); }, 20)) {
      ADD_FAILURE() << ReadFile(dir_ + "/" + name + ".log");
      return pid;
    }
    *url = "http://" + Trim(ReadFile(addr_file));
    return pid;
  }

  static std::vector<std::string> MetricsArgs() { return {"--metrics-listen", "127.0.0.1:0"}; }

  void Load(const std::string& node, const std::string& mem, const std::string& compute) {
    Daemon& d = *nodes_[node];
    CliResult s = d.Cli({"submit", "--mem", mem, "--compute", compute, "--", "sleep", "600"});
    ASSERT_EQ(s.exit_code, 0) << s.err;
    const std::string id = Trim(s.out);
    ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, id) == "running"; })) << State(d, id);
    // The node's own report shows it before the test goes on.
    ASSERT_TRUE(Daemon::WaitFor([&] {
      auto r = Get("http://" + addrs_[node] + "/v1/node");
      if (!r.ok() || r->status != 200) return false;
      json j = json::parse(r->body, nullptr, false);
      return j.is_object() && j["gpus"][0]["compute_allocated_milli"].get<int>() > 0;
    }));
  }

  json Post(const std::string& verb, const json& body, int want_status = 200) {
    HttpRequest r;
    r.method = "POST";
    r.url = url_ + "/" + verb;
    r.body = body.dump();
    r.headers = {{"Content-Type", "application/json"}};
    auto resp = Fetch(r);
    EXPECT_TRUE(resp.ok()) << resp.status().ToString();
    if (!resp.ok()) return json();
    EXPECT_EQ(resp->status, want_status) << resp->body;
    return json::parse(resp->body, nullptr, false);
  }
  // kube-scheduler's body with nodeCacheCapable: true.
  json Args(const json& pod, const std::vector<std::string>& nodes) {
    return {{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", nodes}};
  }
  std::vector<std::string> Passed(const json& result) {
    std::vector<std::string> out;
    for (const json& n : result["NodeNames"]) out.push_back(n.get<std::string>());
    return out;
  }
  std::map<std::string, int64_t> Scores(const json& result) {
    std::map<std::string, int64_t> out;
    for (const json& h : result) out[h["Host"].get<std::string>()] = h["Score"].get<int64_t>();
    return out;
  }
  json Bind(const std::string& pod, const std::string& node) {
    return Post(
        "bind",
        {{"PodName", pod}, {"PodNamespace", "ml"}, {"PodUID", "uid-" + pod}, {"Node", node}});
  }

  std::map<std::string, std::unique_ptr<Daemon>> nodes_;
  std::map<std::string, std::string> addrs_;
  FakeApiServer api_;
  std::string dir_;
  std::string url_;
  pid_t extender_ = -1;
  pid_t second_ = -1;
  const std::vector<std::string> all_ = {"node-a", "node-b", "node-c"};
};

TEST_F(ExtenderE2e, APodLandsWhereItsFractionFitsAndFullNodesSayWhy) {
  // 60 GiB + 60%: only node-b's idle GPUs hold it.
  json r = Post("filter", Args(Pod("big", Fraction(60, 60)), all_));
  EXPECT_EQ(Passed(r), std::vector<std::string>{"node-b"}) << r.dump();
  EXPECT_EQ(r["Error"], "");
  const std::string why_a = r["FailedNodes"]["node-a"];
  EXPECT_NE(why_a.find("needs 60 GiB + 60 percent on one GPU"), std::string::npos) << why_a;
  EXPECT_NE(why_a.find("most free on one GPU: 40 GiB + 50 percent"), std::string::npos) << why_a;
  const std::string why_c = r["FailedNodes"]["node-c"];
  EXPECT_NE(why_c.find("most free on one GPU: 10 GiB + 20 percent"), std::string::npos) << why_c;
}

TEST_F(ExtenderE2e, TheNodeListFormIsAnsweredWithTheNodesThatPassed) {
  json items = json::array();
  for (const std::string& n : all_) {
    items.push_back({{"metadata", {{"name", n}}},
                     {"status",
                      {{"addresses", {{{"type", "InternalIP"}, {"address", "127.0.0.1"}}}},
                       {"allocatable", {{"cpu", "64"}}}}}});
  }
  json r = Post("filter", {{"Pod", Pod("mid", Fraction(30, 40))},
                           {"Nodes", {{"metadata", json::object()}, {"items", items}}},
                           {"NodeNames", nullptr}});
  ASSERT_TRUE(r["Nodes"].is_object()) << r.dump();
  std::vector<std::string> names;
  for (const json& n : r["Nodes"]["items"]) names.push_back(n["metadata"]["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"node-a", "node-b"}));
  EXPECT_EQ(r["Nodes"]["items"][0]["status"]["allocatable"]["cpu"], "64") << "Nodes echoed whole";
  EXPECT_TRUE(r["FailedNodes"].contains("node-c"));
}

// An extender that knows no node yet (no nodes file: it learns addresses
// from the Node objects kube-scheduler sends) polls a node first seen in a
// request before answering: the first pods after it starts are placed, not
// failed as "unknown" and left unschedulable for a minute.
TEST_F(ExtenderE2e, ANodeFirstSeenInARequestIsPolledBeforeTheAnswer) {
  const std::string port = addrs_["node-b"].substr(addrs_["node-b"].rfind(':') + 1);
  std::string url;
  second_ = Launch("learning", {"--daemon-port", port}, &url);
  json node = {{"metadata", {{"name", "node-b"}}},
               {"status", {{"addresses", {{{"type", "InternalIP"}, {"address", "127.0.0.1"}}}}}}};
  HttpRequest req;
  req.method = "POST";
  req.url = url + "/filter";
  req.headers = {{"Content-Type", "application/json"}};
  req.body = json{
      {"Pod", Pod("first", Fraction(30, 40))},
      {"Nodes", {{"metadata", json::object()}, {"items", {node}}}},
      {"NodeNames",
       nullptr}}.dump();
  req.timeout = std::chrono::milliseconds(10000);
  auto r = Fetch(req);
  ASSERT_TRUE(r.ok()) << r.status().message();
  json j = json::parse(r->body);
  ASSERT_TRUE(j["Nodes"].is_object()) << j.dump();
  ASSERT_EQ(j["Nodes"]["items"].size(), 1u) << j.dump();
  EXPECT_EQ(j["Nodes"]["items"][0]["metadata"]["name"], "node-b");
}

TEST_F(ExtenderE2e, TheLeastFragmentingNodeScoresHighest) {
  // 40 GiB + 50% fills node-a's free half exactly; on node-b it would cut an
  // idle GPU in half.
  json pod = Pod("half", Fraction(40, 50));
  json f = Post("filter", Args(pod, all_));
  EXPECT_EQ(Passed(f), (std::vector<std::string>{"node-a", "node-b"}));
  auto s = Scores(Post("prioritize", Args(pod, Passed(f))));
  EXPECT_EQ(s["node-a"], 10);
  EXPECT_LT(s["node-b"], 10);
}

TEST_F(ExtenderE2e, BackToBackBindsDoNotOvercommitOneGpuAndPostBindings) {
  std::set<std::string> gpus;
  for (const char* name : {"p1", "p2"}) {
    json pod = Pod(name, Fraction(50, 60));
    ASSERT_EQ(Passed(Post("filter", Args(pod, {"node-b"}))), std::vector<std::string>{"node-b"});
    json b = Bind(name, "node-b");
    EXPECT_EQ(b["Error"], "") << b.dump();
  }
  // The daemon has not seen the pods (no kubelet here): the extender's own
  // hold keeps a third off both GPUs.
  json r = Post("filter", Args(Pod("p3", Fraction(50, 60)), {"node-b"}));
  EXPECT_TRUE(Passed(r).empty()) << r.dump();
  json b = Bind("p3", "node-b");
  EXPECT_NE(b["Error"].get<std::string>().find("no longer fits"), std::string::npos) << b.dump();

  int bindings = 0;
  for (const auto& req : api_.requests()) {
    EXPECT_EQ(req.authorization, "Bearer secret-token");
    if (req.method == "PATCH") {
      json patch = json::parse(req.body);
      json assigned = json::parse(
          patch["metadata"]["annotations"]["gpuslice.dev/assigned-gpus"].get<std::string>());
      gpus.insert(assigned["main"][0].get<std::string>());
      EXPECT_EQ(patch["metadata"]["annotations"]["gpuslice.dev/assigned-node"], "node-b");
    }
    if (req.method != "POST") continue;
    ++bindings;
    json body = json::parse(req.body);
    const std::string pod = body["metadata"]["name"];
    EXPECT_EQ(req.target, "/api/v1/namespaces/ml/pods/" + pod + "/binding");
    EXPECT_EQ(body["kind"], "Binding");
    EXPECT_EQ(body["metadata"]["uid"], "uid-" + pod);
    EXPECT_EQ(body["target"], json::parse(R"({"apiVersion":"v1","kind":"Node","name":"node-b"})"));
  }
  EXPECT_EQ(bindings, 2);
  EXPECT_EQ(gpus.size(), 2u) << "one GPU each";
}

TEST_F(ExtenderE2e, ShareWithoutMemoryIsRefusedOnEveryNode) {
  json r = Post("filter", Args(Pod("bad", {{"gpuslice.dev/gpu-share", "30"}}), all_));
  EXPECT_TRUE(Passed(r).empty());
  ASSERT_EQ(r["FailedAndUnresolvableNodes"].size(), 3u) << r.dump();
  for (const auto& [node, why] : r["FailedAndUnresolvableNodes"].items()) {
    EXPECT_NE(why.get<std::string>().find("gpu-share needs gpuslice.dev/gpu-memory"),
              std::string::npos);
  }
  // Bad JSON: a clear error, 400.
  HttpRequest bad;
  bad.method = "POST";
  bad.url = url_ + "/filter";
  bad.body = "{nope";
  auto resp = Fetch(bad);
  ASSERT_TRUE(resp.ok());
  EXPECT_EQ(resp->status, 400);
  EXPECT_NE(json::parse(resp->body)["Error"].get<std::string>().find("not JSON"),
            std::string::npos);
}

TEST_F(ExtenderE2e, AStoppedDaemonMakesItsNodeFailAsStale) {
  json pod = Pod("small", Fraction(4, 10));
  ASSERT_EQ(Passed(Post("filter", Args(pod, all_))).size(), 3u);
  nodes_["node-a"]->Kill(SIGKILL);
  json r;
  ASSERT_TRUE(Daemon::WaitFor(
      [&] {
        r = Post("filter", Args(pod, all_));
        return r["FailedNodes"].contains("node-a");
      },
      20));
  const std::string why = r["FailedNodes"]["node-a"];
  EXPECT_NE(why.find("stale"), std::string::npos) << why;
  EXPECT_EQ(Passed(r), (std::vector<std::string>{"node-b", "node-c"}));
}

}  // namespace
}  // namespace gpuslice::e2e

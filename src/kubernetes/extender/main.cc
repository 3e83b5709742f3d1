// gpuslice-scheduler-extender: kube-scheduler's HTTP extender for gpuslice
// (docs/KUBERNETES-extender.md).

#include <signal.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <thread>

#include "core/placement/placement_policy.h"
#include "kubernetes/extender/placement/extender.h"
#include "kubernetes/extender/server/extender_http.h"
#include "kubernetes/extender/kube/kube_api.h"
#include "kubernetes/extender/kube/node_poller.h"
#include "kubernetes/extender/server/webhook_server.h"

namespace gk = gpuslice::kubernetes;

namespace {

int64_t MonotonicMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int Fail(const std::string& message) {
  std::cerr << "gpuslice-scheduler-extender: " << message << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "gpuslice's kube-scheduler extender: filter, prioritize and bind for pods asking "
      "for gpuslice.dev/ resources"};
  // Loopback: bind acts with the extender's credentials, so only kube-scheduler
  // beside it should reach the verbs.
  std::string listen = "127.0.0.1:8888";
  std::string address_file;
  std::string nodes_file;
  int daemon_port = 9400;
  int64_t poll_ms = 1000, stale_ms = 5000, assume_ms = 30000;
  std::string policy_name(gpuslice::core::PolicyName(gpuslice::core::kDefaultPolicy));
  gk::KubeApiOptions kube = gk::InClusterOptions();
  bool no_kube = false;
  std::string webhook_listen;
  gk::WebhookServerOptions webhook;
  app.add_option("--listen", listen, "HOST:PORT for kube-scheduler (port 0 picks one)");
  app.add_option("--address-file", address_file, "write the bound HOST:PORT here");
  app.add_option("--nodes-file", nodes_file,
                 "node name -> base URL of its gpusliced metrics listener (JSON or YAML)");
  app.add_option("--daemon-port", daemon_port,
                 "port of gpusliced --metrics-listen on nodes known by InternalIP only (0: none)");
  app.add_option("--poll-interval-ms", poll_ms, "how often every node is polled");
  app.add_option("--stale-after-ms", stale_ms, "a node not heard from for this long fails filter");
  app.add_option("--assume-ttl-ms", assume_ms, "how long a bound pod's GPUs are held unreported");
  app.add_option("--policy", policy_name, "placement policy (frag-aware, fgd, binpack, spread...)");
  app.add_option("--kube-api", kube.base_url, "API server URL (default: in-cluster)");
  app.add_option("--kube-token-file", kube.token_file, "bearer token file (\"\": none)");
  app.add_option("--kube-ca-file", kube.ca_file, "CA bundle for the API server");
  app.add_flag("--kube-insecure", kube.insecure_skip_verify,
               "do not check the API server's certificate (testing only)");
  app.add_flag("--no-kube-api", no_kube, "bind verb only holds GPUs; no API calls (testing)");
  app.add_option("--webhook-listen", webhook_listen,
                 "HOST:PORT for the admission webhook and /healthz over HTTPS (default: off)");
  app.add_option("--webhook-cert", webhook.cert_file, "the webhook's certificate chain (PEM)");
  app.add_option("--webhook-key", webhook.key_file, "the webhook's private key (PEM)");
  app.add_option("--webhook-scheduler-name", webhook.scheduler_name,
                 "the schedulerName the webhook gives pods asking for gpuslice.dev/ resources");
  CLI11_PARSE(app, argc, argv);

  auto policy = gpuslice::core::ParsePolicy(policy_name);
  if (!policy.ok()) return Fail(policy.status().message());
  if (*policy == gpuslice::core::Policy::kRandomFit) return Fail("--policy random-fit is refused");
  std::map<std::string, std::string> nodes;
  if (!nodes_file.empty()) {
    std::ifstream in(nodes_file);
    if (!in) return Fail("cannot read --nodes-file '" + nodes_file + "'");
    std::stringstream ss;
    ss << in.rdbuf();
    auto parsed = gk::ParseNodesFile(ss.str());
    if (!parsed.ok()) return Fail(parsed.status().message());
    nodes = std::move(*parsed);
  }
  if (!webhook_listen.empty() && (webhook.cert_file.empty() || webhook.key_file.empty())) {
    return Fail("--webhook-listen needs --webhook-cert and --webhook-key");
  }
  if (webhook.scheduler_name.empty()) return Fail("--webhook-scheduler-name is empty");
  if (!no_kube && kube.base_url.empty()) {
    return Fail(
        "no API server: not in a cluster (KUBERNETES_SERVICE_HOST unset); give --kube-api "
        "or --no-kube-api");
  }

  // Block the stop signals before any thread starts, so only sigwait sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  gk::KubeApi api(kube);
  gk::ExtenderOptions eo;
  eo.stale_after_ms = stale_ms;
  eo.assume_ttl_ms = assume_ms;
  eo.policy = *policy;
  gk::Extender extender(eo, MonotonicMs, no_kube ? nullptr : &api);
  gk::PollerOptions po;
  po.interval = std::chrono::milliseconds(poll_ms);
  po.daemon_port = daemon_port;
  gk::NodePoller poller(
      po, nodes, [&](gk::SnapshotPtr s) { extender.Publish(std::move(s)); }, MonotonicMs);
  gk::ExtenderServer server(extender, &poller);
  auto bound = server.Listen(listen);
  if (!bound.ok()) return Fail(bound.status().message());
  if (!address_file.empty()) {
    std::ofstream out(address_file + ".tmp");
    out << *bound << "\n";
    out.close();
    if (std::rename((address_file + ".tmp").c_str(), address_file.c_str()) != 0) {
      return Fail("cannot write --address-file '" + address_file + "'");
    }
  }
  std::unique_ptr<gk::WebhookServer> webhook_server;
  if (!webhook_listen.empty()) {
    webhook_server = std::make_unique<gk::WebhookServer>(extender, webhook);
    auto wbound = webhook_server->Listen(webhook_listen);
    if (!wbound.ok()) return Fail(wbound.status().message());
    std::cerr << "gpuslice-scheduler-extender: admission webhook on https://" << *wbound
              << "/mutate (schedulerName " << webhook.scheduler_name << ")\n";
  }
  std::cerr << "gpuslice-scheduler-extender: listening on http://" << *bound << " (" << nodes.size()
            << " nodes from --nodes-file, policy " << gpuslice::core::PolicyName(*policy) << ")\n";
  poller.Start();
  std::thread webhook_thread;
  if (webhook_server) webhook_thread = std::thread([&] { webhook_server->Run(); });
  std::thread stopper([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    server.Stop();
    if (webhook_server) webhook_server->Stop();
  });
  server.Run();
  if (webhook_thread.joinable()) webhook_thread.join();
  poller.Stop();
  stopper.join();
  return 0;
}

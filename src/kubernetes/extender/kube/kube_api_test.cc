#include "kubernetes/extender/kube/kube_api.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "kubernetes/extender/kube/http_client.h"

namespace gpuslice::kubernetes {
namespace {

using nlohmann::json;

TEST(KubeApi, TheBindingBodyIsAV1BindingToANode) {
  json b = BindingBody("ns", "pod-1", "uid-1", "node-a");
  EXPECT_EQ(b, json::parse(R"({"apiVersion": "v1", "kind": "Binding",
    "metadata": {"name": "pod-1", "namespace": "ns", "uid": "uid-1"},
    "target": {"apiVersion": "v1", "kind": "Node", "name": "node-a"}})"));
  EXPECT_FALSE(BindingBody("ns", "p", "", "n")["metadata"].contains("uid"));
}

TEST(KubeApi, InClusterDefaultsComeFromTheServiceEnvironment) {
  setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
  setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  KubeApiOptions o = InClusterOptions();
  EXPECT_EQ(o.base_url, "https://10.96.0.1:443");
  EXPECT_EQ(o.token_file, "/var/run/secrets/kubernetes.io/serviceaccount/token");
  EXPECT_EQ(o.ca_file, "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt");
  setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
  EXPECT_EQ(InClusterOptions().base_url, "https://[fd00::1]:443");
  unsetenv("KUBERNETES_SERVICE_HOST");
  EXPECT_EQ(InClusterOptions().base_url, "");
}

TEST(KubeApi, NamesThatWouldChangeThePathAreRefusedBeforeAnyCall) {
  KubeApiOptions o;
  o.base_url = "http://127.0.0.1:1";
  KubeApi api(o);
  core::Status s = api.Bind("ns", "../nodes/x", "", "n");
  EXPECT_EQ(s.code(), core::StatusCode::kInvalidArgument);
  EXPECT_EQ(KubeApi({}).Bind("ns", "p", "", "n").code(), core::StatusCode::kFailedPrecondition);
}

TEST(HttpClient, ParsesUrls) {
  auto u = ParseUrl("https://[fd00::1]:6443/api");
  ASSERT_TRUE(u.ok());
  EXPECT_TRUE(u->https);
  EXPECT_EQ(u->host, "fd00::1");
  EXPECT_EQ(u->port, "6443");
  EXPECT_EQ(u->path, "/api");
  u = ParseUrl("http://h");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->port, "80");
  EXPECT_EQ(u->path, "/");
  EXPECT_FALSE(ParseUrl("ftp://h").ok());
  EXPECT_FALSE(ParseUrl("http://:80").ok());
  EXPECT_FALSE(ParseUrl("http://h:99999").ok());
}

TEST(HttpClient, ADeadPeerIsAnErrorNotAHang) {
  HttpRequest r;
  r.url = "http://127.0.0.1:1/v1/node";  // Nothing listens on port 1.
  r.timeout = std::chrono::milliseconds(500);
  auto resp = Fetch(r);
  ASSERT_FALSE(resp.ok());
  EXPECT_NE(resp.status().message().find("127.0.0.1:1"), std::string::npos);
}

}  // namespace
}  // namespace gpuslice::kubernetes

#include "kubernetes/extender/server/webhook.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "kubernetes/extender/kube/http_client.h"
#include "kubernetes/extender/server/webhook_server.h"

namespace gpuslice::kubernetes {
namespace {

using nlohmann::json;

json Review(const json& pod, const std::string& operation = "CREATE") {
  return {{"apiVersion", "admission.k8s.io/v1"},
          {"kind", "AdmissionReview"},
          {"request",
           {{"uid", "705ab4f5-6393-11e8-b7cc-42010a800002"},
            {"kind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
            {"resource", {{"group", ""}, {"version", "v1"}, {"resource", "pods"}}},
            {"operation", operation},
            {"object", pod}}}};
}

json PodAsking(const json& limits, const json& scheduler = "default-scheduler") {
  json spec = {{"containers", {{{"name", "main"}, {"resources", {{"limits", limits}}}}}}};
  if (!scheduler.is_null()) spec["schedulerName"] = scheduler;
  return {{"metadata", {{"name", "p"}, {"namespace", "team"}}}, {"spec", spec}};
}

std::string Unbase64(const std::string& in) {
  static const std::string kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    acc = (acc << 6) | static_cast<uint32_t>(kAlphabet.find(c));
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

// The response of one review, and its decoded patch (null when none).
std::pair<json, json> Answer(const json& review) {
  HttpAnswer a = HandleAdmissionReview(review.dump(), "gpuslice-scheduler");
  EXPECT_EQ(a.status, 200) << a.body;
  json r = json::parse(a.body);
  EXPECT_EQ(r["apiVersion"], "admission.k8s.io/v1");
  EXPECT_EQ(r["kind"], "AdmissionReview");
  EXPECT_EQ(r["response"]["uid"], review["request"]["uid"]);
  EXPECT_EQ(r["response"]["allowed"], true);
  json patch;
  if (r["response"].contains("patch")) {
    EXPECT_EQ(r["response"]["patchType"], "JSONPatch");
    patch = json::parse(Unbase64(r["response"]["patch"].get<std::string>()));
  }
  return {r["response"], patch};
}

TEST(Webhook, APodAskingForASliceOfTheDefaultSchedulerGetsGpuslicesScheduler) {
  auto [response, patch] = Answer(Review(PodAsking({{"gpuslice.dev/gpu-memory", "4"}})));
  EXPECT_EQ(patch, json::parse(R"([{"op": "replace", "path": "/spec/schedulerName",
                                    "value": "gpuslice-scheduler"}])"));
}

TEST(Webhook, APodWithNoSchedulerNameGetsOneAdded) {
  auto [response, patch] =
      Answer(Review(PodAsking({{"gpuslice.dev/gpu", 1}}, /*scheduler=*/nullptr)));
  EXPECT_EQ(patch, json::parse(R"([{"op": "add", "path": "/spec/schedulerName",
                                    "value": "gpuslice-scheduler"}])"));
}

TEST(Webhook, AnInitContainersAskIsEnough) {
  json pod = PodAsking({{"cpu", "1"}});
  pod["spec"]["initContainers"] = {
      {{"name", "warm"}, {"resources", {{"limits", {{"gpuslice.dev/gpu-memory", "2"}}}}}}};
  EXPECT_FALSE(Answer(Review(pod)).second.is_null());
}

TEST(Webhook, PodsThatNameAnotherSchedulerOrAskForNoSliceAreLeftAlone) {
  EXPECT_TRUE(Answer(Review(PodAsking({{"gpuslice.dev/gpu-memory", "4"}}, "my-scheduler")))
                  .second.is_null());
  EXPECT_TRUE(Answer(Review(PodAsking({{"nvidia.com/gpu", "1"}}))).second.is_null());
  EXPECT_TRUE(
      Answer(Review(PodAsking({{"gpuslice.dev/gpu-memory", "4"}}), "UPDATE")).second.is_null());
  json binding = Review(PodAsking({{"gpuslice.dev/gpu-memory", "4"}}));
  binding["request"]["subResource"] = "binding";
  EXPECT_TRUE(Answer(binding).second.is_null());
  json deployment = Review(PodAsking({{"gpuslice.dev/gpu-memory", "4"}}));
  deployment["request"]["kind"] = {{"group", "apps"}, {"version", "v1"}, {"kind", "Deployment"}};
  EXPECT_TRUE(Answer(deployment).second.is_null());
}

TEST(Webhook, APodWhoseAskIsWrongIsAdmittedForTheExtenderToExplain) {
  // A share without memory: the extender's filter refuses it with the reason.
  auto [response, patch] = Answer(Review(PodAsking({{"gpuslice.dev/gpu-share", "30"}})));
  EXPECT_EQ(response["allowed"], true);
  EXPECT_FALSE(patch.is_null());
}

TEST(Webhook, BodiesThatAreNotV1ReviewsGet400WithTheReason) {
  EXPECT_EQ(HandleAdmissionReview("{", "s").status, 400);
  json v1beta1 = Review(PodAsking({{"gpuslice.dev/gpu-memory", "4"}}));
  v1beta1["apiVersion"] = "admission.k8s.io/v1beta1";
  HttpAnswer a = HandleAdmissionReview(v1beta1.dump(), "s");
  EXPECT_EQ(a.status, 400);
  EXPECT_NE(a.body.find("must ask for v1"), std::string::npos) << a.body;
  json no_uid = Review(PodAsking({}));
  no_uid["request"].erase("uid");
  EXPECT_EQ(HandleAdmissionReview(no_uid.dump(), "s").status, 400);
  json odd = Review(PodAsking({}));
  odd["request"]["operation"] = 7;  // A field of another type is not trusted, nor thrown on.
  EXPECT_EQ(HandleAdmissionReview(odd.dump(), "s").status, 200);
}

TEST(Webhook, Base64IsRfc4648s) {
  const std::pair<const char*, const char*> kVectors[] = {{"", ""},
                                                          {"f", "Zg=="},
                                                          {"fo", "Zm8="},
                                                          {"foo", "Zm9v"},
                                                          {"foob", "Zm9vYg=="},
                                                          {"fooba", "Zm9vYmE="},
                                                          {"foobar", "Zm9vYmFy"}};
  for (const auto& [in, out] : kVectors) EXPECT_EQ(Base64(in), out) << in;
  EXPECT_EQ(Base64(std::string("\xff\xfe\x00", 3)), "//4A");
}

// A self-signed certificate for 127.0.0.1 and its key, as PEM files.
void WriteSelfSigned(const std::string& cert_path, const std::string& key_path,
                     const char* common_name) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  ASSERT_NE(key, nullptr);
  X509* cert = X509_new();
  ASSERT_EQ(X509_set_version(cert, 2), 1);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), static_cast<long>(getpid()));
  X509_gmtime_adj(X509_getm_notBefore(cert), -60);
  X509_gmtime_adj(X509_getm_notAfter(cert), 3600);
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(common_name), -1, -1, 0);
  X509_set_issuer_name(cert, name);
  X509_set_pubkey(cert, key);
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  X509_EXTENSION* san = X509V3_EXT_conf_nid(nullptr, &ctx, NID_subject_alt_name, "IP:127.0.0.1");
  X509_add_ext(cert, san, -1);
  X509_EXTENSION_free(san);
  X509_EXTENSION* bc = X509V3_EXT_conf_nid(nullptr, &ctx, NID_basic_constraints, "CA:TRUE");
  X509_add_ext(cert, bc, -1);
  X509_EXTENSION_free(bc);
  ASSERT_GT(X509_sign(cert, key, EVP_sha256()), 0);
  FILE* f = std::fopen(cert_path.c_str(), "w");
  PEM_write_X509(f, cert);
  std::fclose(f);
  f = std::fopen(key_path.c_str(), "w");
  PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(f);
  X509_free(cert);
  EVP_PKEY_free(key);
}

class WebhookServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-webhook-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  core::Result<HttpResponse> Get(const std::string& addr, const std::string& path,
                                 const std::string& ca, const std::string& method = "GET",
                                 const std::string& body = "") {
    HttpRequest r;
    r.method = method;
    r.url = "https://" + addr + path;
    r.ca_file = ca;
    r.body = body;
    r.timeout = std::chrono::milliseconds(5000);
    return Fetch(r);
  }
  std::string dir_;
  Extender ex_{ExtenderOptions{}, [] { return int64_t{0}; }, nullptr};
};

TEST_F(WebhookServerTest, AKeyOrCertificateThatDoesNotLoadIsNamedAtStart) {
  WebhookServer server(ex_, {dir_ + "/none.crt", dir_ + "/none.key", "s"});
  auto r = server.Listen("127.0.0.1:0");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("none.crt"), std::string::npos) << r.status().message();
}

TEST_F(WebhookServerTest, ServesMutateAndHealthzOverTlsAndPicksUpARenewedCertificate) {
  const std::string crt = dir_ + "/tls.crt", key = dir_ + "/tls.key";
  WriteSelfSigned(crt, key, "first");
  std::filesystem::copy_file(crt, dir_ + "/first.crt");
  WebhookServer server(ex_, {crt, key, "gpuslice-scheduler"});
  auto addr = server.Listen("127.0.0.1:0");
  ASSERT_TRUE(addr.ok()) << addr.status().message();
  std::thread t([&] { server.Run(); });

  auto health = Get(*addr, "/healthz", crt);
  ASSERT_TRUE(health.ok()) << health.status().message();
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(json::parse(health->body)["status"], "ok");
  auto mutate = Get(*addr, "/mutate", crt, "POST",
                    Review(PodAsking({{"gpuslice.dev/gpu-memory", "4"}})).dump());
  ASSERT_TRUE(mutate.ok()) << mutate.status().message();
  EXPECT_EQ(json::parse(mutate->body)["response"]["patchType"], "JSONPatch");
  auto verbs = Get(*addr, "/bind", crt, "POST", "{}");
  ASSERT_TRUE(verbs.ok());
  EXPECT_EQ(verbs->status, 404);  // The verbs are not served on this listener.

  // Renewed as the kubelet does it: new files in place of the old.
  WriteSelfSigned(dir_ + "/new.crt", dir_ + "/new.key", "second");
  std::filesystem::rename(dir_ + "/new.crt", crt);
  std::filesystem::rename(dir_ + "/new.key", key);
  auto renewed = Get(*addr, "/healthz", crt);
  ASSERT_TRUE(renewed.ok()) << renewed.status().message();
  EXPECT_FALSE(Get(*addr, "/healthz", dir_ + "/first.crt").ok());

  server.Stop();
  t.join();
}

}  // namespace
}  // namespace gpuslice::kubernetes

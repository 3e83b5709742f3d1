#include "kubernetes/extender/server/extender_http.h"

#include <gtest/gtest.h>

#include <memory>

namespace gpuslice::kubernetes {
namespace {

using nlohmann::json;

class ExtenderHttpTest : public ::testing::Test {
 protected:
  ExtenderHttpTest()
      : ex_(
            ExtenderOptions{}, [] { return int64_t{1000}; }, nullptr) {
    auto snap = std::make_shared<Snapshot>();
    snap->generation = 1;
    NodeEntry& e = snap->nodes["n"];
    e.has_report = true;
    e.received_ms = 1000;
    GpuReport g;
    g.uuid = "GPU-0";
    g.memory_total = 80ull << 30;
    e.report.gpus.push_back(g);
    ex_.Publish(snap);
  }
  HttpAnswer Call(const std::string& method, const std::string& path, const std::string& body) {
    return HandleExtenderRequest(ex_, nullptr, method, path, body);
  }
  Extender ex_;
};

const char* kArgs = R"({"Pod": {"metadata": {"name": "p", "uid": "u"}, "spec": {"containers": [
    {"name": "c", "resources": {"limits": {"gpuslice.dev/gpu-memory": "8",
                                           "gpuslice.dev/gpu-share": "25"}}}]}},
  "NodeNames": ["n", "gone"]})";

TEST_F(ExtenderHttpTest, FilterPrioritizeAndBindAnswerInKubeSchedulersShapes) {
  HttpAnswer f = Call("POST", "/filter", kArgs);
  ASSERT_EQ(f.status, 200) << f.body;
  json fj = json::parse(f.body);
  EXPECT_EQ(fj["NodeNames"], json({"n"}));
  EXPECT_TRUE(fj["FailedNodes"].contains("gone"));
  HttpAnswer p = Call("POST", "/prioritize", kArgs);
  ASSERT_EQ(p.status, 200);
  EXPECT_EQ(json::parse(p.body),
            json::parse(R"([{"Host": "n", "Score": 10}, {"Host": "gone", "Score": 0}])"));
  HttpAnswer b = Call("POST", "/bind",
                      R"({"PodName": "p", "PodNamespace": "default", "PodUID": "u", "Node": "n"})");
  ASSERT_EQ(b.status, 200);
  EXPECT_EQ(json::parse(b.body)["Error"], "");
  HttpAnswer h = Call("GET", "/healthz", "");
  EXPECT_EQ(json::parse(h.body)["assumed"], 1);
}

TEST_F(ExtenderHttpTest, BadBodiesGet400WithTheReasonWhereTheVerbCarriesErrors) {
  HttpAnswer f = Call("POST", "/filter", "{");
  EXPECT_EQ(f.status, 400);
  EXPECT_NE(json::parse(f.body)["Error"].get<std::string>().find("not JSON"), std::string::npos);
  HttpAnswer p = Call("POST", "/prioritize", "[]");
  EXPECT_EQ(p.status, 400);
  EXPECT_TRUE(json::parse(p.body).contains("error"));
  HttpAnswer b = Call("POST", "/bind", "{}");
  EXPECT_EQ(b.status, 400);
  EXPECT_NE(json::parse(b.body)["Error"].get<std::string>().find("PodName"), std::string::npos);
}

TEST_F(ExtenderHttpTest, UnknownRoutesAre404AndWrongMethods405) {
  EXPECT_EQ(Call("GET", "/filter", "").status, 405);
  EXPECT_EQ(Call("POST", "/preempt", "{}").status, 404);
  EXPECT_EQ(Call("GET", "/healthz?verbose=1", "").status, 200);
}

}  // namespace
}  // namespace gpuslice::kubernetes

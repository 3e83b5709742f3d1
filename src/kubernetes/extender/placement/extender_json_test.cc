#include "kubernetes/extender/placement/extender_json.h"

#include <gtest/gtest.h>

namespace gpuslice::kubernetes {
namespace {

using nlohmann::json;

// As kube-scheduler sends it with nodeCacheCapable: false (Go field names,
// full Node objects).
const char* kNodeListArgs = R"({
  "Pod": {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
          "spec": {"containers": [{"name": "c"}]}},
  "Nodes": {"metadata": {}, "items": [
    {"metadata": {"name": "node-a"},
     "status": {"addresses": [{"type": "Hostname", "address": "a"},
                              {"type": "InternalIP", "address": "10.0.0.1"}]}},
    {"metadata": {"name": "node-b"}, "status": {}}]},
  "NodeNames": null})";

TEST(ExtenderArgs, ReadsTheNodeListFormWithInternalIps) {
  auto a = ParseExtenderArgs(kNodeListArgs);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_TRUE(a->node_list);
  EXPECT_EQ(a->node_names, (std::vector<std::string>{"node-a", "node-b"}));
  EXPECT_EQ(a->internal_ips, (std::vector<std::string>{"10.0.0.1", ""}));
  EXPECT_EQ(a->pod["metadata"]["name"], "p");
}

TEST(ExtenderArgs, ReadsTheNodeNamesFormAndKeysInAnyCase) {
  auto a = ParseExtenderArgs(R"({"pod": {"metadata": {"name": "p"}}, "nodes": null,
                                 "nodenames": ["x", "y"]})");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_FALSE(a->node_list);
  EXPECT_EQ(a->node_names, (std::vector<std::string>{"x", "y"}));
}

TEST(ExtenderArgs, MalformedBodiesAreRefusedWithTheReason) {
  struct Case {
    const char* body;
    const char* says;
  } cases[] = {
      {"{not json", "not JSON"},
      {"[1]", "not a JSON object"},
      {R"({"NodeNames": ["a"]})", "no Pod"},
      {R"({"Pod": {}})", "neither Nodes nor NodeNames"},
      {R"({"Pod": {}, "Nodes": {"items": [{"metadata": {}}]}})", "without metadata.name"},
      {R"({"Pod": {}, "NodeNames": [""]})", "non-name"},
  };
  for (const Case& c : cases) {
    auto a = ParseExtenderArgs(c.body);
    ASSERT_FALSE(a.ok()) << c.body;
    EXPECT_NE(a.status().message().find(c.says), std::string::npos) << a.status().message();
  }
}

TEST(ExtenderFilterResult, AnswersInTheFormItWasAsked) {
  auto list = ParseExtenderArgs(kNodeListArgs);
  ASSERT_TRUE(list.ok());
  FilterAnswer answer;
  answer.pass = {false, true};
  answer.failed["node-a"] = "full";
  json j = json::parse(RenderFilterResult(*list, answer));
  ASSERT_EQ(j["Nodes"]["items"].size(), 1u);
  EXPECT_EQ(j["Nodes"]["items"][0]["metadata"]["name"], "node-b");
  EXPECT_TRUE(j["NodeNames"].is_null());
  EXPECT_EQ(j["FailedNodes"]["node-a"], "full");
  EXPECT_TRUE(j["FailedAndUnresolvableNodes"].is_object());
  EXPECT_EQ(j["Error"], "");

  ExtenderArgs names;
  names.node_names = {"x", "y", "z"};
  answer.pass = {true, false, true};
  j = json::parse(RenderFilterResult(names, answer));
  EXPECT_EQ(j["NodeNames"], json({"x", "z"}));
  EXPECT_TRUE(j["Nodes"].is_null());

  // A node that can never hold the pod is named in both maps: the reason
  // reaches kube-scheduler 1.20, which reads FailedNodes only.
  answer.unresolvable["y"] = "needs 45 GiB on one GPU; the largest has 40 GiB";
  j = json::parse(RenderFilterResult(names, answer));
  EXPECT_EQ(j["FailedAndUnresolvableNodes"]["y"], answer.unresolvable["y"]);
  EXPECT_EQ(j["FailedNodes"]["y"], answer.unresolvable["y"]);

  j = json::parse(RenderFilterError("bad"));
  EXPECT_EQ(j["Error"], "bad");
}

TEST(HostPriorityList, IsHostAndScore) {
  json j = json::parse(RenderPriorities({{"a", 10}, {"b", 0}}));
  EXPECT_EQ(j, json::parse(R"([{"Host": "a", "Score": 10}, {"Host": "b", "Score": 0}])"));
}

TEST(ExtenderBindingArgs, ReadsTheGoFieldNames) {
  auto b = ParseBindingArgs(
      R"({"PodName": "p", "PodNamespace": "ns", "PodUID": "u1", "Node": "node-a"})");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->pod_name, "p");
  EXPECT_EQ(b->pod_namespace, "ns");
  EXPECT_EQ(b->pod_uid, "u1");
  EXPECT_EQ(b->node, "node-a");
  EXPECT_FALSE(ParseBindingArgs(R"({"PodName": "p"})").ok());
  EXPECT_EQ(json::parse(RenderBindingResult("")), json::parse(R"({"Error": ""})"));
}

}  // namespace
}  // namespace gpuslice::kubernetes

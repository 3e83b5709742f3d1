#pragma once

// The wire format of kube-scheduler's HTTP extender (k8s.io/kube-scheduler
// extender/v1): the bodies it POSTs to the filter, prioritize and bind verbs
// and the answers it decodes. The Go types carry no JSON tags, so the keys
// are the Go field names ("Pod", "Nodes", "NodeNames", "FailedNodes", "Host",
// "Score", "PodName"...); Go decodes keys case-insensitively, and so do we.
//
//   ExtenderArgs          {"Pod": Pod, "Nodes": NodeList | null, "NodeNames": [..] | null}
//   ExtenderFilterResult  {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes",
//   "Error"} HostPriorityList      [{"Host": name, "Score": 0..10}] ExtenderBindingArgs {"PodName",
//   "PodNamespace", "PodUID", "Node"} ExtenderBindingResult {"Error"}

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace gpuslice::kubernetes {

// kube-scheduler's MaxExtenderPriority.
inline constexpr int64_t kMaxExtenderPriority = 10;

struct ExtenderArgs {
  nlohmann::json pod;
  std::vector<std::string> node_names;
  // The nodes came as a NodeList (nodeCacheCapable: false): the answer must
  // be a NodeList too, holding the Node objects that passed.
  bool node_list = false;
  nlohmann::json node_items;              // The NodeList's items, when node_list.
  std::vector<std::string> internal_ips;  // Per node, "" when it has none.
};

// Errors (kInvalidArgument) name what is wrong: not JSON, no Pod, neither
// Nodes nor NodeNames, a node without a name.
core::Result<ExtenderArgs> ParseExtenderArgs(std::string_view body);

struct FilterAnswer {
  std::vector<bool> pass;  // Per ExtenderArgs node.
  std::map<std::string, std::string> failed;
  std::map<std::string, std::string> unresolvable;
  std::string error;
};
std::string RenderFilterResult(const ExtenderArgs& args, const FilterAnswer& answer);
// A filter answer that is only an error (a body we could not read).
std::string RenderFilterError(const std::string& error);

std::string RenderPriorities(const std::vector<std::pair<std::string, int64_t>>& scores);

struct BindingArgs {
  std::string pod_name;
  std::string pod_namespace;
  std::string pod_uid;
  std::string node;
};
core::Result<BindingArgs> ParseBindingArgs(std::string_view body);
std::string RenderBindingResult(const std::string& error);

// The node's address of type InternalIP in a Node object, or "".
std::string InternalIp(const nlohmann::json& node);

}  // namespace gpuslice::kubernetes

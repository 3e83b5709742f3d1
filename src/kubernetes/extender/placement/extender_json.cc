#include "kubernetes/extender/placement/extender_json.h"

#include <strings.h>

namespace gpuslice::kubernetes {

using nlohmann::json;

namespace {

// j[key] as Go's decoder finds it: the exact key first, then any key equal
// ignoring case. Null when absent.
const json* Find(const json& j, const char* key) {
  auto it = j.find(key);
  if (it != j.end()) return &*it;
  for (auto i = j.begin(); i != j.end(); ++i) {
    if (strcasecmp(i.key().c_str(), key) == 0) return &*i;
  }
  return nullptr;
}

std::string StringField(const json& j, const char* key) {
  const json* v = Find(j, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}

std::string NodeName(const json& node) {
  auto meta = node.find("metadata");
  if (meta == node.end() || !meta->is_object()) return "";
  auto name = meta->find("name");
  return name != meta->end() && name->is_string() ? name->get<std::string>() : "";
}

json FailedMap(const std::map<std::string, std::string>& m) {
  json out = json::object();
  for (const auto& [k, v] : m) out[k] = v;
  return out;
}

}  // namespace

std::string InternalIp(const json& node) {
  auto status = node.find("status");
  if (status == node.end() || !status->is_object()) return "";
  auto addrs = status->find("addresses");
  if (addrs == status->end() || !addrs->is_array()) return "";
  for (const json& a : *addrs) {
    if (a.is_object() && a.value("type", "") == "InternalIP") return a.value("address", "");
  }
  return "";
}

core::Result<ExtenderArgs> ParseExtenderArgs(std::string_view body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return core::InvalidArgumentError("ExtenderArgs: the body is not JSON");
  if (!j.is_object()) return core::InvalidArgumentError("ExtenderArgs: not a JSON object");
  ExtenderArgs a;
  const json* pod = Find(j, "Pod");
  if (pod == nullptr || !pod->is_object()) {
    return core::InvalidArgumentError("ExtenderArgs: no Pod object");
  }
  a.pod = *pod;
  const json* names = Find(j, "NodeNames");
  const json* nodes = Find(j, "Nodes");
  if (names != nullptr && names->is_array()) {
    for (const json& n : *names) {
      if (!n.is_string() || n.get<std::string>().empty()) {
        return core::InvalidArgumentError("ExtenderArgs: NodeNames holds a non-name");
      }
      a.node_names.push_back(n.get<std::string>());
    }
    return a;
  }
  if (nodes != nullptr && nodes->is_object()) {
    a.node_list = true;
    const json* items = Find(*nodes, "items");
    if (items != nullptr && items->is_array()) a.node_items = *items;
    if (!a.node_items.is_array()) a.node_items = json::array();
    for (const json& n : a.node_items) {
      std::string name = n.is_object() ? NodeName(n) : "";
      if (name.empty())
        return core::InvalidArgumentError("ExtenderArgs: a Node without metadata.name");
      a.node_names.push_back(std::move(name));
      a.internal_ips.push_back(InternalIp(n));
    }
    return a;
  }
  return core::InvalidArgumentError("ExtenderArgs: neither Nodes nor NodeNames");
}

std::string RenderFilterResult(const ExtenderArgs& args, const FilterAnswer& answer) {
  // A node that can never hold the pod is in FailedNodes as well:
  // kube-scheduler before 1.21 knows no FailedAndUnresolvableNodes and
  // dropped such a node with no reason (its event read "0/2 nodes are
  // available: ."); later ones let FailedAndUnresolvableNodes win.
  json failed = FailedMap(answer.failed);
  for (const auto& [node, why] : answer.unresolvable) failed[node] = why;
  json out = {{"FailedNodes", std::move(failed)},
              {"FailedAndUnresolvableNodes", FailedMap(answer.unresolvable)},
              {"Error", answer.error}};
  if (args.node_list) {
    json items = json::array();
    for (size_t i = 0; i < args.node_names.size(); ++i) {
      if (i < answer.pass.size() && answer.pass[i]) items.push_back(args.node_items[i]);
    }
    out["Nodes"] = {{"metadata", json::object()}, {"items", std::move(items)}};
    out["NodeNames"] = nullptr;
  } else {
    json names = json::array();
    for (size_t i = 0; i < args.node_names.size(); ++i) {
      if (i < answer.pass.size() && answer.pass[i]) names.push_back(args.node_names[i]);
    }
    out["Nodes"] = nullptr;
    out["NodeNames"] = std::move(names);
  }
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string RenderFilterError(const std::string& error) {
  json out = {{"Nodes", nullptr},
              {"NodeNames", nullptr},
              {"FailedNodes", json::object()},
              {"FailedAndUnresolvableNodes", json::object()},
              {"Error", error}};
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string RenderPriorities(const std::vector<std::pair<std::string, int64_t>>& scores) {
  json out = json::array();
  for (const auto& [host, score] : scores) out.push_back({{"Host", host}, {"Score", score}});
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

core::Result<BindingArgs> ParseBindingArgs(std::string_view body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return core::InvalidArgumentError("ExtenderBindingArgs: not a JSON object");
  BindingArgs b;
  b.pod_name = StringField(j, "PodName");
  b.pod_namespace = StringField(j, "PodNamespace");
  b.pod_uid = StringField(j, "PodUID");
  b.node = StringField(j, "Node");
  if (b.pod_name.empty() || b.node.empty()) {
    return core::InvalidArgumentError("ExtenderBindingArgs: PodName and Node are required");
  }
  if (b.pod_namespace.empty()) b.pod_namespace = "default";
  return b;
}

std::string RenderBindingResult(const std::string& error) {
  return json{{"Error", error}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace gpuslice::kubernetes

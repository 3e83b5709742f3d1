#include "kubernetes/extender/kube/kube_api.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "kubernetes/extender/kube/http_client.h"

namespace gpuslice::kubernetes {

using nlohmann::json;

namespace {

constexpr const char* kServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount";

// Names and namespaces are DNS labels or subdomains; anything else in a
// path segment would change the request's target.
core::Status CheckName(const std::string& what, const std::string& v) {
  if (v.empty() || v.size() > 253)
    return core::InvalidArgumentError(what + " is empty or too long");
  for (char c : v) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.')) {
      return core::InvalidArgumentError(what + " '" + v + "' is not a Kubernetes name");
    }
  }
  return core::Status::Ok();
}

core::Result<std::string> ReadToken(const std::string& path) {
  std::ifstream in(path);
  if (!in) return core::UnavailableError("cannot read the API token file '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string token = ss.str();
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' ')) {
    token.pop_back();
  }
  return token;
}

// An API server error ("Status" object) as our Status: its message and the
// HTTP status, which is what an operator searches for.
core::Status ApiError(const std::string& what, int status, const std::string& body) {
  std::string message = body.substr(0, 300);
  json j = json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("message") && j["message"].is_string()) {
    message = j["message"].get<std::string>();
  }
  const std::string text =
      what + ": API server answered " + std::to_string(status) + ": " + message;
  switch (status) {
    case 401:
    case 403:
      return core::PermissionDeniedError(text);
    case 404:
      return core::NotFoundError(text);
    case 409:
      return core::Status(core::StatusCode::kAlreadyExists, text);
    default:
      return core::UnavailableError(text);
  }
}

}  // namespace

KubeApiOptions InClusterOptions() {
  KubeApiOptions o;
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host != nullptr && *host != '\0') {
    std::string h = host;
    if (h.find(':') != std::string::npos) h = "[" + h + "]";  // IPv6 service address.
    o.base_url = "https://" + h + ":" + (port != nullptr && *port != '\0' ? port : "443");
  }
  o.token_file = std::string(kServiceAccountDir) + "/token";
  o.ca_file = std::string(kServiceAccountDir) + "/ca.crt";
  return o;
}

json BindingBody(const std::string& ns, const std::string& name, const std::string& uid,
                 const std::string& node) {
  json meta = {{"name", name}, {"namespace", ns}};
  // With the uid the API server refuses to bind a pod of the same name that
  // replaced the one the scheduler decided for.
  if (!uid.empty()) meta["uid"] = uid;
  return {{"apiVersion", "v1"},
          {"kind", "Binding"},
          {"metadata", meta},
          {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node}}}};
}

core::Result<std::string> KubeApi::Call(const std::string& method, const std::string& path,
                                        const std::string& content_type, const std::string& body) {
  if (options_.base_url.empty()) {
    return core::FailedPreconditionError(
        "no API server: not in a cluster (KUBERNETES_SERVICE_HOST unset) and no --kube-api");
  }
  HttpRequest r;
  r.method = method;
  std::string base = options_.base_url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  r.url = base + path;
  r.body = body;
  r.timeout = options_.timeout;
  r.ca_file = options_.ca_file;
  r.insecure_skip_verify = options_.insecure_skip_verify;
  r.headers.emplace_back("Accept", "application/json");
  if (!content_type.empty()) r.headers.emplace_back("Content-Type", content_type);
  if (!options_.token_file.empty()) {
    GPUSLICE_ASSIGN_OR_RETURN(std::string token, ReadToken(options_.token_file));
    r.headers.emplace_back("Authorization", "Bearer " + token);
  }
  GPUSLICE_ASSIGN_OR_RETURN(HttpResponse resp, Fetch(r));
  if (resp.status < 200 || resp.status > 299) {
    return ApiError(method + " " + path, resp.status, resp.body);
  }
  return resp.body;
}

core::Status KubeApi::Bind(const std::string& ns, const std::string& name, const std::string& uid,
                           const std::string& node) {
  GPUSLICE_RETURN_IF_ERROR(CheckName("namespace", ns));
  GPUSLICE_RETURN_IF_ERROR(CheckName("pod name", name));
  const std::string path = "/api/v1/namespaces/" + ns + "/pods/" + name + "/binding";
  auto r = Call("POST", path, "application/json", BindingBody(ns, name, uid, node).dump());
  return r.ok() ? core::Status::Ok() : r.status();
}

core::Status KubeApi::AnnotatePod(const std::string& ns, const std::string& name,
                                  const std::map<std::string, std::string>& annotations) {
  GPUSLICE_RETURN_IF_ERROR(CheckName("namespace", ns));
  GPUSLICE_RETURN_IF_ERROR(CheckName("pod name", name));
  json patch = {{"metadata", {{"annotations", annotations}}}};
  auto r = Call("PATCH", "/api/v1/namespaces/" + ns + "/pods/" + name,
                "application/merge-patch+json", patch.dump());
  return r.ok() ? core::Status::Ok() : r.status();
}

core::Result<json> KubeApi::GetPod(const std::string& ns, const std::string& name) {
  GPUSLICE_RETURN_IF_ERROR(CheckName("namespace", ns));
  GPUSLICE_RETURN_IF_ERROR(CheckName("pod name", name));
  GPUSLICE_ASSIGN_OR_RETURN(std::string body,
                            Call("GET", "/api/v1/namespaces/" + ns + "/pods/" + name, "", ""));
  json j = json::parse(body, nullptr, false);
  if (!j.is_object()) return core::UnavailableError("GET pod " + ns + "/" + name + ": not JSON");
  return j;
}

}  // namespace gpuslice::kubernetes

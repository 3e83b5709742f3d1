#include "kubernetes/extender/server/webhook.h"

#include <nlohmann/json.hpp>

#include "kubernetes/extender/placement/pod_request.h"

namespace gpuslice::kubernetes {

using nlohmann::json;

namespace {

constexpr char kReviewVersion[] = "admission.k8s.io/v1";

HttpAnswer BadReview(const std::string& why) {
  return {400, json{{"error", "not an AdmissionReview request: " + why}}.dump()};
}

// A string member of an object; "" when absent or of another type (the
// review comes from outside: no field is trusted to have its shape).
std::string StringField(const json& object, const char* key) {
  if (!object.is_object()) return "";
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

const json& Member(const json& object, const char* key) {
  static const json kNull;
  if (!object.is_object()) return kNull;
  auto it = object.find(key);
  return it != object.end() ? *it : kNull;
}

// The patch for one pod, or null when it is to be left as it is.
json PatchFor(const json& request, const std::string& scheduler_name) {
  if (StringField(request, "operation") != "CREATE") return nullptr;
  const json& kind = Member(request, "kind");
  if (StringField(kind, "kind") != "Pod" || !StringField(kind, "group").empty()) return nullptr;
  if (!StringField(request, "subResource").empty()) return nullptr;
  const json& pod = Member(request, "object");
  auto ask = ParsePod(pod);
  if (!ask.ok() || !ask->uses_gpuslice) return nullptr;
  const json& current_json = Member(Member(pod, "spec"), "schedulerName");
  if (!current_json.is_string()) {
    return json::array(
        {{{"op", "add"}, {"path", "/spec/schedulerName"}, {"value", scheduler_name}}});
  }
  const std::string current = current_json.get<std::string>();
  if (!current.empty() && current != kDefaultSchedulerName) return nullptr;  // The user's choice.
  return json::array(
      {{{"op", "replace"}, {"path", "/spec/schedulerName"}, {"value", scheduler_name}}});
}

}  // namespace

std::string Base64(const std::string& bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (static_cast<uint8_t>(bytes[i]) << 16) |
                       (static_cast<uint8_t>(bytes[i + 1]) << 8) |
                       static_cast<uint8_t>(bytes[i + 2]);
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i < bytes.size()) {
    uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

HttpAnswer HandleAdmissionReview(const std::string& body, const std::string& scheduler_name) {
  json review = json::parse(body, nullptr, false);
  if (review.is_discarded() || !review.is_object()) return BadReview("the body is not JSON");
  if (StringField(review, "kind") != "AdmissionReview") {
    return BadReview("kind is not AdmissionReview");
  }
  if (StringField(review, "apiVersion") != kReviewVersion) {
    return BadReview("apiVersion is not " + std::string(kReviewVersion) +
                     " (the webhook configuration must ask for v1)");
  }
  const json& request = Member(review, "request");
  if (StringField(request, "uid").empty()) return BadReview("no request.uid");
  json response = {{"uid", request["uid"]}, {"allowed", true}};
  json patch = PatchFor(request, scheduler_name);
  if (!patch.is_null()) {
    response["patchType"] = "JSONPatch";
    response["patch"] = Base64(patch.dump());
  }
  return {200,
          json{{"apiVersion", kReviewVersion}, {"kind", "AdmissionReview"}, {"response", response}}
              .dump()};
}

}  // namespace gpuslice::kubernetes

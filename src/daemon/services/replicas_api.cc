#include "daemon/services/replicas_api.h"

#include "daemon/api/api_json.h"

namespace gpuslice::daemon {

using core::Result;
using nlohmann::json;

namespace {

ApiResponse Json(int status, const json& j) { return {status, j.dump(), "application/json", {}}; }
ApiResponse Error(const core::Status& s) { return Json(HttpStatusOf(s.code()), ErrorJson(s)); }

const char* StateName(core::JobState s) { return core::JobStateName(s).data(); }

}  // namespace

json ServiceToJson(const ServiceView& v) {
  const core::AutoscalePolicy& p = v.policy;
  json members = json::array();
  for (const ReplicaView& r : v.replicas) {
    json m = {{"job", r.job_id},
              {"name", r.name},
              {"state", StateName(r.state)},
              {"stopping", r.stopping}};
    m["util_pct"] = r.use_pct ? json(*r.use_pct) : json(nullptr);
    members.push_back(std::move(m));
  }
  json j = {{"id", v.id},
            {"name", v.name},
            {"user", v.user},
            {"uid", v.uid},
            {"replicas",
             {{"min", p.replicas.min},
              {"max", p.replicas.max},
              {"range", core::FormatReplicaRange(p.replicas)},
              {"desired", v.desired},
              {"running", v.running},
              {"pending", v.pending},
              {"stopping", v.stopping}}},
            {"target_util", core::FormatShareMilli(p.target_milli)},
            {"target_util_pct", p.target_milli / 10.0},
            {"scale_up_after_ms", p.scale_up_after_ms},
            {"scale_down_after_ms", p.scale_down_after_ms},
            {"cooldown_ms", p.cooldown_ms},
            {"request", v.request},
            {"describe", v.request_describe},
            {"argv", v.argv},
            {"created_ms", v.created_ms},
            {"crash_loop", v.crash_loop},
            {"consecutive_failures", v.consecutive_failures},
            {"restart_not_before_ms", v.restart_not_before_ms},
            {"members", std::move(members)}};
  j["mean_util_pct"] = v.mean_use_pct ? json(*v.mean_use_pct) : json(nullptr);
  j["last_decision"] = v.last_decision_ms == 0
                           ? json(nullptr)
                           : json{{"at_ms", v.last_decision_ms}, {"message", v.last_decision}};
  return j;
}

void RegisterServiceRoutes(Api& api, ReplicaManager& manager) {
  ReplicaManager* m = &manager;
  api.AddRoute("POST", "/v1/services", [m](const ApiRequest& req) {
    auto spec = ParseServiceBody(req.body);
    if (!spec.ok()) return Error(spec.status());
    auto v = m->Create(req.caller, std::move(*spec));
    if (!v.ok()) return Error(v.status());
    return Json(201, ServiceToJson(*v));
  });
  api.AddRoute("GET", "/v1/services", [m](const ApiRequest&) {
    json list = json::array();
    for (const ServiceView& v : m->List()) list.push_back(ServiceToJson(v));
    return Json(200, {{"services", std::move(list)}});
  });
  api.AddRoute("GET", "/v1/services/{name}", [m](const ApiRequest& req) {
    auto v = m->Get(req.params.at("name"));
    if (!v.ok()) return Error(v.status());
    return Json(200, ServiceToJson(*v));
  });
  api.AddRoute("POST", "/v1/services/{name}/scale", [m](const ApiRequest& req) {
    auto r = ParseScaleBody(req.body);
    if (!r.ok()) return Error(r.status());
    auto v = m->Scale(req.caller, req.params.at("name"), r->desired, r->range);
    if (!v.ok()) return Error(v.status());
    return Json(200, ServiceToJson(*v));
  });
  api.AddRoute("DELETE", "/v1/services/{name}", [m](const ApiRequest& req) {
    const std::string& name = req.params.at("name");
    auto cancelled = m->Remove(req.caller, name);
    if (!cancelled.ok()) return Error(cancelled.status());
    return Json(200, {{"name", name}, {"removed", true}, {"cancelled", *cancelled}});
  });
}

}  // namespace gpuslice::daemon

#include "kubernetes/device_plugin/kubelet/pod_annotations.h"

namespace gpuslice::kubernetes {

std::map<std::string, std::string> AnnotationsOf(const nlohmann::json& pod) {
  std::map<std::string, std::string> out;
  if (!pod.is_object() || !pod.contains("metadata") || !pod["metadata"].is_object()) return out;
  const nlohmann::json& m = pod["metadata"];
  if (!m.contains("annotations") || !m["annotations"].is_object()) return out;
  for (const auto& [k, v] : m["annotations"].items()) {
    if (v.is_string()) out[k] = v.get<std::string>();
  }
  return out;
}

core::Result<std::map<std::string, std::string>> ApiPodAnnotations::Annotations(
    const std::string& ns, const std::string& pod) {
  GPUSLICE_ASSIGN_OR_RETURN(nlohmann::json object, api_->GetPod(ns, pod));
  return AnnotationsOf(object);
}

}  // namespace gpuslice::kubernetes

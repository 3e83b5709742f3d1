#pragma once

// Pods' annotations from the API server (kube_api.h), for the reconciler's
// gpuslice.dev/priority (reconciler.h).

#include <map>
#include <string>

#include "core/status.h"
#include "kubernetes/device_plugin/kubelet/reconciler.h"
#include "kubernetes/extender/kube/kube_api.h"

namespace gpuslice::kubernetes {

class ApiPodAnnotations : public PodAnnotationSource {
 public:
  explicit ApiPodAnnotations(KubeApi* api) : api_(api) {}
  core::Result<std::map<std::string, std::string>> Annotations(const std::string& ns,
                                                               const std::string& pod) override;

 private:
  KubeApi* api_;
};

// metadata.annotations of a pod object (strings only); empty when it has none.
std::map<std::string, std::string> AnnotationsOf(const nlohmann::json& pod);

}  // namespace gpuslice::kubernetes

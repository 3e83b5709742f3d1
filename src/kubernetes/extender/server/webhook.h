#pragma once

// The mutating admission webhook (docs/KUBERNETES.md, "The admission
// webhook"): a pod that asks for a gpuslice.dev/ resource and names no
// scheduler (the API server has defaulted it to "default-scheduler") gets
// `schedulerName` set to gpuslice's, so that users need not name it. Every
// other pod, and every pod that names another scheduler, is left as it is.
// The webhook never refuses a pod: a pod whose ask is wrong is admitted and
// the extender's filter says why it cannot be placed.

#include <string>

#include "kubernetes/extender/server/extender_http.h"

namespace gpuslice::kubernetes {

inline constexpr char kDefaultSchedulerName[] = "default-scheduler";

// Answers one AdmissionReview (admission.k8s.io/v1) request body with its
// response (allowed, and a JSON patch for the pods above). A body that is
// not an AdmissionReview request gets 400 with the reason.
HttpAnswer HandleAdmissionReview(const std::string& body, const std::string& scheduler_name);

// RFC 4648 base64 with padding (an AdmissionReview's patch is carried so).
std::string Base64(const std::string& bytes);

}  // namespace gpuslice::kubernetes

#include "daemon/compute/arbiter_region_store.h"

#include <cctype>

#include "daemon/base/log.h"

namespace gpuslice::daemon {

uint64_t JobIdOfSlicePath(const std::string& path) {
  const size_t at = path.rfind("job-");
  if (at == std::string::npos) return 0;
  uint64_t id = 0;
  size_t i = at + 4;
  if (i >= path.size() || !std::isdigit(static_cast<unsigned char>(path[i]))) return 0;
  for (; i < path.size() && std::isdigit(static_cast<unsigned char>(path[i])); ++i) {
    if (id > (UINT64_MAX - 9) / 10) return 0;
    id = id * 10 + uint64_t(path[i] - '0');
  }
  return id;
}

core::Result<std::string> ArbiterRegionStore::Create(const SliceLimits& limits) {
  GPUSLICE_ASSIGN_OR_RETURN(std::string path, inner_.Create(limits));
  if (core::Status s = arbiter_.Register(limits); !s.ok()) {
    if (limits.compute_milli > 0) {
      arbiter_.Drop(limits.job_id);
      (void)inner_.Remove(path);
      return s.WithContext("compute arbiter");
    }
    // Without a share nothing is arbitrated: the slice works without it.
    LogWarn("job " + std::to_string(limits.job_id) + ": compute arbiter: " + s.message());
  }
  return path;
}

core::Status ArbiterRegionStore::Remove(const std::string& path) {
  // The members file first: the inner store may remove the slice directory.
  if (uint64_t id = JobIdOfSlicePath(path); id != 0) arbiter_.Drop(id);
  core::Status s = inner_.Remove(path);
  if (uint64_t id = JobIdOfSlicePath(path); id != 0) arbiter_.Drop(id);  // Its directory too.
  return s;
}

core::Status ArbiterRegionStore::Update(const std::string& path, const SliceLimits& limits) {
  GPUSLICE_RETURN_IF_ERROR(inner_.Update(path, limits));
  SliceLimits l = limits;
  if (l.job_id == 0) l.job_id = JobIdOfSlicePath(path);
  if (l.job_id == 0) return core::Status::Ok();
  return arbiter_.Update(l);
}

core::Status ArbiterRegionStore::Move(const std::string& path,
                                      const std::vector<std::pair<std::string, std::string>>& pairs,
                                      const SliceLimits& after) {
  GPUSLICE_RETURN_IF_ERROR(inner_.Move(path, pairs, after));
  SliceLimits l = after;
  if (l.job_id == 0) l.job_id = JobIdOfSlicePath(path);
  if (l.job_id == 0) return core::Status::Ok();
  return arbiter_.Move(l, pairs);
}

uint64_t ArbiterRegionStore::ContendedNs(const std::string& region_path) {
  const uint64_t job = JobIdOfSlicePath(region_path);
  return job == 0 ? 0 : arbiter_.ContendedNs(job);
}

uint64_t ArbiterRegionStore::WaitedNs(const std::string& region_path) {
  const uint64_t job = JobIdOfSlicePath(region_path);
  return job == 0 ? 0 : arbiter_.WaitedNs(job);
}

std::optional<uint64_t> ArbiterRegionStore::ChargedNs(const std::string& region_path) {
  const uint64_t job = JobIdOfSlicePath(region_path);
  if (job == 0) return std::nullopt;
  return arbiter_.ChargedNs(job);
}

void ArbiterRegionStore::DistrustReports(const std::string& region_path) {
  if (const uint64_t job = JobIdOfSlicePath(region_path); job != 0) arbiter_.DistrustReports(job);
}

}  // namespace gpuslice::daemon

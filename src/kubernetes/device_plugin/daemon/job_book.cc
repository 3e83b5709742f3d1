#include "kubernetes/device_plugin/daemon/job_book.h"

#include <algorithm>
#include <set>

#include "core/strings.h"

namespace gpuslice::kubernetes {

namespace {

std::string ChunkKey(size_t i) {
  return i == 0 ? std::string(kIdsLabel) : std::string(kIdsLabel) + "." + std::to_string(i);
}

}  // namespace

Labels IdsLabels(const Resource& resource, const std::vector<std::string>& ids) {
  std::string text;
  if (resource.IsFraction()) {
    std::string uuid;
    std::vector<int64_t> units;
    for (const std::string& id : ids) {
      auto p = ParseDeviceId(resource.kind, id);
      if (!p.ok()) continue;  // Allocate checked them; nothing else comes here.
      uuid = p->uuid;
      units.push_back(p->unit);
    }
    text = uuid + ":" + EncodeUnits(units);
  } else {
    text = core::Join(ids, ",");
  }
  Labels out;
  for (size_t i = 0; i * kMaxLabelValue < text.size() || i == 0; ++i) {
    out[ChunkKey(i)] = text.substr(i * kMaxLabelValue, kMaxLabelValue);
  }
  return out;
}

core::Result<std::vector<std::string>> IdsFromLabels(const Resource& resource,
                                                     const Labels& labels) {
  std::string text;
  for (size_t i = 0;; ++i) {
    auto it = labels.find(ChunkKey(i));
    if (it == labels.end()) break;
    text += it->second;
  }
  if (text.empty()) return core::InvalidArgumentError(std::string(kIdsLabel) + ": missing");
  std::vector<std::string> ids;
  if (resource.IsFraction()) {
    size_t colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      return core::InvalidArgumentError(std::string(kIdsLabel) + ": no '<uuid>:' in '" + text +
                                        "'");
    }
    auto units = DecodeUnits(std::string_view(text).substr(colon + 1));
    if (!units.ok()) return units.status().WithContext(kIdsLabel);
    for (int64_t u : *units) {
      ids.push_back(FractionId(resource.kind, text.substr(0, colon), static_cast<uint32_t>(u)));
    }
  } else {
    size_t start = 0;
    while (start <= text.size()) {
      size_t comma = text.find(',', start);
      std::string id =
          text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (!id.empty()) ids.push_back(id);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  for (const std::string& id : ids) {
    GPUSLICE_RETURN_IF_ERROR(ParseDeviceId(resource.kind, id).status());
  }
  return ids;
}

std::optional<PluginJob> PluginJobFrom(const JobInfo& job, const std::string& node,
                                       Clock::time_point now) {
  if (job.mode != "external" || job.state != "running") return std::nullopt;
  auto owner = job.labels.find(kOwnerLabel);
  if (owner == job.labels.end() || owner->second != node) return std::nullopt;
  auto res = job.labels.find(kResourceLabel);
  if (res == job.labels.end()) return std::nullopt;
  auto resource = ParseResourceName(res->second);
  if (!resource.ok()) return std::nullopt;
  auto ids = IdsFromLabels(*resource, job.labels);
  if (!ids.ok()) return std::nullopt;
  PluginJob out;
  out.id = job.id;
  out.resource = *resource;
  out.ids = std::move(*ids);
  if (resource->IsFraction() && !out.ids.empty()) {
    out.gpu_uuid = ParseDeviceId(resource->kind, out.ids[0])->uuid;
  }
  out.labels = job.labels;
  out.paused = job.paused;
  out.compute_milli = job.compute_milli;
  // Its age is unknown: counted from now, so that the release grace starts
  // again rather than ending a job the kubelet has not listed yet.
  out.created = now;
  return out;
}

void JobBook::Add(PluginJob job) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(jobs_, [&](const PluginJob& j) { return j.id == job.id; });
  jobs_.push_back(std::move(job));
}

void JobBook::Remove(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(jobs_, [&](const PluginJob& j) { return j.id == id; });
}

std::vector<PluginJob> JobBook::All() const {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_;
}

std::optional<PluginJob> JobBook::Get(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const PluginJob& j : jobs_) {
    if (j.id == id) return j;
  }
  return std::nullopt;
}

std::vector<uint64_t> JobBook::Overlapping(const Resource& resource,
                                           const std::vector<std::string>& ids) const {
  std::set<std::string> wanted(ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint64_t> out;
  for (const PluginJob& j : jobs_) {
    if (!(j.resource == resource)) continue;
    if (std::any_of(j.ids.begin(), j.ids.end(),
                    [&](const std::string& id) { return wanted.count(id) > 0; })) {
      out.push_back(j.id);
    }
  }
  return out;
}

void JobBook::SetLabels(uint64_t id, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  for (PluginJob& j : jobs_) {
    if (j.id == id) j.labels = labels;
  }
}

void JobBook::SetCompute(uint64_t id, uint32_t compute_milli) {
  std::lock_guard<std::mutex> lock(mu_);
  for (PluginJob& j : jobs_) {
    if (j.id == id) j.compute_milli = compute_milli;
  }
}

void JobBook::SetResumed(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (PluginJob& j : jobs_) {
    if (j.id == id) j.paused = false;
  }
}

void JobBook::NoteShareAllocated(const std::string& gpu, Clock::time_point now,
                                 Clock::duration window) {
  std::lock_guard<std::mutex> lock(mu_);
  PluginJob* newest = nullptr;
  for (PluginJob& j : jobs_) {
    if (j.resource.kind != ResourceKind::kGpuMemory || j.gpu_uuid != gpu || j.share_hinted ||
        j.labels.count("pod") > 0 || now - j.created > window) {
      continue;
    }
    if (newest == nullptr || j.created > newest->created) newest = &j;
  }
  if (newest != nullptr) {
    newest->share_hinted = true;
    return;
  }
  shares_.emplace_back(gpu, now);
  while (shares_.size() > 64) shares_.pop_front();
}

void JobBook::AddMemoryJob(PluginJob job, Clock::duration window) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = shares_.rbegin(); it != shares_.rend(); ++it) {
    if (it->first == job.gpu_uuid && job.created - it->second <= window) {
      job.share_hinted = true;
      shares_.erase(std::next(it).base());
      break;
    }
  }
  std::erase_if(jobs_, [&](const PluginJob& j) { return j.id == job.id; });
  jobs_.push_back(std::move(job));
}

std::vector<std::string> JobBook::PairingGpus(ResourceKind kind, Clock::time_point now,
                                              Clock::duration window) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<Clock::time_point, std::string>> found;
  if (kind == ResourceKind::kGpuMemory) {
    for (const auto& [gpu, at] : shares_) {
      if (now - at <= window) found.emplace_back(at, gpu);
    }
  } else if (kind == ResourceKind::kGpuShare) {
    for (const PluginJob& j : jobs_) {
      if (j.resource.kind == ResourceKind::kGpuMemory && j.labels.count("pod") == 0 &&
          !j.share_hinted && now - j.created <= window) {
        found.emplace_back(j.created, j.gpu_uuid);
      }
    }
  }
  std::stable_sort(found.begin(), found.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (const auto& [at, gpu] : found) {
    if (std::find(out.begin(), out.end(), gpu) == out.end()) out.push_back(gpu);
  }
  return out;
}

}  // namespace gpuslice::kubernetes

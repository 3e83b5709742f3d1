#include "kubernetes/device_plugin/kubelet/reconciler.h"

#include <utility>

#include "kubernetes/device_plugin/base/log.h"

namespace gpuslice::kubernetes {

Reconciler::Reconciler(DaemonClient* daemon, PodResourcesSource* pods, JobBook* book,
                       ReconcilerOptions options)
    : daemon_(daemon), pods_(pods), book_(book), options_(std::move(options)) {}

Reconciler::~Reconciler() { Stop(); }

core::Result<size_t> Reconciler::Recover() {
  GPUSLICE_ASSIGN_OR_RETURN(std::vector<JobInfo> jobs, daemon_->Jobs());
  size_t n = 0;
  const Clock::time_point now = Clock::now();
  for (const JobInfo& j : jobs) {
    auto pj = PluginJobFrom(j, options_.node, now);
    if (!pj) continue;
    book_->Add(std::move(*pj));
    ++n;
  }
  return n;
}

core::Status Reconciler::RunOnce() {
  auto containers = pods_->List();
  if (!containers.ok()) {
    // Said once per outage: the kubelet restarts, and passes come often.
    if (!pods_error_logged_) LogWarn(containers.status().message() + " (retrying)");
    pods_error_logged_ = true;
    kubelet_was_down_ = true;
    return containers.status();
  }
  if (pods_error_logged_) LogInfo("kubelet PodResources answers again");
  pods_error_logged_ = false;
  const Clock::time_point now = Clock::now();
  const uint64_t generation = pods_->Generation();
  if (kubelet_was_down_ || (kubelet_generation_ != 0 && generation != kubelet_generation_)) {
    hold_releases_until_ = now + options_.decide.release_grace;
    if (options_.decide.release_grace.count() > 0) {
      LogInfo("the kubelet restarted: no slice is released for the next " +
              std::to_string(
                  std::chrono::duration_cast<std::chrono::seconds>(options_.decide.release_grace)
                      .count()) +
              " s, while it lists its pods again");
    }
  }
  kubelet_was_down_ = false;
  kubelet_generation_ = generation;
  std::vector<Action> actions = Reconcile(*containers, book_->All(), now, options_.decide);
  if (now < hold_releases_until_) {
    std::erase_if(actions, [](const Action& a) { return a.kind == Action::Kind::kRelease; });
  }
  Apply(actions);
  ApplyPriorities();
  return core::Status::Ok();
}

void Reconciler::ApplyPriorities() {
  for (const PluginJob& j : book_->All()) {
    if (priority_done_.count(j.id) > 0) continue;
    auto ns = j.labels.find("namespace");
    auto pod = j.labels.find("pod");
    if (ns == j.labels.end() || pod == j.labels.end()) continue;  // Not tied to a pod yet.
    if (options_.annotations == nullptr) {
      priority_done_.insert(j.id);
      continue;
    }
    auto annotations = options_.annotations->Annotations(ns->second, pod->second);
    if (!annotations.ok()) {
      // The API server may be away for a moment: tried again next pass.
      const std::string problem = "pod " + ns->second + "/" + pod->second +
                                  ": cannot read its annotations: " + annotations.status().message();
      if (reported_.insert(problem).second) LogWarn(problem);
      continue;
    }
    priority_done_.insert(j.id);
    auto p = annotations->find(kPriorityAnnotation);
    if (p == annotations->end()) continue;
    if (p->second != "low" && p->second != "normal" && p->second != "high") {
      const std::string problem = "pod " + ns->second + "/" + pod->second + ": " +
                                  kPriorityAnnotation + " '" + p->second +
                                  "' is not low, normal or high; ignored";
      if (reported_.insert(problem).second) LogError(problem);
      continue;
    }
    if (core::Status s = daemon_->SetPriority(j.id, p->second); !s.ok()) {
      priority_done_.erase(j.id);  // Retried next pass.
      const std::string problem = "job " + std::to_string(j.id) + ": priority " + p->second +
                                  ": " + s.message();
      if (reported_.insert(problem).second) LogError(problem);
      continue;
    }
    LogInfo("job " + std::to_string(j.id) + ": priority " + p->second + " (pod " + ns->second +
            "/" + pod->second + ")");
  }
}

void Reconciler::Apply(const std::vector<Action>& actions) {
  std::set<uint64_t> failed;
  for (const Action& a : actions) {
    if (a.job != 0 && failed.count(a.job) > 0) continue;
    core::Status s;
    switch (a.kind) {
      case Action::Kind::kSetLabels:
        s = daemon_->SetLabels(a.job, a.labels);
        if (s.ok()) book_->SetLabels(a.job, a.labels);
        break;
      case Action::Kind::kResizeCompute:
        s = daemon_->ResizeCompute(a.job, a.compute_milli);
        if (s.ok()) book_->SetCompute(a.job, a.compute_milli);
        break;
      case Action::Kind::kResume:
        s = daemon_->Resume(a.job);
        if (s.ok()) book_->SetResumed(a.job);
        break;
      case Action::Kind::kRelease:
        s = daemon_->Cancel(a.job);
        // Gone already (cancelled by hand, daemon lost it): ours no more.
        if (s.ok() || s.code() == core::StatusCode::kNotFound ||
            s.code() == core::StatusCode::kFailedPrecondition) {
          book_->Remove(a.job);
          if (!s.ok()) {
            LogInfo("job " + std::to_string(a.job) + " ended already: " + s.message());
            s = core::Status::Ok();
          }
        }
        break;
      case Action::Kind::kReport:
        if (reported_.insert(a.message).second) LogError(a.message);
        continue;
    }
    if (s.ok()) {
      LogInfo(a.message);
      continue;
    }
    failed.insert(a.job);
    // A job cancelled outside the plugin: forget it rather than retry forever.
    if (s.code() == core::StatusCode::kNotFound) book_->Remove(a.job);
    std::string problem = a.message + ": " + s.ToString();
    if (reported_.insert(problem).second) LogError(problem);
  }
}

void Reconciler::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void Reconciler::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Reconciler::Poke() {
  const Clock::time_point now = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Allocate calls come in bursts (a pod's containers and resources): one
    // pass serves every call of a burst, so a pass already due within
    // `after_allocate` of the one asked for is enough.
    for (Clock::time_point at :
         {now + options_.after_allocate, now + options_.decide.settle + options_.after_allocate}) {
      auto next = due_.lower_bound(at - options_.after_allocate);
      if (next == due_.end() || *next > at + options_.after_allocate) due_.insert(at);
    }
  }
  wake_.notify_all();
}

void Reconciler::Loop() {
  Clock::time_point next_periodic = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    Clock::time_point next = next_periodic;
    if (!due_.empty() && *due_.begin() < next) next = *due_.begin();
    if (wake_.wait_until(lock, next,
                         [&] { return stop_ || (!due_.empty() && *due_.begin() < next); })) {
      continue;  // Stopping, or an earlier pass was asked for: recompute.
    }
    const Clock::time_point now = Clock::now();
    while (!due_.empty() && *due_.begin() <= now) due_.erase(due_.begin());
    if (now >= next_periodic) next_periodic = now + options_.period;
    lock.unlock();
    (void)RunOnce();  // Errors are logged inside.
    lock.lock();
  }
}

}  // namespace gpuslice::kubernetes

#pragma once

// The reconciler's thread: every `period`, and shortly after each Allocate
// (Poke), it lists the kubelet's PodResources, decides (reconcile.h) and
// carries the actions out in the daemon. Nothing is released while the
// kubelet cannot be asked: a pass without its list does nothing. Nor for
// `release_grace` after the kubelet restarted (it did not answer, or its
// socket is new): a kubelet lists its pods only once it has them back from
// the API server, and a running pod missing from that first list must not
// lose its slice.
// Also recovers the plugin's jobs from the daemon at start (Recover).

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "core/status.h"
#include "kubernetes/device_plugin/daemon/daemon_client.h"
#include "kubernetes/device_plugin/daemon/job_book.h"
#include "kubernetes/device_plugin/kubelet/kubelet.h"
#include "kubernetes/device_plugin/daemon/reconcile.h"

namespace gpuslice::kubernetes {

// A pod's annotations (the API server's pod object); the reconciler reads
// `gpuslice.dev/priority` from them. Null source: annotations are not read.
class PodAnnotationSource {
 public:
  virtual ~PodAnnotationSource() = default;
  virtual core::Result<std::map<std::string, std::string>> Annotations(const std::string& ns,
                                                                       const std::string& pod) = 0;
};

inline constexpr char kPriorityAnnotation[] = "gpuslice.dev/priority";

struct ReconcilerOptions {
  std::string node;
  ReconcileOptions decide;
  std::chrono::milliseconds period{2000};
  std::chrono::milliseconds after_allocate{100};
  // Where pods' annotations come from (the API server); may be null.
  PodAnnotationSource* annotations = nullptr;
};

class Reconciler {
 public:
  // `daemon` and `pods` are used from the reconciler's thread only (and
  // from Recover/RunOnce on the caller's).
  Reconciler(DaemonClient* daemon, PodResourcesSource* pods, JobBook* book,
             ReconcilerOptions options);
  ~Reconciler();  // Stops the thread.

  // Adds the daemon's running external jobs labelled with this node's name
  // to the book; returns how many.
  core::Result<size_t> Recover();
  // One pass now, on the caller's thread.
  core::Status RunOnce();

  void Start();
  void Stop();
  // Asks for a pass `after_allocate` from now, and one after the settle
  // time (a memory job with no share is resumed then).
  void Poke();

 private:
  // Applies each labelled job's pod's `gpuslice.dev/priority` once.
  void ApplyPriorities();
  std::set<uint64_t> priority_done_;
  void Loop();
  void Apply(const std::vector<Action>& actions);

  DaemonClient* daemon_;
  PodResourcesSource* pods_;
  JobBook* book_;
  ReconcilerOptions options_;

  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;                // Guarded by mu_.
  std::set<Clock::time_point> due_;  // Guarded by mu_: extra passes asked for.
  std::thread thread_;
  std::set<std::string> reported_;  // Reconciler thread only: problems logged.
  bool pods_error_logged_ = false;  // Reconciler thread only.
  // Reconciler thread only: the kubelet last seen, and until when its
  // restart holds releases.
  uint64_t kubelet_generation_ = 0;
  bool kubelet_was_down_ = false;
  Clock::time_point hold_releases_until_{};
};

}  // namespace gpuslice::kubernetes

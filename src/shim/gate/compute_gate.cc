#include "shim/gate/compute_gate.h"

#include <pthread.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "shim/gate/compute_gate_markers.h"
#include "shim/base/config.h"
#include "slice/compute/coord.h"
#include "slice/compute/coord_board.h"
#include "slice/compute/coord_turns.h"
#include "shim/driver.h"
#include "shim/base/log.h"
#include "slice/region/region.h"
#include "shim/shim_state.h"

namespace gpuslice::shim {

// Closed (odd) until the first launch has decided whether a share applies.
std::atomic<uint32_t> g_gate{1};
thread_local GateCredits t_gate __attribute__((tls_model("initial-exec")));

namespace {

// The markers and the GPU time they measure (compute_gate_markers.h).
using gate::Capturing;
using gate::CloseBracket;
using gate::g_coord;
using gate::g_expected_done_ns;
using gate::g_fns;
using gate::g_marker_count;
using gate::g_mu;
using gate::g_ns_per_launch;
using gate::g_popped_seq;
using gate::g_unmarked;
using gate::InflightLocked;
using gate::kTargetBatchNs;
using gate::MarkLocked;
using gate::OpenBracket;
using gate::PollMarkersLocked;
using gate::ResetMarkersAfterFork;

constexpr int32_t kMaxBatch = 256;
constexpr uint32_t kMaxPendingMarkers = 2;  // Batches queued on the GPU at most.
// While a slice of higher priority shares the GPU, a slice keeps its queue
// on the GPU as shallow as it can keep fed: the GPU time-slices between the
// processes that have work in flight, so whatever is queued when the
// higher-priority work arrives delays it (2 x 500 us of queued best-effort
// work added ~1.5 ms to a 2 ms inference request; docs/COMPUTE.md). How
// shallow depends on how promptly this process's launching thread wakes up
// to top the queue up, so the depth adapts: it grows by a quarter each time
// a top-up finds the queue already drained (the GPU may have idled), and
// shrinks by 3 us each time one does not, between the bounds below: about 5%
// of top-ups find it dry. (1 us, ~2% dry, gave the best-effort slices of the
// harness's priority scenario 92.5% instead of 90.7% of the GPU, and the
// high-priority p99 +16% instead of +10%.)
constexpr uint32_t kOutrankedPendingMarkers = 2;  // Depth / 2 per batch.
constexpr double kOutrankedMinDepthNs = 100'000;
constexpr double kOutrankedMaxDepthNs = 1'000'000;
constexpr double kOutrankedStartDepthNs = 500'000;
constexpr double kOutrankedDepthStepNs = 3000;
constexpr uint64_t kActiveTickNs = 200'000;  // Background tick while using the GPU.
constexpr uint64_t kDrainTickNs = 20'000;    // ... while the queue drains after a turn.
constexpr uint64_t kIdleTickNs = 5'000'000;  // ... while idle or without a share.
// The quiet tick (Turns::QuietTickNs: 1 ms on the daemon's board, 4 ms in
// the cooperative file) while its slice holds the GPU alone, or co-runs
// with nobody waiting, far from its cap (Turns::QuietNs). Each tick of the
// cooperative file decides (a scan of every slice and member, and the
// policy): at 200 us, a 20 us launch-then-synchronise loop pinned to one
// core with a 30% hard share made 0.90 of the launches it made without one
// (the tick's wake-ups shared its core); at 1 ms, 0.97-1.0. Nobody else on
// the GPU reads what it reports, and another slice's arrival either changes
// the turn (which wakes this thread at once) or is seen at the next tick.
// Under the daemon's arbiter, which then decides every 1 ms too, each tick
// publishes the slice's reports: at 200 us for both, a 20 us loop alone
// reached 0.82-0.87 of its unshared speed; 0.87-0.97 at 1 ms.
constexpr uint64_t kMaxWaitNs = 30'000'000'000;  // A launch never waits longer (degrade).

// Process-wide state of the gate. Set up once by Start() under g_start_mu
// (with gate::g_fns and gate::g_coord, the turns this process follows: the
// cooperative file, or the daemon's board); markers and estimates are
// guarded by gate::g_mu (slow path and background thread only).
std::mutex g_start_mu;
bool g_started = false;  // Guarded by g_start_mu.
int g_device = -1;       // Slice device index of the coordination.
// The limits page's placement counter of g_device that g_coord follows
// (background thread only after Start).
uint32_t g_placement = 0;
// Whether this process has joined its slice's turns (1) or not (-1).
std::atomic<int32_t> g_member{-1};
// The cooperative file's decisions (set by Start): its members co-run when
// their loops leave the GPU idle (PolicyParams::corun), as under the
// daemon's arbiter, unless GPUSLICE_COMPUTE_CORUN=0.
slice::PolicyParams g_params;
std::atomic<uint32_t> g_share{0};  // Current share (from the region), 0: none.
// The region's launches_paused flag as last read: the gate stays closed
// while it is set, whatever the share (the daemon's idle reclaim).
std::atomic<bool> g_paused{false};
// Some other slice on this GPU has a higher priority (FollowRegion).
std::atomic<bool> g_outranked{false};

std::atomic<int32_t> g_waiters{0};
// Queue depth while outranked (see kOutrankedMinDepthNs). Guarded by g_mu.
double g_outranked_depth_ns = kOutrankedStartDepthNs;

// No bracket in the first moments of a turn: the first launch of a turn may
// wait on the GPU behind the previous holder's drain (a preemption opens the
// turn before it), and a bracket around it timed the wait too. (A 50% high-priority slice of 1 ms
// kernels beside a slice without a share was charged ~3 ms per 1 ms kernel
// after every preemption, and got 0.31 of the GPU instead of 0.40.) Longer
// than the drain of an outranked queue (two batches of <= 0.5 ms, or two
// kernels); what a longer drain adds is clipped (compute_gate_markers.cc).
constexpr uint64_t kBracketSettleNs = 3'000'000;
// When the gate last opened (a turn of this slice began).
std::atomic<uint64_t> g_gate_opened_ns{0};

template <typename T>
void Resolve(T* out, const char* name) {
  *out = reinterpret_cast<T>(gpuslice_real_dlsym(CudaHandle(), name));
}

uint32_t SharedMode(uint32_t region_mode) {
  return region_mode == kRegionModeWorkConserving ? slice::coord::kModeWorkConserving
                                                  : slice::coord::kModeHard;
}
uint32_t SharedPriority(uint32_t region_priority) {
  return region_priority == kRegionPriorityDefault ? 1 : region_priority - 1;
}

// Reads the slice's pause flag (Region::LaunchesPausedOf: the daemon's
// limits page, or a standalone region; acquire, paired with the release of
// SetLaunchesPaused) and remembers it for RefreshGate.
bool ReadPaused() {
  const bool paused = SliceRegion()->LaunchesPausedOf(uint32_t(g_device));
  g_paused.store(paused, std::memory_order_relaxed);
  return paused;
}

// Opens or closes the gate to match the shared turn; closed while paused.
void RefreshGate() {
  const bool paused = g_paused.load(std::memory_order_relaxed);
  if (g_coord == nullptr || (!paused && g_share.load(std::memory_order_relaxed) == 0)) {
    if (g_gate.load(std::memory_order_relaxed) != kGateOff) {
      g_gate.store(kGateOff, std::memory_order_release);
    }
    return;
  }
  const bool ours = !paused && g_member.load(std::memory_order_relaxed) >= 0 &&
                    g_coord->HoldsOpenTurn(slice::MonotonicNs());
  uint32_t seen = g_gate.load(std::memory_order_relaxed);
  while (true) {
    const uint32_t gate = seen == kGateOff ? 1 : seen;  // A share or a pause appeared: closed.
    if (seen != kGateOff && ((gate & 1) == 0) == ours) return;
    uint32_t next = gate + 1;
    if (next == kGateOff) next = 2;
    if (ours != ((next & 1) == 0)) ++next;
    // Release: pairs with the acquire in LaunchAllowedFast. Compare and
    // swap: the background thread and waiting launchers refresh at the same
    // time, and a plain store could put back a generation another thread had
    // already moved past (reopening credits it had voided).
    if (g_gate.compare_exchange_weak(seen, next, std::memory_order_release,
                                     std::memory_order_relaxed)) {
      if (ours) g_gate_opened_ns.store(slice::MonotonicNs(), std::memory_order_relaxed);
      return;
    }
  }
}

// Returns whether the arbiter is due a wake-up that `ring` false held back.
bool Publish(uint64_t now, bool inflight, bool ring = true) {
  if (g_member.load(std::memory_order_relaxed) < 0) return false;
  uint32_t flags = 0;
  if (g_waiters.load(std::memory_order_relaxed) > 0) flags |= slice::coord::kMemberWaiting;
  if (inflight) flags |= slice::coord::kMemberInflight;
  // Every batch's GPU time is added to the slice (PollMarkersLocked).
  flags |= slice::coord::kMemberGpuTime;
  return g_coord->Publish(flags, now, ring);
}

// Re-reads the slice's share from the region (the daemon may change it
// live) and joins or leaves the coordination accordingly.
// The daemon moved the slice to another GPU (a suspended job resumed
// elsewhere, docs/SUSPEND.md): follow that GPU's board. The process is
// checkpointed while the page changes, so its first launch after the
// restore already sees the new board, or the one after the next tick.
void FollowPlacement(const slice::Region& region) {
  const uint32_t seq = region.PlacementSeqOf(uint32_t(g_device));
  if (seq == g_placement) return;
  std::string uuid;
  uint32_t placement = 0;
  if (!region.PlacementOf(uint32_t(g_device), &uuid, &placement)) return;  // Mid-move.
  const std::string path = slice::BoardPath(Config()->coord_dir, uuid);
  core::Status moved = g_coord->MoveTo(path);
  if (!moved.ok()) {
    GPUSLICE_LOG(kWarn, "the slice moved to %s but its compute turns cannot follow: %s",
                 uuid.c_str(), moved.message().c_str());
  } else {
    GPUSLICE_LOG(kInfo, "the slice moved to %s; compute gate on %s", uuid.c_str(), path.c_str());
  }
  g_placement = placement;  // Either way: warned once per move.
}

void FollowRegion(uint64_t now) {
  // Through the region's accessors: the daemon's limits page when there is
  // one, never a field the job can rewrite. ShareOf is an acquire load, so
  // mode and priority read after it go with it.
  const slice::Region& region = *SliceRegion();
  FollowPlacement(region);
  const uint32_t share = region.ShareOf(uint32_t(g_device));
  const uint32_t mode = SharedMode(region.ModeOf(uint32_t(g_device)));
  const uint32_t priority = SharedPriority(region.PriorityOf(uint32_t(g_device)));
  int32_t m = g_member.load(std::memory_order_relaxed);
  if (share != 0 && m < 0) {
    if (core::Status joined = g_coord->Join(getpid(), now); !joined.ok()) {
      GPUSLICE_LOG(kWarn, "compute share not enforced: %s", joined.message().c_str());
      return;
    }
    m = 1;
    g_member.store(m, std::memory_order_relaxed);
  }
  if (m >= 0) {
    // A member whose entry was reclaimed (we were stopped too long) joins again.
    if (!g_coord->Joined(getpid())) {
      g_member.store(-1, std::memory_order_relaxed);
      return;
    }
    g_coord->Configure(share, slice::coord::Mode(mode), priority);
    if (share == 0) {
      g_coord->Leave(getpid());
      g_member.store(-1, std::memory_order_relaxed);
    }
  }
  g_share.store(share, std::memory_order_relaxed);
  // Whether a slice of higher priority is on this GPU: then keep the queue
  // shallow (kOutrankedMinDepthNs).
  g_outranked.store(g_coord->Outranked(priority), std::memory_order_relaxed);
  ReadPaused();
}

void* BackgroundMain(void*) {
  pthread_setname_np(pthread_self(), "gpuslice-gate");
  // Its 20 us sleeps while a queue drains (kDrainTickNs) would last 70 us
  // with the default 50 us timer slack, and the slice is charged until it
  // reports the drain.
  prctl(PR_SET_TIMERSLACK, 5000, 0, 0, 0);
  while (g_phase.load(std::memory_order_acquire) == kPhaseEnforcing) {
    const uint64_t now = slice::MonotonicNs();
    FollowRegion(now);
    bool inflight;
    uint64_t queued_ns;  // Work queued and not yet charged, as estimated.
    {
      std::lock_guard<std::mutex> lock(g_mu);
      PollMarkersLocked(now);
      inflight = InflightLocked(now);
      queued_ns = g_expected_done_ns > now ? g_expected_done_ns - now : 0;
    }
    Publish(now, inflight);
    const bool member = g_member.load(std::memory_order_relaxed) >= 0;
    if (member) g_coord->Decide(now, g_params);
    const uint32_t seq = g_coord->TurnSeq();
    RefreshGate();
    const bool open = (g_gate.load(std::memory_order_relaxed) & 1) == 0;
    const bool active =
        member && (inflight || g_waiters.load(std::memory_order_relaxed) > 0 || open);
    const uint64_t quiet_tick = g_coord->QuietTickNs();
    if (active && open && g_coord->QuietNs() >= queued_ns + quiet_tick + kActiveTickNs) {
      // Alone on the GPU with the cap (if any) far off: even if the slice
      // used the GPU all the time, its tokens would still outlast this wait
      // by one usual tick. A turn change (another slice's decision) ends the
      // wait at once.
      g_coord->WaitTurnChange(seq, quiet_tick);
    } else if (active) {
      // Draining (work in flight, the turn gone): the slice is charged until
      // it reports the drain, so look often enough that the report is
      // prompt. Only for the drain at the end of a turn (at most a queue of
      // ~1 ms), so the extra wake-ups are few.
      const bool draining = inflight && !open;
      timespec ts{0, long(draining ? kDrainTickNs : kActiveTickNs)};
      nanosleep(&ts, nullptr);
    } else if (member) {
      g_coord->WaitTurnChange(g_coord->TurnSeq(), kIdleTickNs);
    } else {
      timespec ts{0, long(kIdleTickNs)};
      nanosleep(&ts, nullptr);
    }
  }
  return nullptr;
}

std::string CoordDir(const ShimConfig& config, mode_t* mode) {
  *mode = 0600;
  if (!config.coord_dir.empty()) {
    struct stat st {};
    // A directory its group may write (the daemon's) gets group-shared files.
    if (stat(config.coord_dir.c_str(), &st) == 0 && (st.st_mode & 0020) != 0) *mode = 0660;
    return config.coord_dir;
  }
  return StandaloneSliceDir(getenv("XDG_RUNTIME_DIR"), geteuid());
}

// The turns this process follows. A daemon job (a board for its GPU in
// GPUSLICE_COORD_DIR) follows the daemon's board, read-only, and reports
// into its slice's members file; a standalone slice uses the cooperative
// file of its user.
core::Result<std::unique_ptr<slice::Turns>> OpenTurns(const ShimConfig& config,
                                                      slice::Region* region, int dev) {
  // Where the daemon says the device is (its limits page; moves rewrite
  // it), else the region's own UUID.
  std::string uuid = region->device(uint32_t(dev)).uuid;
  uint32_t placement = 0;
  (void)region->PlacementOf(uint32_t(dev), &uuid, &placement);
  if (!config.coord_dir.empty()) {
    const std::string board_path = slice::BoardPath(config.coord_dir, uuid);
    if (access(board_path.c_str(), F_OK) == 0) {
      core::Result<std::unique_ptr<slice::BoardView>> board = slice::BoardView::Open(board_path);
      if (!board.ok()) return board.status();
      core::Result<std::unique_ptr<slice::MembersFile>> members =
          slice::MembersFile::Open(slice::MembersPath(getenv("GPUSLICE_LIMITS"), region->path()));
      if (!members.ok()) return members.status();
      return std::unique_ptr<slice::Turns>(
          new slice::BoardTurns(std::move(*board), std::move(*members), uint32_t(dev), board_path));
    }
  }
  mode_t mode = 0600;
  const std::string dir = CoordDir(config, &mode);
  if (config.coord_dir.empty()) GPUSLICE_RETURN_IF_ERROR(PrepareSliceDir(dir, geteuid()));
  const std::string path = slice::CoordPath(dir, uuid);
  core::Result<std::unique_ptr<slice::Coordinator>> coord =
      slice::Coordinator::OpenOrCreate(path, uuid, mode);
  if (!coord.ok()) return coord.status();
  return std::unique_ptr<slice::Turns>(new slice::CooperativeTurns(
      std::move(*coord), slice::SliceKey(region->path(), region->header().created_unix_ns), path));
}

// Decides, once per process, whether launches are coordinated. False:
// launch freely from now on.
bool Start() {
  if (!Enforcing() || Config() == nullptr || SliceRegion() == nullptr) return false;
  const int dev = CurrentSliceDevice();
  if (dev < 0) return false;
  Resolve(&g_fns.event_create, "cuEventCreate");
  Resolve(&g_fns.event_record, "cuEventRecord");
  Resolve(&g_fns.event_record_ptsz, "cuEventRecord_ptsz");
  Resolve(&g_fns.event_query, "cuEventQuery");
  Resolve(&g_fns.event_destroy, "cuEventDestroy_v2");
  Resolve(&g_fns.event_elapsed, "cuEventElapsedTime_v2");
  if (g_fns.event_elapsed == nullptr) Resolve(&g_fns.event_elapsed, "cuEventElapsedTime");
  Resolve(&g_fns.is_capturing, "cuStreamIsCapturing");
  Resolve(&g_fns.is_capturing_ptsz, "cuStreamIsCapturing_ptsz");
  if (g_fns.event_create == nullptr || g_fns.event_record == nullptr ||
      g_fns.event_query == nullptr || g_fns.event_destroy == nullptr) {
    GPUSLICE_LOG(kWarn, "the driver lacks event functions; compute shares are not enforced");
    return false;
  }
  core::Result<std::unique_ptr<slice::Turns>> turns = OpenTurns(*Config(), SliceRegion(), dev);
  if (!turns.ok()) {
    GPUSLICE_LOG(kWarn, "compute shares not enforced: %s", turns.status().message().c_str());
    return false;
  }
  g_coord = turns->release();
  g_device = dev;
  g_params.corun = Config()->compute_corun;
  // Only the cooperative file decides with these (the daemon's arbiter has
  // its own): one user's own slices (PolicyParams).
  g_params.corun_capped_max_host_duty_milli = slice::kCoRunOwnSlicesMaxHostDutyMilli;
  g_placement = SliceRegion()->PlacementSeqOf(uint32_t(dev));
  FollowRegion(slice::MonotonicNs());
  pthread_t thread;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  const int rc = pthread_create(&thread, &attr, BackgroundMain, nullptr);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    GPUSLICE_LOG(kWarn, "cannot start the compute gate thread: %s; shares not enforced",
                 std::strerror(rc));
    if (g_member.exchange(-1) >= 0) g_coord->Leave(getpid());
    return false;
  }
  GPUSLICE_LOG(kInfo, "compute gate on %s (share %u/1000)", g_coord->Describe().c_str(),
               g_share.load(std::memory_order_relaxed));
  return true;
}

void AtForkChild() {
  // The child has no background thread, no member entry and none of the
  // parent's markers: start over at its first launch.
  new (&g_start_mu) std::mutex();
  g_started = false;
  g_coord = nullptr;
  g_member.store(-1, std::memory_order_relaxed);
  g_share.store(0, std::memory_order_relaxed);
  g_paused.store(false, std::memory_order_relaxed);
  ResetMarkersAfterFork();
  g_outranked_depth_ns = kOutrankedStartDepthNs;
  g_waiters.store(0, std::memory_order_relaxed);
  t_gate = GateCredits{};  // ring_after_launch too: the child has no arbiter yet.
  g_gate.store(1, std::memory_order_release);
}

__attribute__((constructor)) void RegisterFork() { pthread_atfork(nullptr, nullptr, AtForkChild); }

__attribute__((destructor)) void LeaveAtExit() {
  if (g_member.exchange(-1) >= 0 && g_coord != nullptr) g_coord->Leave(getpid());
}

}  // namespace

void MarkBatchEnd(CUstream stream, bool per_thread) {
  if (g_coord == nullptr) return;
  // A launch into a capturing stream only added a graph node: an event
  // recorded there would become part of the graph. Its batch is marked at
  // the thread's next slow path instead.
  if (Capturing(stream, per_thread)) return;
  std::lock_guard<std::mutex> lock(g_mu);
  MarkLocked(stream, per_thread, slice::MonotonicNs());
}

void MarkAfterLaunch(CUstream stream, bool per_thread) {
  if (g_coord == nullptr || g_gate.load(std::memory_order_relaxed) == kGateOff) {
    // The share went away under the batch: nothing to mark any more.
    if (t_gate.bracket != nullptr) g_fns.event_destroy(t_gate.bracket);
    t_gate.bracket = nullptr;
    t_gate.mark_at = -1;
    return;
  }
  if (t_gate.bracket != nullptr) CloseBracket(stream, per_thread);
  if (t_gate.credits == 0 && t_gate.batch > 0) {
    MarkBatchEnd(stream, per_thread);
  } else {
    t_gate.mark_at = 0;
  }
}

namespace {

// Sleeps `ns` with 1 us timer slack: the default 50 us slack makes a 50 us
// sleep last ~100 us, and an outranked slice's queue has to cover that.
// `*saved` keeps the thread's own slack (-1: not lowered yet) for
// RestoreSlack.
void ShortSleep(long ns, long* saved) {
  if (*saved < 0) {
    *saved = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0);
  }
  timespec ts{0, ns};
  nanosleep(&ts, nullptr);
}

void RestoreSlack(long saved) {
  if (saved > 0) prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(saved), 0, 0, 0);
}

}  // namespace

void WaitForLaunch(CUstream stream, bool per_thread) {
  {
    std::lock_guard<std::mutex> lock(g_start_mu);
    if (!g_started) {
      g_started = true;
      if (!Start()) {
        g_gate.store(kGateOff, std::memory_order_release);
        return;
      }
    }
  }
  if (g_coord == nullptr) return;
  // Launches into a capturing stream only record graph nodes; the graph's
  // launch is what gets gated.
  if (Capturing(stream, per_thread)) return;
  const uint64_t start = slice::MonotonicNs();
  bool waiting = false;
  bool granted = false;
  uint64_t paused_ns = 0;  // Time held by a pause: neither throttling nor a reason to give up.
  long slack = -1;         // The thread's timer slack, while lowered for the waits below.
  // The open gate under which this thread waited for markers because enough
  // was queued (0: it did not). A wait across a closed gate (another slice's
  // turn, during which the queue drains) says nothing about the depth.
  uint32_t topping_up = 0;
  bool bracket_due = false;  // Whether the batch granted gets a bracket.
  bool behind_own = false;   // Whether work of ours may be queued before the batch.
  {
    std::lock_guard<std::mutex> lock(g_mu);
    MarkLocked(stream, per_thread, start);
  }
  while (true) {
    uint32_t gate = g_gate.load(std::memory_order_acquire);
    if (gate == kGateOff) break;
    if ((gate & 1) == 0) {
      // The gate says the slice holds the GPU, as of the background
      // thread's last tick (up to 200 us ago). Before queueing more, check
      // the turn itself: an outranked slice that topped its queue up after a
      // higher-priority slice had taken the GPU put that much more work in
      // front of it.
      RefreshGate();
      gate = g_gate.load(std::memory_order_acquire);
      if (gate == kGateOff) break;
    }
    uint64_t now = slice::MonotonicNs();
    if (ReadPaused()) {
      // Held for as long as the daemon says, without the 30 s bound: the
      // pause is a decision, not a coordination failure. Not published as
      // waiting, so the slice's turns go to others meanwhile.
      RefreshGate();
      timespec ts{0, 1'000'000};
      nanosleep(&ts, nullptr);
      paused_ns += slice::MonotonicNs() - now;
      continue;
    }
    if ((gate & 1) == 0) {
      std::lock_guard<std::mutex> lock(g_mu);
      PollMarkersLocked(now);
      const bool outranked = g_outranked.load(std::memory_order_relaxed);
      const uint32_t max_pending = outranked ? kOutrankedPendingMarkers : kMaxPendingMarkers;
      if (uint32_t(g_marker_count) < max_pending) {
        if (outranked && topping_up == gate) {
          // This thread waited for the queue to go down: did it run dry?
          g_outranked_depth_ns =
              g_marker_count == 0
                  ? std::min(g_outranked_depth_ns * 1.25, kOutrankedMaxDepthNs)
                  : std::max(g_outranked_depth_ns - kOutrankedDepthStepNs, kOutrankedMinDepthNs);
        }
        const double target =
            outranked ? g_outranked_depth_ns / kOutrankedPendingMarkers : double(kTargetBatchNs);
        const int32_t batch =
            std::clamp<int32_t>(int32_t(target / std::max(g_ns_per_launch, 1.0)), 1, kMaxBatch);
        t_gate.gen = gate;
        t_gate.credits = batch - 1;  // This launch takes one.
        t_gate.batch = batch;
        t_gate.granted_ns = now;
        // Queues right behind this thread's previous marker if that is still
        // pending (markers complete in record order as far as the ring knows).
        t_gate.chain_seq = t_gate.last_seq > g_popped_seq ? t_gate.last_seq : 0;
        behind_own = InflightLocked(now);
        g_unmarked.fetch_add(batch, std::memory_order_relaxed);
        g_expected_done_ns =
            std::max(g_expected_done_ns, now) + uint64_t(double(batch) * g_ns_per_launch);
        g_coord->CountLaunch();
        granted = true;
        bracket_due = gate::BracketDueLocked();
        break;
      }
    }
    if (now - start - paused_ns > kMaxWaitNs) {
      GPUSLICE_LOG(kWarn, "a launch waited %llu s for the GPU; letting it through",
                   static_cast<unsigned long long>(kMaxWaitNs / 1000000000ull));
      break;
    }
    if (!waiting) {
      waiting = true;
      g_waiters.fetch_add(1, std::memory_order_relaxed);
      bool inflight;
      {
        std::lock_guard<std::mutex> lock(g_mu);
        inflight = InflightLocked(now);
      }
      Publish(now, inflight);
    }
    if ((gate & 1) == 0) {
      // Ours, but enough is queued: wait for a marker to complete.
      topping_up = gate;
      ShortSleep(50'000, &slack);
      continue;
    }
    // Do not depend on the background thread alone to move the schedule.
    const uint32_t seq = g_coord->TurnSeq();
    const bool decided = g_coord->Decide(now, g_params);
    RefreshGate();
    if ((g_gate.load(std::memory_order_acquire) & 1) == 0) continue;
    if (decided) {
      g_coord->WaitTurnChange(seq, 1'000'000);
    } else {
      // Another process held the decision lease (for microseconds, as a
      // rule): its decision may have read the members before this one said
      // it waits, and would then not wake it. Try again shortly rather than
      // sleep until the next turn change or 1 ms: a high-priority request
      // that met a best-effort slice's tick waited up to its next tick.
      ShortSleep(20'000, &slack);
    }
  }
  RestoreSlack(slack);
  if (waiting) {
    g_waiters.fetch_sub(1, std::memory_order_relaxed);
    // Only launches that really waited are counted, once each, on the slow
    // path; the fast path never touches the region.
    const uint64_t waited = slice::MonotonicNs() - start - paused_ns;
    SliceDevice(g_device).throttled_ns.fetch_add(waited, std::memory_order_relaxed);
  }
  // Work is about to be queued: say so now rather than at the background
  // thread's next tick, and wake the arbiter once it is queued (the slice
  // is charged from the arbiter's next decision on).
  if (granted) {
    t_gate.ring_after_launch = Publish(slice::MonotonicNs(), true, /*ring=*/false);
    // Last, so that as little as possible lies between the bracket's first
    // event and the launch.
    // Not while another slice's work may share the GPU: the bracket would
    // time its slices of the GPU too (the GPU time-slices between processes).
    const uint64_t now = slice::MonotonicNs();
    t_gate.contended = g_coord->OthersInflight();
    const bool settled = now - g_gate_opened_ns.load(std::memory_order_relaxed) >= kBracketSettleNs;
    t_gate.mark_at =
        bracket_due && settled && !t_gate.contended && OpenBracket(stream, per_thread, behind_own)
            ? t_gate.batch - 1
            : 0;
  }
}

void RingAfterLaunch() {
  t_gate.ring_after_launch = false;
  if (g_coord != nullptr) g_coord->Ring();
}

}  // namespace gpuslice::shim

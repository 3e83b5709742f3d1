#include "daemon/compute/arbiter.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <thread>

#include "daemon/base/log.h"
#include "daemon/compute/arbiter_members.h"
#include "daemon/launch/launcher.h"
#include "slice/compute/coord.h"
#include "slice/compute/coord_board.h"

namespace gpuslice::daemon {

namespace bd = slice::board;

namespace {

uint64_t MonotonicNs() { return slice::MonotonicNs(); }

int FutexWaitv(struct futex_waitv* waiters, unsigned n, uint64_t deadline_ns) {
  timespec ts{time_t(deadline_ns / 1000000000ull), long(deadline_ns % 1000000000ull)};
  return int(syscall(SYS_futex_waitv, waiters, n, 0, &ts, CLOCK_MONOTONIC));
}

void SleepNs(uint64_t ns) {
  timespec ts{time_t(ns / 1000000000ull), long(ns % 1000000000ull)};
  nanosleep(&ts, nullptr);
}

std::string JobDir(const std::string& slices_dir, uint64_t job_id) {
  return slices_dir + "/job-" + std::to_string(job_id);
}

}  // namespace

// One GPU: its board, its registered slices, its thread.
class GpuArbiter {
 public:
  struct Entry {
    bool used = false;
    uint64_t job_id = 0;
    std::shared_ptr<MembersHandle> members;
    uint32_t device_index = 0;
    uint32_t share_milli = 0;
    uint32_t mode = bd::kModeHard;
    uint32_t priority = 1;
    bool paused = false;
    bool shareless = false;  // Registered without a share of its own (SliceView::shareless).
    slice::SliceView state;  // Tokens, virtual time, charge, idle time.
    uint32_t doorbell_seen = 0;
    bool doorbell_broken = false;  // The file was truncated: not waited on.
    uint64_t contended_ns = 0;     // Another slice waited for its turn (ContendedNs).
    bool was_waiting = false;      // Waiting as of the last decision.
    uint64_t waited_ns = 0;        // It waited while another slice held the GPU (WaitedNs).
    GpuSeen gpu_seen[bd::kMembersPerSlice];  // Its members' GPU time counters, last read.
  };

  GpuArbiter(std::string uuid, void* board, const ArbiterOptions& options)
      : uuid_(std::move(uuid)), board_(board), options_(options), last_tick_(MonotonicNs()) {}

  ~GpuArbiter() {
    if (thread_.joinable()) {
      stop_.store(true);
      control_.fetch_add(1);
      syscall(SYS_futex, &control_, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
      thread_.join();
    }
    munmap(board_, bd::kBoardSize);
  }

  bd::BoardHeader& header() { return *static_cast<bd::BoardHeader*>(board_); }
  bd::BoardSlice& board_slice(uint32_t i) {
    return reinterpret_cast<bd::BoardSlice*>(static_cast<char*>(board_) +
                                             bd::kBoardSlicesOffset)[i];
  }

  void StartThread() {
    thread_ = std::thread([this] { Loop(); });
  }

  // Takes back the slices the board records; `resolve` gives each one's
  // members file or null (then it is dropped). Without `resolve`, every
  // entry is cleared (a board this arbiter did not write).
  void Adopt(const std::function<std::shared_ptr<MembersHandle>(uint64_t, uid_t, gid_t)>& resolve) {
    std::lock_guard<std::mutex> lock(mu_);
    for (uint32_t i = 0; i < bd::kBoardSlices; ++i) {
      bd::BoardSlice& b = board_slice(i);
      const uint64_t job = b.job_id.load(std::memory_order_relaxed);
      std::shared_ptr<MembersHandle> m =
          job != 0 && resolve ? resolve(job, b.uid.load(), b.gid.load()) : nullptr;
      if (m == nullptr) {
        ClearBoardSlice(i);
        continue;
      }
      Entry& e = entries_[i];
      e = Entry{};
      e.used = true;
      e.job_id = job;
      e.members = std::move(m);
      e.device_index = b.device_index.load();
      e.share_milli = std::min<uint32_t>(b.share_milli.load(), 1000);
      e.mode = b.mode.load() == bd::kModeWorkConserving ? bd::kModeWorkConserving : bd::kModeHard;
      e.priority = std::min<uint32_t>(b.priority.load(), 2);
      e.paused = (b.flags.load() & bd::kSlicePaused) != 0;
      e.shareless = (b.flags.load() & bd::kSliceNoShare) != 0;
      e.state.tokens_ns = b.tokens_ns.load();
      e.state.vtime = b.vtime.load();
      e.state.charged_ns = b.charged_ns.load();
      e.state.idle_since_ns = MonotonicNs();
    }
    // Whatever turn the old arbiter left is void: decide afresh.
    turn_ = slice::TurnView{};
    PublishTurn(true, false);
  }

  // A counter of the job's entries (contended_ns, waited_ns), summed.
  uint64_t Counter(uint64_t job_id, uint64_t Entry::*counter) {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t sum = 0;
    for (const Entry& e : entries_) {
      if (e.used && e.job_id == job_id) sum += e.*counter;
    }
    return sum;
  }

  // What the job's slice was charged here; nullopt: not registered here.
  std::optional<uint64_t> Charged(uint64_t job_id) {
    std::lock_guard<std::mutex> lock(mu_);
    std::optional<uint64_t> sum;
    for (const Entry& e : entries_) {
      if (e.used && e.job_id == job_id) sum = sum.value_or(0) + e.state.charged_ns;
    }
    return sum;
  }

  void Distrust(uint64_t job_id) {
    std::lock_guard<std::mutex> lock(mu_);
    for (Entry& e : entries_) {
      if (e.used && e.job_id == job_id) e.state.distrusted = true;
    }
  }

  std::vector<uint64_t> Jobs() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<uint64_t> out;
    for (const Entry& e : entries_) {
      if (e.used) out.push_back(e.job_id);
    }
    return out;
  }

  // `distrusted`: the audit found the job's reports short
  // (Arbiter::DistrustReports); a new board entry (a move) keeps that.
  core::Status Upsert(uint64_t job_id, std::shared_ptr<MembersHandle> members,
                      uint32_t device_index, const SliceLimits& limits, bool distrusted) {
    std::lock_guard<std::mutex> lock(mu_);
    int32_t at = -1, free_at = -1;
    for (uint32_t i = 0; i < bd::kBoardSlices; ++i) {
      if (entries_[i].used && entries_[i].job_id == job_id) at = int32_t(i);
      if (!entries_[i].used && free_at < 0) free_at = int32_t(i);
    }
    if (at < 0) {
      if (free_at < 0) {
        return core::ResourceExhaustedError("compute arbiter of " + uuid_ + ": " +
                                            std::to_string(bd::kBoardSlices) +
                                            " slices with a share already");
      }
      at = free_at;
      Entry& e = entries_[size_t(at)];
      e = Entry{};
      e.used = true;
      e.job_id = job_id;
      e.state.idle_since_ns = MonotonicNs();
    }
    Entry& e = entries_[size_t(at)];
    e.members = std::move(members);
    e.device_index = device_index;
    e.share_milli = std::min<uint32_t>(limits.compute_milli, 1000);
    e.mode = limits.work_conserving ? bd::kModeWorkConserving : bd::kModeHard;
    e.priority = uint32_t(limits.priority);
    e.paused = limits.launches_paused;
    e.shareless = limits.no_share;
    e.state.distrusted |= distrusted;
    bd::BoardSlice& b = board_slice(uint32_t(at));
    b.share_milli.store(e.share_milli, std::memory_order_relaxed);
    b.mode.store(e.mode, std::memory_order_relaxed);
    b.priority.store(e.priority, std::memory_order_relaxed);
    b.flags.store(SliceFlags(e), std::memory_order_relaxed);
    b.uid.store(limits.uid, std::memory_order_relaxed);
    b.gid.store(limits.gid, std::memory_order_relaxed);
    b.device_index.store(device_index, std::memory_order_relaxed);
    // Release: a shim that finds its job id sees the configuration with it.
    b.job_id.store(job_id, std::memory_order_release);
    Poke();
    return core::Status::Ok();
  }

  bool Remove(uint64_t job_id) {
    std::lock_guard<std::mutex> lock(mu_);
    bool found = false;
    for (uint32_t i = 0; i < bd::kBoardSlices; ++i) {
      if (!entries_[i].used || entries_[i].job_id != job_id) continue;
      entries_[i] = Entry{};
      ClearBoardSlice(i);
      found = true;
    }
    if (found) Poke();
    return found;
  }

  // One decision at `now_ns`. Returns how long the thread may sleep until
  // the next one unless a doorbell rings: the beat while no slice is
  // active, the quiet tick while the turn is quiet (QuietTurn), else the
  // active tick.
  uint64_t Tick(uint64_t now_ns) {
    std::lock_guard<std::mutex> lock(mu_);
    slice::SliceView views[bd::kBoardSlices];
    for (uint32_t i = 0; i < bd::kBoardSlices; ++i) {
      Entry& e = entries_[i];
      if (!e.used) continue;
      const Report r = ReadReport(*e.members, e.device_index, now_ns, e.gpu_seen);
      e.doorbell_seen = r.doorbell;
      slice::SliceView& v = views[i];
      v = e.state;
      v.live = r.live;
      v.waiting = r.waiting && !e.paused;  // A paused slice gets no turns.
      v.inflight = r.inflight;
      v.gpu_time = r.gpu_time;  // Disregarded while distrusted (SliceView::ChargedByReports).
      v.gpu_ns = r.gpu_ns;
      v.share_milli = e.share_milli;
      v.mode = e.mode == bd::kModeWorkConserving ? slice::coord::kModeWorkConserving
                                                 : slice::coord::kModeHard;
      v.priority = e.priority;
      v.shareless = e.shareless;
    }
    // Who waited for the GPU since the last decision, as the previous one
    // left it (the reports just read say who waits from now on): a slice
    // waited if it said so while another held the GPU; the others were
    // contended by it. One pass to count, one to charge.
    const uint64_t elapsed = now_ns > last_tick_ ? now_ns - last_tick_ : 0;
    auto waited = [&](uint32_t i) {
      return entries_[i].used && entries_[i].was_waiting && turn_.holder >= 0 &&
             turn_.holder != int32_t(i);
    };
    uint32_t waiters = 0;
    for (uint32_t i = 0; i < bd::kBoardSlices; ++i) waiters += waited(i) ? 1 : 0;
    for (uint32_t i = 0; i < bd::kBoardSlices; ++i) {
      Entry& e = entries_[i];
      if (!e.used) continue;
      const bool self = waited(i);
      if (self) e.waited_ns += elapsed;
      if (waiters > (self ? 1u : 0u)) e.contended_ns += elapsed;
      e.was_waiting = views[i].waiting && views[i].live;
    }
    const slice::Outcome out = slice::Advance(now_ns, last_tick_, turn_, views, options_.params);
    last_tick_ = std::max(now_ns, last_tick_);
    bool active = turn_.holder >= 0;
    for (uint32_t i = 0; i < bd::kBoardSlices; ++i) {
      Entry& e = entries_[i];
      if (!e.used) continue;
      const slice::SliceView& v = views[i];
      active |= v.Active();
      e.state.tokens_ns = v.tokens_ns;
      e.state.vtime = v.vtime;
      e.state.charged_ns = v.charged_ns;
      e.state.idle_since_ns = v.idle_since_ns;
      e.state.was_inflight = v.was_inflight;
      e.state.prepaid_ns = v.prepaid_ns;
      e.state.corun = v.corun;
      e.state.duty_milli = v.duty_milli;
      e.state.duty_wall_ns = v.duty_wall_ns;
      e.state.duty_gpu_ns = v.duty_gpu_ns;
      e.state.host_duty_milli = v.host_duty_milli;
      e.state.host_wall_ns = v.host_wall_ns;
      e.state.host_gpu_ns = v.host_gpu_ns;
      e.state.host_measured_ns = v.host_measured_ns;
      e.state.woke_ns = v.woke_ns;
      bd::BoardSlice& b = board_slice(i);
      b.tokens_ns.store(v.tokens_ns, std::memory_order_relaxed);
      b.vtime.store(v.vtime, std::memory_order_relaxed);
      b.charged_ns.store(v.charged_ns, std::memory_order_relaxed);
      b.idle_since_ns.store(v.idle_since_ns, std::memory_order_relaxed);
      b.flags.store(SliceFlags(e), std::memory_order_relaxed);
      b.reported.store(
          (v.waiting ? bd::kMemberWaiting : 0) | (v.inflight ? bd::kMemberInflight : 0),
          std::memory_order_relaxed);
    }
    bd::BoardHeader& h = header();
    h.ticks.fetch_add(1, std::memory_order_relaxed);
    h.arbiter_beat_ns.store(now_ns, std::memory_order_relaxed);
    PublishTurn(out.changed, out.preempted, out.corun_changed);
    if (!active) return bd::kArbiterBeatNs;
    return QuietTurn(views) ? options_.quiet_tick_ns : options_.active_tick_ns;
  }

  void NoteBell() { header().bells.fetch_add(1, std::memory_order_relaxed); }

 private:
  void ClearBoardSlice(uint32_t i) {
    bd::BoardSlice& b = board_slice(i);
    b.job_id.store(0, std::memory_order_release);
    b.share_milli.store(0, std::memory_order_relaxed);
    b.flags.store(0, std::memory_order_relaxed);
    b.tokens_ns.store(0, std::memory_order_relaxed);
    b.vtime.store(0, std::memory_order_relaxed);
    b.charged_ns.store(0, std::memory_order_relaxed);
    b.reported.store(0, std::memory_order_relaxed);
  }

  // Whether the open turn needs no decision before the quiet tick (issue
  // 19), as slice::CooperativeTurns::QuietNs judges it for the cooperative
  // file: the slices that launch (the holder, its co-runners) are trusted,
  // every hard one among them has tokens for two quiet ticks and an active
  // one (its reports may lag by a quiet tick of its own processes), the
  // others have nothing waiting or in flight, and, unless the holder is
  // alone, no process waits. Whatever would change the turn rings a
  // doorbell or pokes first: an idle slice that starts to launch, a launch
  // that starts to wait (slice::BoardTurns::Publish), Register, Update and
  // Drop. Needs mu_.
  bool QuietTurn(const slice::SliceView* views) const {
    if (turn_.state != slice::coord::kTurnOpen || turn_.holder < 0) return false;
    const int64_t margin = int64_t(2 * options_.quiet_tick_ns + options_.active_tick_ns);
    bool alone = true, waiting = false;
    for (uint32_t i = 0; i < bd::kBoardSlices; ++i) {
      if (!entries_[i].used) continue;
      const slice::SliceView& v = views[i];
      waiting |= v.live && v.waiting;
      if (int32_t(i) != turn_.holder) alone = false;
      if (int32_t(i) != turn_.holder && !v.corun) {
        if (v.live && (v.waiting || v.inflight)) return false;
        continue;
      }
      if (v.distrusted) return false;
      if (v.mode == slice::coord::kModeHard && v.tokens_ns < margin) return false;
    }
    return alone || !waiting;
  }

  // The board's flags of a slice.
  static uint32_t SliceFlags(const Entry& e) {
    return (e.paused ? bd::kSlicePaused : 0) | (e.state.corun ? bd::kSliceCoRun : 0) |
           (e.shareless ? bd::kSliceNoShare : 0);
  }

  // Writes the turn; on a change (or one of who co-runs, `corun_changed`),
  // moves the sequence and wakes the launchers that wait on it. Needs mu_.
  void PublishTurn(bool changed, bool preempted, bool corun_changed = false) {
    bd::BoardHeader& h = header();
    if (changed) {
      h.holder.store(turn_.holder, std::memory_order_relaxed);
      h.turn_state.store(uint32_t(turn_.state), std::memory_order_relaxed);
      h.turn_start_ns.store(turn_.start_ns, std::memory_order_relaxed);
      if (turn_.state == slice::coord::kTurnOpen) h.turns.fetch_add(1, std::memory_order_relaxed);
      if (preempted) h.preemptions.fetch_add(1, std::memory_order_relaxed);
    }
    h.turn_end_ns.store(turn_.end_ns, std::memory_order_relaxed);
    if (changed || corun_changed) {
      // Release: a launcher that sees the new sequence sees the new turn.
      h.turn_seq.fetch_add(1, std::memory_order_release);
      syscall(SYS_futex, &h.turn_seq, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
    }
  }

  // Makes the thread look now (a slice came, changed or left).
  void Poke() {
    control_.fetch_add(1, std::memory_order_release);
    syscall(SYS_futex, &control_, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
  }

  void Loop() {
    pthread_setname_np(pthread_self(), "gpuslice-arbiter");
    // Every hand-over waits for this thread to run: on a busy machine a
    // thread of ordinary weight woke milliseconds late, and a work-conserving
    // slice alone got half of what it got deciding for itself. It sleeps
    // between decisions of microseconds (rate-limited above), so a high
    // weight costs the machine nothing. Only a root daemon may raise it.
    if (options_.nice != 0) setpriority(PRIO_PROCESS, pid_t(syscall(SYS_gettid)), options_.nice);
    uint64_t last = 0;
    while (!stop_.load(std::memory_order_acquire)) {
      uint64_t now = MonotonicNs();
      // The rate limit: a doorbell rung in a loop gets a decision every
      // min_tick_gap_ns at most.
      if (last != 0 && now < last + options_.min_tick_gap_ns) {
        SleepNs(last + options_.min_tick_gap_ns - now);
        now = MonotonicNs();
      }
      const uint32_t control = control_.load(std::memory_order_acquire);
      const uint64_t deadline = now + Tick(now);
      last = now;
      struct futex_waitv waiters[1 + bd::kBoardSlices] = {};
      unsigned n = 0;
      waiters[n].val = control;
      waiters[n].uaddr = reinterpret_cast<uint64_t>(&control_);
      waiters[n].flags = FUTEX_32 | FUTEX_PRIVATE_FLAG;
      ++n;
      std::vector<uint32_t> slot_of;  // waiters[k + 1] is entries_[slot_of[k]].
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (uint32_t i = 0; i < bd::kBoardSlices; ++i) {
          Entry& e = entries_[i];
          if (!e.used || e.members->doorbell() == nullptr) continue;
          if (e.doorbell_broken) {
            struct stat st {};
            if (fstat(e.members->fd, &st) != 0 || uint64_t(st.st_size) < bd::kMembersSize) continue;
            e.doorbell_broken = false;
          }
          waiters[n].val = e.doorbell_seen;
          waiters[n].uaddr = reinterpret_cast<uint64_t>(e.members->doorbell());
          waiters[n].flags = FUTEX_32;  // Shared: the job rings it through its own mapping.
          slot_of.push_back(i);
          ++n;
        }
      }
      const int r = FutexWaitv(waiters, n, deadline);
      if (r > 0) NoteBell();
      if (r < 0 && errno == EFAULT) {
        // A members file was truncated under its doorbell: wait on the others
        // only until it is whole again (its slice still gets the cadence).
        std::lock_guard<std::mutex> lock(mu_);
        for (uint32_t i : slot_of) {
          struct stat st {};
          Entry& e = entries_[i];
          if (e.used &&
              (fstat(e.members->fd, &st) != 0 || uint64_t(st.st_size) < bd::kMembersSize)) {
            e.doorbell_broken = true;
          }
        }
      } else if (r < 0 && errno == ENOSYS) {
        SleepNs(deadline > MonotonicNs()
                    ? std::min<uint64_t>(deadline - MonotonicNs(), options_.active_tick_ns)
                    : 0);
      }
    }
  }

  const std::string uuid_;
  void* const board_;
  const ArbiterOptions& options_;
  std::mutex mu_;
  Entry entries_[bd::kBoardSlices];  // Guarded by mu_; index = board slice index.
  slice::TurnView turn_;             // Guarded by mu_.
  uint64_t last_tick_;               // Guarded by mu_.
  std::atomic<uint32_t> control_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

Arbiter::Arbiter(ArbiterOptions options) : options_(std::move(options)) {}

Arbiter::~Arbiter() {
  std::lock_guard<std::mutex> lock(mu_);
  gpus_.clear();  // Joins the threads.
  members_.clear();
}

std::string Arbiter::MembersPath(uint64_t job_id) const {
  return JobDir(options_.slices_dir, job_id) + "/members";
}

std::string Arbiter::BoardPath(const std::string& uuid) const {
  return slice::BoardPath(options_.coord_dir, uuid);
}

core::Result<GpuArbiter*> Arbiter::Gpu(const std::string& uuid) {
  auto it = gpus_.find(uuid);
  if (it != gpus_.end()) return it->second.get();
  if (options_.coord_dir.empty()) {
    return core::FailedPreconditionError("no coordination directory for the compute boards");
  }
  GPUSLICE_ASSIGN_OR_RETURN(void* board,
                            slice::CreateOrOpenBoard(BoardPath(uuid), uuid, options_.board_mode));
  auto gpu = std::make_unique<GpuArbiter>(uuid, board, options_);
  gpu->Adopt(nullptr);  // Not recovered: whatever it records is stale.
  GpuArbiter* raw = gpu.get();
  gpus_[uuid] = std::move(gpu);
  if (options_.threads) raw->StartThread();
  return raw;
}

core::Result<std::shared_ptr<MembersHandle>> Arbiter::Members(const SliceLimits& limits,
                                                              bool reuse) {
  auto it = members_.find(limits.job_id);
  if (it != members_.end()) return it->second;
  // A live change of a job this arbiter does not know (it was not on a board
  // to recover): its running processes keep reporting into the file they
  // have; a new one would leave them unheard.
  if (reuse) {
    if (auto h = OpenExistingMembers(MembersPath(limits.job_id), limits.job_id, limits.uid,
                                     limits.gid)) {
      members_[limits.job_id] = h;
      return h;
    }
  }
  const std::string dir = JobDir(options_.slices_dir, limits.job_id);
  if (mkdir(options_.slices_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoError(errno, "create " + options_.slices_dir);
  }
  // Root's, 0755: the job can reach its files but not rename or replace them.
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoError(errno, "create " + dir);
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
    return core::FailedPreconditionError(dir + " is not the daemon's directory");
  }
  auto handle = std::make_shared<MembersHandle>();
  handle->job_id = limits.job_id;
  handle->uid = limits.uid;
  handle->gid = limits.gid;
  handle->path = dir + "/members";
  GPUSLICE_ASSIGN_OR_RETURN(
      handle->fd, slice::CreateMembersFile(handle->path, limits.job_id, limits.uid,
                                           limits.shared_gid != 0 ? limits.shared_gid : limits.gid,
                                           limits.shared_gid != 0 ? 0660 : 0600));
  handle->map = mmap(nullptr, bd::kMembersSize, PROT_READ, MAP_SHARED, handle->fd, 0);
  if (handle->map == MAP_FAILED) return ErrnoError(errno, "map " + handle->path);
  members_[limits.job_id] = handle;
  return handle;
}

core::Status Arbiter::Recover() {
  std::lock_guard<std::mutex> lock(mu_);
  if (options_.coord_dir.empty()) return core::Status::Ok();
  DIR* d = opendir(options_.coord_dir.c_str());
  if (d == nullptr)
    return errno == ENOENT ? core::Status::Ok() : ErrnoError(errno, "list " + options_.coord_dir);
  std::vector<std::string> boards;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind("gpu-", 0) == 0 && name.size() > 10 &&
        name.compare(name.size() - 6, 6, ".board") == 0) {
      boards.push_back(options_.coord_dir + "/" + name);
    }
  }
  closedir(d);
  auto resolve = [&](uint64_t job, uid_t uid, gid_t gid) -> std::shared_ptr<MembersHandle> {
    auto it = members_.find(job);
    if (it != members_.end()) return it->second;
    std::shared_ptr<MembersHandle> h = OpenExistingMembers(MembersPath(job), job, uid, gid);
    if (h == nullptr) {
      LogWarn("compute arbiter: job " + std::to_string(job) + " is on a board but its " +
              MembersPath(job) + " is missing or not its own; dropped");
      return nullptr;
    }
    members_[job] = h;
    return h;
  };
  for (const std::string& path : boards) {
    auto board = slice::CreateOrOpenBoard(path, "", options_.board_mode);
    if (!board.ok()) {
      LogWarn("compute arbiter: " + board.status().message());
      continue;
    }
    const auto* h = static_cast<const bd::BoardHeader*>(*board);
    std::string uuid(h->uuid, strnlen(h->uuid, sizeof(h->uuid)));
    if (uuid.empty() || gpus_.count(uuid) || slice::BoardPath(options_.coord_dir, uuid) != path) {
      munmap(*board, bd::kBoardSize);
      continue;
    }
    auto gpu = std::make_unique<GpuArbiter>(uuid, *board, options_);
    gpu->Adopt(resolve);
    GpuArbiter* raw = gpu.get();
    gpus_[uuid] = std::move(gpu);
    if (options_.threads) raw->StartThread();
    for (uint64_t job : raw->Jobs()) {
      LogInfo("compute arbiter: job " + std::to_string(job) + " on " + uuid + " recovered");
    }
  }
  return core::Status::Ok();
}

core::Status Arbiter::Register(const SliceLimits& limits) {
  std::lock_guard<std::mutex> lock(mu_);
  // A job registered again (an elastic job's new slice) starts over.
  for (auto& [uuid, gpu] : gpus_) {
    if (std::find(limits.uuids.begin(), limits.uuids.end(), uuid) == limits.uuids.end()) {
      gpu->Remove(limits.job_id);
    }
  }
  members_.erase(limits.job_id);
  GPUSLICE_ASSIGN_OR_RETURN(std::shared_ptr<MembersHandle> members, Members(limits, false));
  for (uint32_t i = 0; i < limits.uuids.size(); ++i) {
    GPUSLICE_ASSIGN_OR_RETURN(GpuArbiter * gpu, Gpu(limits.uuids[i]));
    if (limits.compute_milli == 0) {
      gpu->Remove(limits.job_id);  // No share: not arbitrated on this GPU.
      continue;
    }
    GPUSLICE_RETURN_IF_ERROR(
        gpu->Upsert(limits.job_id, members, i, limits, distrusted_.contains(limits.job_id)));
  }
  return core::Status::Ok();
}

core::Status Arbiter::Update(const SliceLimits& limits) {
  std::lock_guard<std::mutex> lock(mu_);
  GPUSLICE_ASSIGN_OR_RETURN(std::shared_ptr<MembersHandle> members, Members(limits, true));
  for (const std::string& uuid : limits.uuids) {
    GPUSLICE_ASSIGN_OR_RETURN(GpuArbiter * gpu, Gpu(uuid));
    // The device's index among the slice's devices is what the board
    // records for it (set at Register); a device first seen here gets 0.
    uint32_t index = 0;
    const int32_t at = [&] {
      for (uint32_t i = 0; i < bd::kBoardSlices; ++i) {
        if (gpu->board_slice(i).job_id.load() == limits.job_id) return int32_t(i);
      }
      return -1;
    }();
    if (at >= 0) index = gpu->board_slice(uint32_t(at)).device_index.load();
    if (limits.compute_milli == 0) {
      gpu->Remove(limits.job_id);
      continue;
    }
    GPUSLICE_RETURN_IF_ERROR(
        gpu->Upsert(limits.job_id, members, index, limits, distrusted_.contains(limits.job_id)));
  }
  return core::Status::Ok();
}

core::Status Arbiter::Move(const SliceLimits& limits,
                           const std::vector<std::pair<std::string, std::string>>& pairs) {
  std::lock_guard<std::mutex> lock(mu_);
  GPUSLICE_ASSIGN_OR_RETURN(std::shared_ptr<MembersHandle> members, Members(limits, true));
  for (const auto& [from, to] : pairs) {
    if (auto it = gpus_.find(from); it != gpus_.end()) it->second->Remove(limits.job_id);
    if (limits.compute_milli == 0) continue;  // Not arbitrated anywhere.
    const auto at = std::find(limits.uuids.begin(), limits.uuids.end(), to);
    if (at == limits.uuids.end()) {
      return core::InvalidArgumentError("move to " + to + ": not one of the slice's devices");
    }
    GPUSLICE_ASSIGN_OR_RETURN(GpuArbiter * gpu, Gpu(to));
    GPUSLICE_RETURN_IF_ERROR(gpu->Upsert(limits.job_id, members,
                                         uint32_t(at - limits.uuids.begin()), limits,
                                         distrusted_.contains(limits.job_id)));
  }
  return core::Status::Ok();
}

void Arbiter::Drop(uint64_t job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [uuid, gpu] : gpus_) gpu->Remove(job_id);
  distrusted_.erase(job_id);
  auto it = members_.find(job_id);
  const std::string path = it != members_.end() ? it->second->path : MembersPath(job_id);
  if (it != members_.end()) members_.erase(it);
  unlink(path.c_str());
  rmdir(JobDir(options_.slices_dir, job_id).c_str());  // Empty unless others keep files there.
}

std::vector<uint64_t> Arbiter::Jobs() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint64_t> out;
  for (const auto& [job, m] : members_) out.push_back(job);
  return out;
}

uint64_t Arbiter::ContendedNs(uint64_t job_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t sum = 0;
  for (const auto& [uuid, gpu] : gpus_)
    sum += gpu->Counter(job_id, &GpuArbiter::Entry::contended_ns);
  return sum;
}

uint64_t Arbiter::WaitedNs(uint64_t job_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t sum = 0;
  for (const auto& [uuid, gpu] : gpus_) sum += gpu->Counter(job_id, &GpuArbiter::Entry::waited_ns);
  return sum;
}

std::optional<uint64_t> Arbiter::ChargedNs(uint64_t job_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::optional<uint64_t> sum;
  for (const auto& [uuid, gpu] : gpus_) {
    if (auto c = gpu->Charged(job_id)) sum = sum.value_or(0) + *c;
  }
  return sum;
}

void Arbiter::DistrustReports(uint64_t job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  distrusted_.insert(job_id);
  for (const auto& [uuid, gpu] : gpus_) gpu->Distrust(job_id);
}

uint64_t Arbiter::TickForTest(const std::string& uuid, uint64_t now_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = gpus_.find(uuid);
  if (it == gpus_.end()) return 0;
  return it->second->Tick(now_ns);
}

}  // namespace gpuslice::daemon

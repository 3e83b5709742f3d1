#include "slice/compute/coord_turns.h"

#include <algorithm>

#include "slice/region/region_layout.h"

namespace gpuslice::slice {
namespace {

// A slice whose turn is quiet with this much of its cap left (QuietNs) rings
// the arbiter for none of its edges: above the arbiter's own margin for a
// quiet turn (two quiet ticks and an active one, 2.2 ms by default).
constexpr uint64_t kQuietRingNs = 3 * board::kQuietTickNs;

constexpr uint64_t MemberOwner(int32_t pid) { return (uint64_t{uint32_t(pid)} << 32) | 1; }

}  // namespace

// --- The cooperative file -------------------------------------------------

core::Status CooperativeTurns::Join(int32_t pid, uint64_t now_ns) {
  core::Result<uint32_t> joined = coord_->Join(key_, pid, now_ns);
  if (!joined.ok()) return joined.status();
  member_.store(int32_t(*joined), std::memory_order_relaxed);
  return core::Status::Ok();
}

bool CooperativeTurns::Joined(int32_t pid) const {
  const int32_t m = member_.load(std::memory_order_relaxed);
  return m >= 0 &&
         coord_->member(uint32_t(m)).owner.load(std::memory_order_relaxed) == MemberOwner(pid);
}

void CooperativeTurns::Leave(int32_t pid) {
  const int32_t m = member_.exchange(-1);
  if (m >= 0) coord_->Leave(uint32_t(m), pid);
}

void CooperativeTurns::Configure(uint32_t share_milli, coord::Mode mode, uint32_t priority) {
  const int32_t m = member_.load(std::memory_order_relaxed);
  if (m >= 0) coord_->Configure(uint32_t(m), share_milli, mode, priority);
}

bool CooperativeTurns::Publish(uint32_t flags, uint64_t now_ns, bool) {
  const int32_t m = member_.load(std::memory_order_relaxed);
  if (m < 0) return false;
  coord::MemberEntry& e = coord_->member(uint32_t(m));
  e.flags.store(flags, std::memory_order_relaxed);
  e.heartbeat_ns.store(now_ns, std::memory_order_relaxed);
  return false;  // Decisions are taken by the members themselves.
}

bool CooperativeTurns::Decide(uint64_t now_ns, const PolicyParams& params) {
  if (member_.load(std::memory_order_relaxed) < 0) return true;
  return coord_->Tick(now_ns, params);
}

bool CooperativeTurns::HoldsOpenTurn(uint64_t) const {
  const int32_t m = member_.load(std::memory_order_relaxed);
  if (m < 0) return false;
  const coord::CoordHeader& h = coord_->header();
  const int32_t slice = coord_->member(uint32_t(m)).slice.load(std::memory_order_relaxed);
  const int32_t holder = h.holder.load(std::memory_order_acquire);
  const uint32_t state = h.turn_state.load(std::memory_order_relaxed);
  if (holder == slice && state == coord::kTurnOpen) return true;
  // Co-running beside the holder, during its turn or its drain.
  return state != coord::kTurnNone && slice >= 0 && uint32_t(slice) < coord::kMaxSlices &&
         (coord_->slice(uint32_t(slice)).flags.load(std::memory_order_relaxed) &
          coord::kSliceCoRun) != 0;
}

bool CooperativeTurns::Outranked(uint32_t priority) const {
  // A scan of kMaxSlices entries per background tick.
  for (uint32_t s = 0; s < coord::kMaxSlices; ++s) {
    const coord::SliceEntry& e = coord_->slice(s);
    const uint64_t key = e.key.load(std::memory_order_relaxed);
    if (key != 0 && key != key_ && e.priority.load(std::memory_order_relaxed) > priority) {
      return true;
    }
  }
  return false;
}

bool CooperativeTurns::OthersOnGpu() const {
  const int32_t m = member_.load(std::memory_order_relaxed);
  const int32_t mine =
      m >= 0 ? coord_->member(uint32_t(m)).slice.load(std::memory_order_relaxed) : -1;
  for (uint32_t s = 0; s < coord::kMaxSlices; ++s) {
    if (int32_t(s) != mine && coord_->slice(s).key.load(std::memory_order_relaxed) != 0) {
      return true;
    }
  }
  return false;
}

bool CooperativeTurns::OthersInflight() const {
  const int32_t m = member_.load(std::memory_order_relaxed);
  const int32_t mine =
      m >= 0 ? coord_->member(uint32_t(m)).slice.load(std::memory_order_relaxed) : -1;
  for (uint32_t i = 0; i < coord::kMaxMembers; ++i) {
    const coord::MemberEntry& e = coord_->member(i);
    if (e.owner.load(std::memory_order_relaxed) != 0 &&
        e.slice.load(std::memory_order_relaxed) != mine &&
        (e.flags.load(std::memory_order_relaxed) & coord::kMemberInflight) != 0) {
      return true;
    }
  }
  return false;
}

uint64_t CooperativeTurns::QuietNs() const {
  const int32_t m = member_.load(std::memory_order_relaxed);
  if (m < 0) return 0;
  const int32_t mine = coord_->member(uint32_t(m)).slice.load(std::memory_order_relaxed);
  if (mine < 0 || uint32_t(mine) >= coord::kMaxSlices) return 0;
  // Alone, or every slice on the GPU launching with nobody waiting for a
  // turn: the holder's open turn and co-runners beside it. There
  // the others' decisions change nothing for this slice until one of them
  // runs out of tokens or wants a turn of its own, and both change the turn
  // or its co-runners (which ends the wait at once) or are seen at the next
  // tick. At the usual pace, a co-running pair of 20 us loops beside a
  // busy process makes 0.65-0.70 of its unshared launches: each gate thread
  // wakes ~4,000 times a second and shares the loops' CPU.
  const coord::CoordHeader& h = coord_->header();
  const int32_t holder = h.holder.load(std::memory_order_relaxed);
  const bool open = h.turn_state.load(std::memory_order_relaxed) == coord::kTurnOpen;
  bool alone = true;
  for (uint32_t s = 0; s < coord::kMaxSlices; ++s) {
    const coord::SliceEntry& other = coord_->slice(s);
    if (s == uint32_t(mine) || other.key.load(std::memory_order_relaxed) == 0) continue;
    alone = false;
    const bool launching = (int32_t(s) == holder && open) ||
                           (other.flags.load(std::memory_order_relaxed) & coord::kSliceCoRun) != 0;
    if (!launching) return 0;
  }
  if (!alone) {
    if (!open) return 0;
    for (uint32_t i = 0; i < coord::kMaxMembers; ++i) {
      const coord::MemberEntry& other = coord_->member(i);
      if (other.owner.load(std::memory_order_relaxed) != 0 &&
          (other.flags.load(std::memory_order_relaxed) & coord::kMemberWaiting) != 0) {
        return 0;
      }
    }
  }
  const coord::SliceEntry& e = coord_->slice(uint32_t(mine));
  if (e.mode.load(std::memory_order_relaxed) != coord::kModeHard) return UINT64_MAX;
  // As of the last decision; the caller leaves a margin for what was used
  // since.
  return uint64_t(std::max<int64_t>(e.tokens_ns.load(std::memory_order_relaxed), 0));
}

uint32_t CooperativeTurns::TurnSeq() const {
  return coord_->header().turn_seq.load(std::memory_order_acquire);
}

void CooperativeTurns::WaitTurnChange(uint32_t seq, uint64_t timeout_ns) const {
  coord_->WaitTurnChange(seq, timeout_ns);
}

void CooperativeTurns::CountLaunch() {
  const int32_t m = member_.load(std::memory_order_relaxed);
  if (m >= 0) coord_->member(uint32_t(m)).launches.fetch_add(1, std::memory_order_relaxed);
}

void CooperativeTurns::AddGpuNs(uint64_t ns) {
  const int32_t m = member_.load(std::memory_order_relaxed);
  if (m < 0) return;
  const int32_t s = coord_->member(uint32_t(m)).slice.load(std::memory_order_relaxed);
  if (s >= 0 && uint32_t(s) < coord::kMaxSlices) {
    coord_->slice(uint32_t(s)).gpu_ns.fetch_add(ns, std::memory_order_relaxed);
  }
}

// --- The daemon's board ---------------------------------------------------

core::Status BoardTurns::Join(int32_t pid, uint64_t now_ns) {
  core::Result<uint32_t> slot = members_->Claim(pid, device_index_, now_ns);
  if (!slot.ok()) return slot.status();
  published_.store(0, std::memory_order_relaxed);
  slot_.store(int32_t(*slot), std::memory_order_relaxed);
  return core::Status::Ok();
}

bool BoardTurns::Joined(int32_t pid) const {
  const int32_t s = slot_.load(std::memory_order_relaxed);
  return s >= 0 &&
         members_->slot(uint32_t(s)).owner.load(std::memory_order_relaxed) == MemberOwner(pid);
}

void BoardTurns::Leave(int32_t pid) {
  const int32_t s = slot_.exchange(-1);
  if (s >= 0) members_->Leave(uint32_t(s), pid);
}

bool BoardTurns::Publish(uint32_t flags, uint64_t now_ns, bool ring) {
  const int32_t s = slot_.load(std::memory_order_relaxed);
  if (s < 0) return false;
  board::MemberSlot& m = members_->slot(uint32_t(s));
  m.flags.store(flags, std::memory_order_relaxed);
  m.heartbeat_ns.store(now_ns, std::memory_order_release);
  const uint32_t before = published_.exchange(flags, std::memory_order_relaxed);
  // The arbiter looks at once when a launch starts waiting (it may hand the
  // GPU over now) and when work starts or stops being in flight (it charges
  // the slice between those two edges, and a closing turn may end);
  // everything else it sees at its next tick (200 us while active).
  const bool started_waiting =
      (flags & board::kMemberWaiting) != 0 && (before & board::kMemberWaiting) == 0;
  const bool edge = ((before ^ flags) & board::kMemberInflight) != 0;
  if (!started_waiting && !edge) return false;
  // In a quiet turn the arbiter decides at its quiet tick whatever this
  // slice reports (daemon::GpuArbiter::QuietTurn): a ring would only wake it
  // for nothing, on the cores the slice's own loop needs.
  if (QuietNs() >= kQuietRingNs) return false;
  if (!ring) return true;
  members_->Ring();
  return false;
}

void BoardTurns::Ring() { members_->Ring(); }

core::Status BoardTurns::MoveTo(const std::string& board_path) {
  if (board_path == Current().path) return core::Status::Ok();
  GPUSLICE_ASSIGN_OR_RETURN(std::unique_ptr<BoardView> view, BoardView::Open(board_path));
  bound_.push_back(std::make_unique<Bound>(Bound{std::move(view), board_path}));
  hint_.store(-1, std::memory_order_relaxed);
  current_.store(bound_.back().get(), std::memory_order_release);
  // The new GPU's arbiter learns at once that this slice has work.
  members_->Ring();
  return core::Status::Ok();
}

int32_t BoardTurns::SliceIndex() const {
  const int32_t i = board().FindSlice(members_->job_id(), hint_.load(std::memory_order_relaxed));
  hint_.store(i, std::memory_order_relaxed);
  return i;
}

bool BoardTurns::HoldsOpenTurn(uint64_t now_ns) const {
  // No arbiter (the daemon is stopped or restarting), or this slice is not
  // on its board: nothing arbitrates; launches go (docs/COMPUTE.md).
  if (board().ArbiterStale(now_ns)) return true;
  const int32_t i = SliceIndex();
  if (i < 0) return true;
  const board::BoardHeader& h = board().header();
  const int32_t holder = h.holder.load(std::memory_order_acquire);
  const uint32_t state = h.turn_state.load(std::memory_order_relaxed);
  if (holder == i && state == board::kTurnOpen) return true;
  // Co-running beside the holder, during its turn or its drain.
  return state != board::kTurnNone &&
         (board().slice(uint32_t(i)).flags.load(std::memory_order_relaxed) & board::kSliceCoRun) !=
             0;
}

uint64_t BoardTurns::QuietNs() const {
  const int32_t mine = SliceIndex();
  if (mine < 0) return 0;
  // As the arbiter judges a quiet turn, from what it last published: the
  // turn is open; the slices that launch (the holder, its co-runners) wait
  // for nothing unless the holder is alone; the others report nothing
  // waiting or in flight. Any change of the turn or of who co-runs wakes
  // the caller's wait at once.
  const board::BoardHeader& h = board().header();
  if (h.turn_state.load(std::memory_order_relaxed) != board::kTurnOpen) return 0;
  const int32_t holder = h.holder.load(std::memory_order_relaxed);
  bool alone = true, waiting = false, launching_self = false;
  for (uint32_t s = 0; s < board::kBoardSlices; ++s) {
    const board::BoardSlice& e = board().slice(s);
    if (e.job_id.load(std::memory_order_relaxed) == 0) continue;
    const uint32_t reported = e.reported.load(std::memory_order_relaxed);
    const bool launching =
        int32_t(s) == holder || (e.flags.load(std::memory_order_relaxed) & board::kSliceCoRun) != 0;
    waiting |= (reported & board::kMemberWaiting) != 0;
    if (int32_t(s) != holder) alone = false;
    if (int32_t(s) == mine) launching_self = launching;
    if (!launching && (reported & (board::kMemberWaiting | board::kMemberInflight)) != 0) {
      return 0;
    }
  }
  if (!launching_self || (!alone && waiting)) return 0;
  const board::BoardSlice& e = board().slice(uint32_t(mine));
  if (e.mode.load(std::memory_order_relaxed) != board::kModeHard) return UINT64_MAX;
  // As of the arbiter's last decision; the caller leaves a margin for what
  // was used since.
  return uint64_t(std::max<int64_t>(e.tokens_ns.load(std::memory_order_relaxed), 0));
}

bool BoardTurns::Outranked(uint32_t priority) const {
  const int32_t me = SliceIndex();
  // The daemon's priority for this slice when the board has it.
  if (me >= 0) priority = board().slice(uint32_t(me)).priority.load(std::memory_order_relaxed);
  for (uint32_t s = 0; s < board::kBoardSlices; ++s) {
    const board::BoardSlice& e = board().slice(s);
    if (int32_t(s) != me && e.job_id.load(std::memory_order_relaxed) != 0 &&
        e.share_milli.load(std::memory_order_relaxed) != 0 &&
        e.priority.load(std::memory_order_relaxed) > priority) {
      return true;
    }
  }
  return false;
}

bool BoardTurns::AnyOtherSlice(uint32_t reported) const {
  const int32_t me = SliceIndex();
  for (uint32_t s = 0; s < board::kBoardSlices; ++s) {
    const board::BoardSlice& e = board().slice(s);
    if (int32_t(s) != me && e.job_id.load(std::memory_order_relaxed) != 0 &&
        (e.reported.load(std::memory_order_relaxed) & reported) == reported) {
      return true;
    }
  }
  return false;
}

bool BoardTurns::OthersOnGpu() const { return AnyOtherSlice(0); }

bool BoardTurns::OthersInflight() const { return AnyOtherSlice(board::kMemberInflight); }

uint32_t BoardTurns::TurnSeq() const {
  return board().header().turn_seq.load(std::memory_order_acquire);
}

void BoardTurns::WaitTurnChange(uint32_t seq, uint64_t timeout_ns) const {
  board().WaitTurnChange(seq, timeout_ns);
}

void BoardTurns::CountLaunch() {
  const int32_t s = slot_.load(std::memory_order_relaxed);
  if (s >= 0) members_->slot(uint32_t(s)).launches.fetch_add(1, std::memory_order_relaxed);
}

void BoardTurns::AddGpuNs(uint64_t ns) {
  const int32_t s = slot_.load(std::memory_order_relaxed);
  if (s >= 0) members_->slot(uint32_t(s)).gpu_ns.fetch_add(ns, std::memory_order_relaxed);
}

}  // namespace gpuslice::slice

#pragma once

// How one process takes part in the turns of its GPU (docs/COMPUTE.md):
//  - CooperativeTurns: the per-GPU coordination file of standalone slices
//    (coord.h); every member decides in turn, under the decision lease.
//  - BoardTurns: a daemon job. The daemon's arbiter decides and writes the
//    board (read-only here); this process only reports into its slice's
//    members file and rings the doorbell.
// The compute gate (compute_gate.cc) drives either through this interface,
// on its slow path and background thread only.
//
// Thread safety: as the gate uses it: any thread may call the const methods
// and Publish/CountLaunch; Join/Leave/Configure come from one thread at a
// time (the gate's start-up or its background thread).

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "slice/compute/compute_policy.h"
#include "slice/compute/coord.h"
#include "slice/compute/coord_board.h"

namespace gpuslice::slice {

class Turns {
 public:
  virtual ~Turns() = default;
  // Takes a member entry for this process (its first gated launch, or after
  // its entry was reclaimed while it was stopped).
  virtual core::Status Join(int32_t pid, uint64_t now_ns) = 0;
  // Whether `pid` still owns the entry it joined with.
  virtual bool Joined(int32_t pid) const = 0;
  virtual void Leave(int32_t pid) = 0;
  // The slice's share, mode and priority as this process knows them (from
  // its region). Only the cooperative file takes them from the members; the
  // arbiter has the daemon's.
  virtual void Configure(uint32_t share_milli, coord::Mode mode, uint32_t priority) = 0;
  // Publishes this process's flags (coord::kMemberWaiting | kMemberInflight,
  // the same bits in both files) and heartbeat. `ring`: wake the arbiter now
  // if the change calls for it. Returns true when the change calls for it
  // and `ring` was false: the caller calls Ring() soon after.
  virtual bool Publish(uint32_t flags, uint64_t now_ns, bool ring) = 0;
  // Wakes the arbiter (the daemon's board; nothing for the cooperative file).
  virtual void Ring() {}
  // Moves the schedule if this process may (the cooperative file); false
  // when another process holds the decision lease right now.
  virtual bool Decide(uint64_t now_ns, const PolicyParams& params) = 0;
  // The slice holds an open turn.
  virtual bool HoldsOpenTurn(uint64_t now_ns) const = 0;
  // Another slice on the GPU has a higher priority than this one.
  virtual bool Outranked(uint32_t priority) const = 0;
  // Another slice on the GPU has (or, as of the last decision, had) work in
  // flight: the GPU time-slices between processes, so what this process
  // times on the GPU's clock now may include the other's slices of time.
  virtual bool OthersInflight() const = 0;
  // Another slice is on the GPU at all, with work in flight or not: its
  // context may still hold the GPU after its work ended (a GPU switches
  // contexts then; the simulated GPU when that process's engine thread runs
  // again), whatever it reports.
  virtual bool OthersOnGpu() const = 0;
  // How long the schedule can do without this process's decisions, in ns:
  // no other slice is on the GPU, or every slice launches at once (the
  // holder's open turn and its co-runners) with nobody waiting for a turn
  // (so nobody waits for this one's reports or for a hand-off it would
  // decide), and this slice's hard cap, if any, has that much GPU time left
  // before it closes the turn. 0: decide (or, on the daemon's board,
  // report) at the usual pace. The daemon's arbiter keeps to the same rule
  // for its own cadence (daemon::GpuArbiter::QuietTurn).
  virtual uint64_t QuietNs() const { return 0; }
  // How long the caller's background thread may sleep while QuietNs allows
  // it (it also leaves that much of the cap as a margin).
  virtual uint64_t QuietTickNs() const { return 1'000'000; }
  virtual uint32_t TurnSeq() const = 0;
  virtual void WaitTurnChange(uint32_t seq, uint64_t timeout_ns) const = 0;
  virtual void CountLaunch() = 0;
  // Adds GPU time this process's work used (what its slice is
  // charged when its members publish coord::kMemberGpuTime).
  virtual void AddGpuNs(uint64_t /*ns*/) {}
  virtual std::string Describe() const = 0;
  // The slice was moved to another GPU (the daemon's move of a suspended
  // job): follow that GPU's board at `board_path` from now on. Only the
  // daemon's boards follow; the background thread calls it.
  virtual core::Status MoveTo(const std::string& board_path) {
    return core::UnimplementedError("a standalone slice's turns cannot move to " + board_path);
  }
};

class CooperativeTurns : public Turns {
 public:
  CooperativeTurns(std::unique_ptr<Coordinator> coord, uint64_t slice_key, std::string path)
      : coord_(std::move(coord)), key_(slice_key), path_(std::move(path)) {}
  core::Status Join(int32_t pid, uint64_t now_ns) override;
  bool Joined(int32_t pid) const override;
  void Leave(int32_t pid) override;
  void Configure(uint32_t share_milli, coord::Mode mode, uint32_t priority) override;
  bool Publish(uint32_t flags, uint64_t now_ns, bool ring) override;
  bool Decide(uint64_t now_ns, const PolicyParams& params) override;
  bool HoldsOpenTurn(uint64_t now_ns) const override;
  bool Outranked(uint32_t priority) const override;
  bool OthersInflight() const override;
  bool OthersOnGpu() const override;
  uint64_t QuietNs() const override;
  // Longer than the board's (1 ms, which the arbiter's own quiet tick
  // matches): nobody decides for a slice of the file but its own processes,
  // and an arriving slice's launches decide at once. Two co-running 20 us
  // launch-then-synchronise loops made 0.93 and 0.98 of their unshared
  // launches at 1 ms, 0.99 and 1.00 at 4 ms (12 and 10 alternations; each
  // gate thread woke ~1,200 times a second at 1 ms).
  uint64_t QuietTickNs() const override { return 4'000'000; }
  uint32_t TurnSeq() const override;
  void WaitTurnChange(uint32_t seq, uint64_t timeout_ns) const override;
  void CountLaunch() override;
  void AddGpuNs(uint64_t ns) override;
  std::string Describe() const override { return path_; }

 private:
  std::unique_ptr<Coordinator> coord_;
  const uint64_t key_;
  const std::string path_;
  std::atomic<int32_t> member_{-1};
};

class BoardTurns : public Turns {
 public:
  // `device_index`: the GPU's index among the slice's devices (the region's
  // device order, which is the daemon's).
  BoardTurns(std::unique_ptr<BoardView> board, std::unique_ptr<MembersFile> members,
             uint32_t device_index, std::string path)
      : members_(std::move(members)), device_index_(device_index) {
    bound_.push_back(std::make_unique<Bound>(Bound{std::move(board), std::move(path)}));
    current_.store(bound_.back().get(), std::memory_order_release);
  }
  core::Status Join(int32_t pid, uint64_t now_ns) override;
  bool Joined(int32_t pid) const override;
  void Leave(int32_t pid) override;
  void Configure(uint32_t, coord::Mode, uint32_t) override {}
  bool Publish(uint32_t flags, uint64_t now_ns, bool ring) override;
  void Ring() override;
  bool Decide(uint64_t, const PolicyParams&) override { return true; }
  bool HoldsOpenTurn(uint64_t now_ns) const override;
  uint64_t QuietNs() const override;
  // The arbiter's own quiet tick, which its cap margin assumes.
  uint64_t QuietTickNs() const override { return board::kQuietTickNs; }
  bool Outranked(uint32_t priority) const override;
  bool OthersInflight() const override;
  bool OthersOnGpu() const override;
  uint32_t TurnSeq() const override;
  void WaitTurnChange(uint32_t seq, uint64_t timeout_ns) const override;
  void CountLaunch() override;
  void AddGpuNs(uint64_t ns) override;
  std::string Describe() const override { return Current().path; }
  core::Status MoveTo(const std::string& board_path) override;

 private:
  struct Bound {
    std::unique_ptr<BoardView> view;
    std::string path;
  };
  // The board followed now. Acquire: pairs with MoveTo's release, so a
  // reader sees the whole mapping it points at.
  const Bound& Current() const { return *current_.load(std::memory_order_acquire); }
  const BoardView& board() const { return *Current().view; }
  // This slice's index on the board, -1 when it is not there.
  int32_t SliceIndex() const;
  // Another slice on the board reports every flag of `reported` (0: any
  // other slice at all).
  bool AnyOtherSlice(uint32_t reported) const;

  // Every board followed so far, the current one last. A board left behind
  // stays mapped: a launch thread may still be reading it, and moves are
  // rare (one mapping of a few KiB each). Only MoveTo, on the background
  // thread, touches the vector; readers go through current_.
  std::vector<std::unique_ptr<Bound>> bound_;
  std::atomic<const Bound*> current_{nullptr};
  std::unique_ptr<MembersFile> members_;
  const uint32_t device_index_;
  std::atomic<int32_t> slot_{-1};
  mutable std::atomic<int32_t> hint_{-1};
  std::atomic<uint32_t> published_{0};
};

}  // namespace gpuslice::slice

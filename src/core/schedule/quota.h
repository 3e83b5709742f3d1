#pragma once

// Quotas per user and per group, as pure logic: what a principal may hold at
// once (GPU memory, whole GPUs, compute share, running jobs; each optional),
// what its running jobs hold now, and the decision for a new request:
//   fits   every quota that applies has room for it;
//   waits  it fits a quota on its own, but not beside what runs now; the
//          reason names the quota and the numbers ("user alice: memory
//          16 GiB of 20 GiB in use, asks 8 GiB");
//   never  the request alone exceeds a quota: it is refused, never queued.
// A job is charged to its user's quota and to the quota of every group its
// user belongs to; all that apply must have room.
//
// The daemon stores the quotas (ledger) and counts the charges of running
// jobs; nothing here does I/O.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/jobs/job.h"
#include "core/jobs/request.h"
#include "core/status.h"

namespace gpuslice::core {

enum class PrincipalKind { kUser, kGroup };
std::string_view PrincipalKindName(PrincipalKind kind);  // "user" | "group"
Result<PrincipalKind> ParsePrincipalKind(std::string_view text);

struct Principal {
  PrincipalKind kind = PrincipalKind::kUser;
  std::string name;
  std::string ToString() const;  // "user alice", "group students"
  friend bool operator==(const Principal&, const Principal&) = default;
  friend auto operator<=>(const Principal&, const Principal&) = default;
};

// What a principal may hold at once; an unset field is unlimited.
struct Quota {
  std::optional<uint64_t> memory_bytes;   // GPU memory over all its jobs.
  std::optional<uint32_t> gpus;           // Whole GPUs.
  std::optional<uint32_t> compute_milli;  // Sum of compute shares; 1000 = one GPU.
  std::optional<uint32_t> jobs;           // Running jobs.

  bool empty() const { return !memory_bytes && !gpus && !compute_milli && !jobs; }
  // "memory 20 GiB, gpus 2, compute 150%, jobs 2" ("no limit" when empty).
  std::string Describe() const;
  friend bool operator==(const Quota&, const Quota&) = default;
};

// A quota as an admin types it (CLI flags or JSON strings); unset fields stay
// unlimited. compute is a percentage that may exceed 100% ("250%" = two and a
// half GPUs' worth). Errors name the field and token. At least one is needed.
struct QuotaFields {
  std::optional<std::string> mem;      // "20GiB"
  std::optional<std::string> gpus;     // "2"
  std::optional<std::string> compute;  // "150%"
  std::optional<std::string> jobs;     // "2"
};
Result<Quota> BuildQuota(const QuotaFields& fields);

// What a job holds (or would hold) in quota terms.
struct QuotaCharge {
  uint64_t memory_bytes = 0;
  uint32_t gpus = 0;
  uint32_t compute_milli = 0;
  uint32_t jobs = 0;

  QuotaCharge& operator+=(const QuotaCharge& o);
  friend bool operator==(const QuotaCharge&, const QuotaCharge&) = default;
};

// The charge of a running job, from what it holds: memory limit per GPU times
// its GPUs; whole GPUs also count as GPUs and 100% compute each; fractions
// count their compute share (none when uncapped); MIG instances count their
// memory and compute slices (of 7). One job.
QuotaCharge ChargeOfAllocation(const ResourceRequest& request, const Allocation& allocation);
// The charge of a request before it is placed. Whole GPUs are charged
// `whole_gpu_memory` each (the daemon passes the smallest GPU's memory, so a
// request is never held back for more than it could get).
QuotaCharge ChargeOfRequest(const ResourceRequest& request, uint64_t whole_gpu_memory);

// Who a job is charged to: its user and the groups that user belongs to.
struct QuotaOwner {
  std::string user;
  std::vector<std::string> groups;
  bool IsCharged(const Principal& p) const;
};

enum class QuotaVerdict { kFits, kWaits, kNever };
std::string_view QuotaVerdictName(QuotaVerdict verdict);

struct QuotaDecision {
  QuotaVerdict verdict = QuotaVerdict::kFits;
  std::string reason;  // Empty when it fits; else the first quota in the way.
  Principal blocking;  // That quota's principal.
};

// One quota that applies to a request, with what its principal holds now.
struct AppliedQuota {
  Principal who;
  Quota quota;
  QuotaCharge in_use;
};

// Decides `ask` against every quota in `applied`. kNever wins over kWaits (a
// request that can never fit one quota is refused even if another is merely
// full now).
QuotaDecision DecideQuota(const QuotaCharge& ask, const std::vector<AppliedQuota>& applied);

// What each principal holds now (only principals that have a quota).
using QuotaUsage = std::map<Principal, QuotaCharge>;

// A running job, for over-quota borrowing (below).
struct RunningCharge {
  uint64_t id = 0;
  QuotaOwner owner;
  QuotaCharge charge;
  int64_t started_ms = 0;
};

// Over-quota borrowing (docs/DAEMON.md, "Quotas"). With it on, a
// group's quota is what its members are guaranteed, not a ceiling: a job
// that would take a group past its quota may still start on capacity that
// is idle, as a *borrower*, if it can give the capacity back (it is
// restartable or can be suspended), and it is suspended (else requeued)
// when a job within its own group's guarantee needs that capacity. User
// quotas stay ceilings.
//
// Which running jobs borrow: for each group with a quota, its members' jobs
// in the order they started (then by id), each counted against the quota
// while it has room; a job that does not fit the room left is a borrower
// (and counts nothing against that group). A job is a borrower if it is one
// for any of its groups. Recomputed from what runs, so nothing about it is
// stored.
class QuotaBook;
std::set<uint64_t> Borrowers(const QuotaBook& book, std::vector<RunningCharge> running);

// The quotas of a machine.
class QuotaBook {
 public:
  void Set(const Principal& who, const Quota& quota);
  bool Remove(const Principal& who);
  const Quota* Find(const Principal& who) const;
  const std::map<Principal, Quota>& all() const { return quotas_; }
  bool empty() const { return quotas_.empty(); }

  // Adds `charge` to `owner`'s user and groups in `usage` (those with a quota).
  void AddCharge(const QuotaOwner& owner, const QuotaCharge& charge, QuotaUsage* usage) const;
  // The quotas that apply to `owner`, each with what its principal holds.
  std::vector<AppliedQuota> Applicable(const QuotaOwner& owner, const QuotaUsage& usage) const;
  // DecideQuota over Applicable.
  QuotaDecision Decide(const QuotaOwner& owner, const QuotaCharge& ask,
                       const QuotaUsage& usage) const;

  // With borrowing: what each principal holds, a borrower counted against
  // its user's quota only (a group's quota guarantees what is within it).
  QuotaUsage UsageWithBorrowers(const std::vector<RunningCharge>& running,
                                const std::set<uint64_t>& borrowers) const;
  // Decide with borrowing: the user's quota decides as before (kWaits,
  // kNever); a group quota without room (now, or ever) instead makes
  // `*borrows` true and `*why` its reason ("group ml: ..."), and the verdict
  // is kFits: the caller lets the job start only as a borrower.
  QuotaDecision DecideBorrowing(const QuotaOwner& owner, const QuotaCharge& ask,
                                const QuotaUsage& usage, bool* borrows, std::string* why) const;

 private:
  std::map<Principal, Quota> quotas_;
};

}  // namespace gpuslice::core

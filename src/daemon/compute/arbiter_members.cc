#include "daemon/compute/arbiter_members.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace gpuslice::daemon {

namespace bd = slice::board;

namespace {

// The most GPU time one member may add between two reads: a counter is the
// job's to write, and garbage must not overflow the slice's tokens. (A job
// that over-reports only charges itself.)
constexpr uint64_t kMaxGpuStepNs = 1'000'000'000;

template <typename T>
T Field(const unsigned char* buf, size_t offset) {
  T v;
  std::memcpy(&v, buf + offset, sizeof(T));
  return v;
}

}  // namespace

Report ReadReport(const MembersHandle& m, uint32_t device_index, uint64_t now_ns,
                  GpuSeen (&seen)[bd::kMembersPerSlice]) {
  alignas(64) unsigned char buf[bd::kMembersSize];
  Report r;
  const ssize_t n = pread(m.fd, buf, sizeof(buf), 0);
  if (n < ssize_t(bd::kMembersSlotsOffset)) {  // Truncated: nobody, reporting nothing.
    r.gpu_time = false;
    return r;
  }
  r.doorbell = Field<uint32_t>(buf, bd::kDoorbellOffset);
  for (uint32_t i = 0; i < bd::kMembersPerSlice; ++i) {
    const size_t at = bd::kMembersSlotsOffset + size_t{i} * bd::kMemberSlotSize;
    GpuSeen& last = seen[i];
    const GpuSeen before = last;
    last = GpuSeen{};
    if (at + bd::kMemberSlotSize > size_t(n)) continue;
    const uint64_t owner = Field<uint64_t>(buf, at + offsetof(bd::MemberSlot, owner));
    const uint32_t device = Field<uint32_t>(buf, at + offsetof(bd::MemberSlot, device_index));
    const uint32_t flags = Field<uint32_t>(buf, at + offsetof(bd::MemberSlot, flags));
    const uint64_t beat = Field<uint64_t>(buf, at + offsetof(bd::MemberSlot, heartbeat_ns));
    const uint64_t gpu = Field<uint64_t>(buf, at + offsetof(bd::MemberSlot, gpu_ns));
    if ((owner & 0xffffffffull) != 1 || device != device_index) continue;
    // A heartbeat from the future is as dead as an old one. The counter last
    // read stays with its owner: a process that was only descheduled for a
    // while (an overloaded machine) is charged what it adds from there when
    // it beats again. Forgotten, its whole counter would count as new, and
    // an honest slice would be charged up to kMaxGpuStepNs it has paid for
    // already, and wait seconds for its turn.
    if (beat + bd::kMemberTimeoutNs < now_ns || beat > now_ns + bd::kMemberTimeoutNs) {
      if (before.owner == owner) last = before;
      continue;
    }
    r.live = true;
    r.waiting |= (flags & bd::kMemberWaiting) != 0;
    r.inflight |= (flags & bd::kMemberInflight) != 0;
    r.gpu_time &= (flags & bd::kMemberGpuTime) != 0;
    // A counter that went back (or a slot taken over with a value) adds
    // nothing; the next read counts from there.
    const uint64_t from = before.owner == owner ? before.gpu_ns : 0;
    if (gpu > from) r.gpu_ns += std::min(gpu - from, kMaxGpuStepNs);
    last = GpuSeen{owner, gpu};
  }
  r.gpu_time &= r.live;
  return r;
}

// O_NONBLOCK: a lease the job put on its file must not hang the daemon.
std::shared_ptr<MembersHandle> OpenExistingMembers(const std::string& path, uint64_t job, uid_t uid,
                                                   gid_t gid) {
  auto h = std::make_shared<MembersHandle>();
  h->job_id = job;
  h->uid = uid;
  h->gid = gid;
  h->path = path;
  h->fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  struct stat st {};
  if (h->fd < 0 || fstat(h->fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      uint64_t(st.st_size) != bd::kMembersSize || (geteuid() == 0 && st.st_uid != uid)) {
    return nullptr;
  }
  h->map = mmap(nullptr, bd::kMembersSize, PROT_READ, MAP_SHARED, h->fd, 0);
  return h->map == MAP_FAILED ? nullptr : h;
}

}  // namespace gpuslice::daemon

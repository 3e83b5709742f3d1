#include "shim/base/alloc_table.h"

#include <sys/mman.h>

namespace gpuslice::shim {

#ifndef MADV_WIPEONFORK
#define MADV_WIPEONFORK 18
#endif

AllocTable::~AllocTable() {
  if (cells_ != nullptr) munmap(cells_, capacity_ * sizeof(Cell));
}

bool AllocTable::Init(uint32_t log2_capacity) {
  if (cells_ != nullptr) return true;
  size_t capacity = size_t{1} << log2_capacity;
  void* p = mmap(nullptr, capacity * sizeof(Cell), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return false;
  // Best effort: older kernels lack it, and Clear() in the fork handler
  // covers them.
  madvise(p, capacity * sizeof(Cell), MADV_WIPEONFORK);
  cells_ = static_cast<Cell*>(p);
  capacity_ = capacity;
  log2_capacity_ = log2_capacity;
  return true;
}

bool AllocTable::Insert(uint64_t key, const AllocInfo& info) {
  if (cells_ == nullptr) return false;
  const uint64_t encoded = Encode(key);
  size_t i = Home(encoded);
  for (size_t probes = 0; probes < capacity_; ++probes, i = (i + 1) & (capacity_ - 1)) {
    Cell& c = cells_[i];
    uint64_t seen = c.key.load(std::memory_order_relaxed);
    if (seen != kEmpty && seen != kDeleted) continue;
    // Acquire: we take over a cell a remover released; relaxed would be
    // enough on its own, since nobody reads the value of a key not yet
    // handed to the user, but the pair below documents the hand-over.
    if (!c.key.compare_exchange_strong(seen, encoded, std::memory_order_acquire)) continue;
    // Release: a remover on another thread that acquires the key (via the
    // user's own synchronisation, which hands it the pointer) sees these.
    c.bytes.store(info.bytes, std::memory_order_release);
    c.device_kind.store(uint64_t{info.device} << 32 | info.kind, std::memory_order_release);
    c.extra.store(info.extra, std::memory_order_release);
    return true;
  }
  return false;
}

bool AllocTable::Remove(uint64_t key, AllocInfo* info) {
  if (cells_ == nullptr) return false;
  const uint64_t encoded = Encode(key);
  size_t i = Home(encoded);
  for (size_t probes = 0; probes < capacity_; ++probes, i = (i + 1) & (capacity_ - 1)) {
    Cell& c = cells_[i];
    uint64_t seen = c.key.load(std::memory_order_acquire);
    if (seen == kEmpty) return false;
    if (seen != encoded) continue;
    AllocInfo found;
    found.bytes = c.bytes.load(std::memory_order_acquire);
    uint64_t dk = c.device_kind.load(std::memory_order_acquire);
    found.device = uint32_t(dk >> 32);
    found.kind = uint32_t(dk);
    found.extra = c.extra.load(std::memory_order_acquire);
    // Release: the values were read before the cell can be reused.
    if (!c.key.compare_exchange_strong(seen, kDeleted, std::memory_order_release)) {
      return false;  // A concurrent free of the same handle won.
    }
    *info = found;
    return true;
  }
  return false;
}

bool AllocTable::Find(uint64_t key, AllocInfo* info) const {
  if (cells_ == nullptr) return false;
  const uint64_t encoded = Encode(key);
  size_t i = Home(encoded);
  for (size_t probes = 0; probes < capacity_; ++probes, i = (i + 1) & (capacity_ - 1)) {
    const Cell& c = cells_[i];
    uint64_t seen = c.key.load(std::memory_order_acquire);
    if (seen == kEmpty) return false;
    if (seen != encoded) continue;
    info->bytes = c.bytes.load(std::memory_order_acquire);
    uint64_t dk = c.device_kind.load(std::memory_order_acquire);
    info->device = uint32_t(dk >> 32);
    info->kind = uint32_t(dk);
    info->extra = c.extra.load(std::memory_order_acquire);
    return true;
  }
  return false;
}

void AllocTable::Clear() {
  if (cells_ == nullptr) return;
  // Returns the pages to the kernel; the next touch reads zeros (= empty).
  madvise(cells_, capacity_ * sizeof(Cell), MADV_DONTNEED);
}

}  // namespace gpuslice::shim

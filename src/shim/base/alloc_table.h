#pragma once

// What the shim remembers about each live allocation, so a free uncharges
// exactly what was charged (even if the limit changed meanwhile) on the
// device it was charged to.
//
// A fixed-capacity, lock-free open-addressing hash table keyed by a 64-bit
// handle (device pointer, CUmemGenericAllocationHandle, CUarray). Memory is
// reserved once at Init() with mmap (MAP_NORESERVE: only touched pages cost
// anything) and wiped in a forked child (MADV_WIPEONFORK), so the hot path
// allocates nothing and takes no lock.
//
// Keys are unique while live (the driver never returns a handle twice before
// it is freed), which is what makes the simple scheme correct:
//   Insert: probe from the hash; claim the first empty or deleted cell with a
//     compare-and-swap on its key, then store the value.
//   Remove: probe until the key; read the value; compare-and-swap the key to
//     "deleted". Only the thread whose CAS succeeds owns the value.
// A cell never goes back to "empty", so a probe chain never breaks and every
// present key is found before the first empty cell.

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace gpuslice::shim {

struct AllocInfo {
  uint64_t bytes = 0;   // What was charged.
  uint32_t device = 0;  // Slice device index it was charged to.
  uint32_t kind = 0;    // Caller-defined (e.g. which pool, managed or not).
  uint64_t extra = 0;   // Caller-defined (e.g. the CUmemoryPool).
};

class AllocTable {
 public:
  AllocTable() = default;
  ~AllocTable();
  AllocTable(const AllocTable&) = delete;
  AllocTable& operator=(const AllocTable&) = delete;

  // Reserves room for 2^log2_capacity cells. False if the mapping failed.
  bool Init(uint32_t log2_capacity);
  bool initialized() const { return cells_ != nullptr; }

  // False when the table is full (the caller then refuses the allocation).
  bool Insert(uint64_t key, const AllocInfo& info);
  // True and the info if `key` was present; it is gone afterwards.
  bool Remove(uint64_t key, AllocInfo* info);
  // True and the info if `key` is present (left in place).
  bool Find(uint64_t key, AllocInfo* info) const;
  // Forgets everything (the child of a fork owns none of its parent's memory).
  void Clear();

 private:
  struct Cell {
    std::atomic<uint64_t> key;  // kEmpty, kDeleted or Encode(handle).
    std::atomic<uint64_t> bytes;
    std::atomic<uint64_t> device_kind;
    std::atomic<uint64_t> extra;
  };
  static_assert(sizeof(Cell) == 32);
  static constexpr uint64_t kEmpty = 0;
  static constexpr uint64_t kDeleted = 1;
  // Handles may be small integers (0 and 1 included); shift them clear of
  // the two markers. ~0 and ~0-1 are not valid handles of any kind.
  static uint64_t Encode(uint64_t key) { return key + 2; }
  size_t Home(uint64_t encoded) const {
    return size_t((encoded * 0x9E3779B97F4A7C15ull) >> (64 - log2_capacity_));
  }

  Cell* cells_ = nullptr;
  size_t capacity_ = 0;
  uint32_t log2_capacity_ = 0;
};

}  // namespace gpuslice::shim

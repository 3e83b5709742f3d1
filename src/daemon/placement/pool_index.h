#pragma once

// The admin's pools (docs/CONFIG.md) as NodeCapacity places them: each GPU
// outside MIG mode has its model interned in the placement core as
// "model@pool", so a pool is the set of those model indices (a model mask)
// and a request's pool is its demand's model mask. With no pools configured
// there is one, the default pool, which holds every GPU and masks nothing.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/jobs/request.h"
#include "core/status.h"

namespace gpuslice::daemon {

class PoolIndex {
 public:
  explicit PoolIndex(std::string default_pool = "default")
      : default_pool_(std::move(default_pool)) {}

  // Pool `pool` exists (it holds a GPU, maybe one in MIG mode).
  void Add(const std::string& pool) { masks_.emplace(pool, 0); }
  // Pool `pool` holds GPUs whose interned model has index `model`.
  void AddModel(const std::string& pool, uint32_t model) { masks_[pool] |= 1ull << model; }

  // The pools, in name order (the default pool alone when none is configured).
  std::vector<std::string> Names() const;
  const std::string& default_pool() const { return default_pool_; }
  // The pool `request` asks for ("" when the machine has one pool), or an
  // error naming the pools there are.
  core::Result<std::string> Resolve(const core::ResourceRequest& request) const;
  // The model mask of `pool` (from Resolve; "": 0, any GPU).
  uint64_t MaskOf(const std::string& pool) const;
  // The model mask of `request`'s GPU models (all when it names none) in
  // `pool`, given the interned model names; 0 when no GPU of the pool is
  // of those models, or, for "" and no models, any GPU.
  uint64_t ModelMaskFor(const core::ResourceRequest& request, const std::string& pool,
                        const std::vector<std::string>& interned) const;
  // The pool of an interned model name ("A100@train": "train").
  static std::string PoolOfModel(const std::string& interned);

 private:
  // Pool name -> model mask of its GPUs (empty when there is one pool).
  std::map<std::string, uint64_t> masks_;
  std::string default_pool_;
};

}  // namespace gpuslice::daemon

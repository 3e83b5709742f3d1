#include "shim/base/resume_on_demand.h"

#include <time.h>

#include "shim/base/log.h"

namespace gpuslice::shim {

const std::atomic<uint64_t>* g_suspension = nullptr;
std::atomic<uint64_t>* g_resume_request = nullptr;

namespace {

// Fast polls first: the daemon notices the request within ~10 ms and a
// resume takes as long as the copies of the job's memory, so most waits end
// early; a job that waits for room in the queue may wait for hours, and
// then 100 wake-ups a second per waiting thread cost nothing noticeable.
constexpr long kFastPollNs = 1'000'000;
constexpr long kSlowPollNs = 10'000'000;
constexpr int kFastPolls = 200;

std::atomic<bool> g_told{false};

}  // namespace

void SetResumeWords(const std::atomic<uint64_t>* suspension, std::atomic<uint64_t>* request) {
  g_suspension = request == nullptr ? nullptr : suspension;
  g_resume_request = suspension == nullptr ? nullptr : request;
}

void AwaitResume() {
  if (g_suspension == nullptr || g_resume_request == nullptr) return;
  int polls = 0;
  // Acquire: pairs with the daemon's release store of 0, made after it
  // restored the slice's limits, so the call that goes on sees them.
  for (uint64_t id = g_suspension->load(std::memory_order_acquire); id != 0;
       id = g_suspension->load(std::memory_order_acquire)) {
    // One store per suspension and thread at most: a reader (the daemon)
    // needs the value, not a stream of writes to the line.
    if (g_resume_request->load(std::memory_order_relaxed) != id) {
      g_resume_request->store(id, std::memory_order_relaxed);
    }
    if (!g_told.exchange(true, std::memory_order_relaxed)) {
      GPUSLICE_LOG(kInfo,
                   "the job is suspended: this CUDA call asked the daemon to resume it "
                   "and waits until it has");
    }
    timespec ts{0, polls < kFastPolls ? kFastPollNs : kSlowPollNs};
    nanosleep(&ts, nullptr);
    ++polls;
  }
  g_told.store(false, std::memory_order_relaxed);
}

}  // namespace gpuslice::shim

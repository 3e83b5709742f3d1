#include "daemon/placement/memory_allowance.h"

#include <gtest/gtest.h>

#include "core/units.h"

namespace gpuslice::daemon {
namespace {

constexpr uint64_t kMiB = core::kMiB;
constexpr uint64_t kGiB = core::kGiB;

// An allowance of 512 MiB per process NVML lists would let a 1 GiB slice
// whose 50 processes skip the shim hold 24.4 GiB unchallenged.
TEST(MemoryAllowance, IsOneContextPerRegisteredProcessUpToTheCeiling) {
  struct Case {
    uint32_t registered;
    std::optional<uint64_t> context;
    uint64_t ceiling;
    uint64_t want;
  } cases[] = {
      {0, 300 * kMiB, 2 * kGiB, 0},                 // No process the shim registered: none.
      {0, std::nullopt, 2 * kGiB, 0},               // ... whatever is known.
      {1, 300 * kMiB, 2 * kGiB, 300 * kMiB},        // One context each.
      {4, 300 * kMiB, 2 * kGiB, 1200 * kMiB},       //
      {50, 300 * kMiB, 2 * kGiB, 2 * kGiB},         // Slots a job wrote buy the ceiling at most.
      {3, 500 * kMiB, 0, 0},                        // A ceiling of 0: no allowance at all.
      {2, std::nullopt, 2 * kGiB, 2 * kGiB},        // Size not learnt yet: the ceiling.
      {512, ~uint64_t{0} / 2, 2 * kGiB, 2 * kGiB},  // No overflow past the ceiling.
      {7, 0, 2 * kGiB, 0},                          // A context of nothing.
  };
  for (const Case& c : cases) {
    EXPECT_EQ(MemoryAllowance(c.registered, c.context, c.ceiling), c.want)
        << c.registered << " processes, context "
        << (c.context ? std::to_string(*c.context) : "unknown") << ", ceiling " << c.ceiling;
  }
}

TEST(ContextSizes, LearnsTheSmallestSettledFigurePerGpu) {
  ContextSizes sizes;
  EXPECT_FALSE(sizes.Of(0).has_value());
  // A process allocating: each sample shows another figure, never settled.
  sizes.Observe(0, 100, 300 * kMiB + 2 * kGiB);
  sizes.Observe(0, 200, 300 * kMiB);  // A bare context.
  sizes.Observe(1, 300, 5 * kGiB);
  sizes.EndSample();
  EXPECT_FALSE(sizes.Of(0).has_value()) << "one sighting is not settled";
  sizes.Observe(0, 100, 300 * kMiB + 4 * kGiB);
  sizes.Observe(0, 200, 300 * kMiB);
  sizes.Observe(1, 300, 5 * kGiB);
  sizes.EndSample();
  EXPECT_EQ(sizes.Of(0), 300 * kMiB);
  EXPECT_EQ(sizes.Of(1), 5 * kGiB) << "an upper bound until a bare context is seen there";
  EXPECT_FALSE(sizes.Of(2).has_value());
  // A larger settled figure never raises it; a smaller one lowers it.
  for (int i = 0; i < 2; ++i) {
    sizes.Observe(0, 400, 8 * kGiB);
    sizes.Observe(1, 500, 400 * kMiB);
    sizes.EndSample();
  }
  EXPECT_EQ(sizes.Of(0), 300 * kMiB);
  EXPECT_EQ(sizes.Of(1), 400 * kMiB);
}

// A context being created passes through smaller figures for a moment (on
// the real driver, within one NVML read): a figure seen once must not
// shrink every job's allowance for good.
TEST(ContextSizes, AFigureSeenOnceOrWithAGapIsNotSettled) {
  ContextSizes sizes;
  sizes.Observe(0, 100, 300 * kMiB);
  sizes.Observe(0, 100, 300 * kMiB);  // Twice within one sample is one sighting.
  sizes.EndSample();
  sizes.Observe(0, 100, 2 * kMiB);  // Then another figure.
  sizes.EndSample();
  sizes.EndSample();  // A sample without it: forgotten.
  sizes.Observe(0, 100, 2 * kMiB);
  sizes.EndSample();
  EXPECT_FALSE(sizes.Of(0).has_value());
  sizes.Observe(0, 100, 0);  // No figure: ignored.
  sizes.EndSample();
  sizes.Observe(0, 100, 0);
  sizes.EndSample();
  EXPECT_FALSE(sizes.Of(0).has_value());
}

}  // namespace
}  // namespace gpuslice::daemon

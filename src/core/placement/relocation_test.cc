#include "core/placement/relocation.h"

#include <gtest/gtest.h>

namespace gpuslice::core {
namespace {

using Moves = std::vector<std::pair<std::string, std::string>>;

TEST(RelocateTest, ASingleGpuMovesOntoTheOther) {
  auto r = Relocate({"GPU-a"}, {"GPU-b"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->order, std::vector<size_t>({0}));
  EXPECT_EQ(r->moves, Moves({{"GPU-a", "GPU-b"}}));
}

TEST(RelocateTest, TheSameGpuMovesNothing) {
  auto r = Relocate({"GPU-a", "GPU-b"}, {"GPU-b", "GPU-a"});
  ASSERT_TRUE(r.ok());
  // Device 0 stays on GPU-a (position 1 of the target), device 1 on GPU-b.
  EXPECT_EQ(r->order, std::vector<size_t>({1, 0}));
  EXPECT_TRUE(r->moves.empty());
}

TEST(RelocateTest, AKeptGpuKeepsItsIndexAndNoRenameNamesAGpuTheSliceStillHas) {
  // Pairing by position would rename a to b while b is still device 1.
  auto r = Relocate({"GPU-a", "GPU-b"}, {"GPU-b", "GPU-c"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->order, std::vector<size_t>({1, 0}));
  EXPECT_EQ(r->moves, Moves({{"GPU-a", "GPU-c"}}));
}

TEST(RelocateTest, MismatchedOrRepeatedListsAreRefused) {
  EXPECT_EQ(Relocate({"GPU-a"}, {"GPU-b", "GPU-c"}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Relocate({"GPU-a", "GPU-a"}, {"GPU-b", "GPU-c"}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Relocate({"GPU-a", "GPU-b"}, {"GPU-c", "GPU-c"}).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpuslice::core

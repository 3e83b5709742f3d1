#include "shim/base/alloc_table.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace gpuslice::shim {
namespace {

TEST(AllocTable, RemoveReturnsWhatInsertStored) {
  AllocTable t;
  ASSERT_TRUE(t.Init(8));
  ASSERT_TRUE(t.Insert(0x7f0000001000, {4096, 3, 1, 77}));
  AllocInfo info;
  ASSERT_TRUE(t.Remove(0x7f0000001000, &info));
  EXPECT_EQ(info.bytes, 4096u);
  EXPECT_EQ(info.device, 3u);
  EXPECT_EQ(info.kind, 1u);
  EXPECT_EQ(info.extra, 77u);
  EXPECT_FALSE(t.Remove(0x7f0000001000, &info));  // A double free is not found.
}

TEST(AllocTable, SmallIntegerHandlesWork) {
  AllocTable t;
  ASSERT_TRUE(t.Init(4));
  for (uint64_t k = 0; k < 4; ++k) ASSERT_TRUE(t.Insert(k, {k + 10, 0, 0, 0}));
  AllocInfo info;
  for (uint64_t k = 0; k < 4; ++k) {
    ASSERT_TRUE(t.Find(k, &info));
    EXPECT_EQ(info.bytes, k + 10);
  }
}

TEST(AllocTable, FullTableRefusesInsertAndReusesDeletedCells) {
  AllocTable t;
  ASSERT_TRUE(t.Init(3));  // 8 cells.
  for (uint64_t k = 1; k <= 8; ++k) ASSERT_TRUE(t.Insert(k * 256, {k, 0, 0, 0}));
  EXPECT_FALSE(t.Insert(9 * 256, {9, 0, 0, 0}));
  AllocInfo info;
  ASSERT_TRUE(t.Remove(5 * 256, &info));
  EXPECT_TRUE(t.Insert(9 * 256, {9, 0, 0, 0}));
  for (uint64_t k : {1, 2, 3, 4, 6, 7, 8, 9}) {
    ASSERT_TRUE(t.Find(k * 256, &info)) << k;
    EXPECT_EQ(info.bytes, k);
  }
  // Absent keys are not found even with no empty cell left.
  EXPECT_FALSE(t.Find(5 * 256, &info));
}

TEST(AllocTable, ConcurrentChurnLosesNothing) {
  AllocTable t;
  ASSERT_TRUE(t.Init(12));
  constexpr int kThreads = 4;
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&, th] {
      for (int round = 0; round < 200; ++round) {
        for (uint64_t i = 0; i < 200; ++i) {
          uint64_t key = (uint64_t(th) << 40) | (i << 8);
          if (!t.Insert(key, {i, uint32_t(th), 0, 0})) errors++;
        }
        for (uint64_t i = 0; i < 200; ++i) {
          uint64_t key = (uint64_t(th) << 40) | (i << 8);
          AllocInfo info;
          if (!t.Remove(key, &info) || info.bytes != i || info.device != uint32_t(th)) errors++;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
}

TEST(AllocTable, ForkedChildStartsEmpty) {
  AllocTable t;
  ASSERT_TRUE(t.Init(8));
  ASSERT_TRUE(t.Insert(4096, {1, 0, 0, 0}));
  pid_t child = fork();
  if (child == 0) {
    t.Clear();  // What the shim's atfork child handler does.
    AllocInfo info;
    _exit(t.Find(4096, &info) ? 1 : 0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  AllocInfo info;
  EXPECT_TRUE(t.Find(4096, &info));  // The parent keeps its own.
}

}  // namespace
}  // namespace gpuslice::shim

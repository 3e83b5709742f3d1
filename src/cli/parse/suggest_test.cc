#include "cli/parse/suggest.h"

#include <gtest/gtest.h>

namespace gpuslice::cli {
namespace {

const std::vector<std::string> kNames = {"run",  "submit", "shell",  "ps",    "cancel", "logs",
                                         "gpus", "doctor", "status", "top",   "usage",  "service",
                                         "quota", "resize", "resume", "events"};

TEST(EditDistance, CountsASwapOfNeighboursAsOneEdit) {
  EXPECT_EQ(EditDistance("sumbit", "submit"), 1u);
  EXPECT_EQ(EditDistance("", "ps"), 2u);
  EXPECT_EQ(EditDistance("cancel", "cancel"), 0u);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
}

// "gpuslice sumbit" suggests `submit`, not only "A subcommand is required".
TEST(NearestName, SuggestsTheNearestSubcommandForATypo) {
  struct Case {
    const char* typed;
    const char* want;  // nullptr: no suggestion.
  } cases[] = {
      {"sumbit", "submit"}, {"cancle", "cancel"}, {"gpu", "gpus"},     {"sp", "ps"},
      {"serv", "service"},  {"rezise", "resize"}, {"stauts", "status"}, {"xyzzy", nullptr},
      {"deploy", nullptr},  {"", nullptr},
  };
  for (const Case& c : cases) {
    auto got = NearestName(c.typed, kNames);
    if (c.want == nullptr) {
      EXPECT_FALSE(got.has_value()) << c.typed << " -> " << got.value_or("");
    } else {
      ASSERT_TRUE(got.has_value()) << c.typed;
      EXPECT_EQ(*got, c.want) << c.typed;
    }
  }
}

}  // namespace
}  // namespace gpuslice::cli

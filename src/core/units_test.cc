#include "core/units.h"

#include <gtest/gtest.h>

namespace gpuslice::core {
namespace {

struct BytesCase {
  const char* text;
  uint64_t want;
};

TEST(ParseBytes, AcceptsUnitsTable) {
  const BytesCase cases[] = {
      {"0", 0},
      {"123", 123},
      {"123B", 123},
      {"10GiB", 10 * kGiB},
      {"10 GiB", 10 * kGiB},
      {"10gib", 10 * kGiB},
      {"512MiB", 512 * kMiB},
      {"512Mi", 512 * kMiB},
      {"1.5G", 3 * kGiB / 2},
      {"1.5GiB", 3 * kGiB / 2},
      {"2T", 2 * kTiB},
      {"4K", 4096},
      {"1GB", 1000000000},
      {"1.5MB", 1500000},
      {"  8GiB  ", 8 * kGiB},
  };
  for (const auto& c : cases) {
    auto r = ParseBytes(c.text);
    ASSERT_TRUE(r.ok()) << c.text << ": " << r.status().ToString();
    EXPECT_EQ(*r, c.want) << c.text;
  }
}

TEST(ParseBytes, RejectsBadInputNamingTheToken) {
  const char* bad[] = {"", "GiB", "-1GiB", "10XB", "1.GiB", ".5G", "1.3B", "10 GiB x",
                       "99999999999999999999", "20000000TiB"};
  for (const char* text : bad) {
    auto r = ParseBytes(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    if (*text) {
      EXPECT_NE(r.status().message().find(text), std::string::npos) << r.status().message();
    }
  }
  EXPECT_NE(ParseBytes("10XB").status().message().find("unknown unit 'XB'"), std::string::npos);
}

// "--mem 8" is refused: a size without a unit would mean 8 bytes.
TEST(ParseMemorySize, RefusesABareNumberWithAHint) {
  for (const char* text : {"8", "1.5", " 12 "}) {
    auto r = ParseMemorySize(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("has no unit"), std::string::npos) << r.status().message();
  }
  EXPECT_NE(ParseMemorySize("8").status().message().find("did you mean '8GiB'"), std::string::npos)
      << ParseMemorySize("8").status().message();
  EXPECT_EQ(*ParseMemorySize("8B"), 8u);
  EXPECT_EQ(*ParseMemorySize("8GiB"), 8 * kGiB);
  EXPECT_EQ(*ParseMemorySize("8GB"), 8000000000u);
  EXPECT_EQ(*ParseMemorySize("0"), 0u);  // The caller's range check names the problem.
  EXPECT_NE(ParseMemorySize("8XB").status().message().find("unknown unit"), std::string::npos);
}

TEST(FormatBytes, PicksLargestUnit) {
  EXPECT_EQ(FormatBytes(80 * kGiB), "80 GiB");
  EXPECT_EQ(FormatBytes(512 * kMiB), "512 MiB");
  EXPECT_EQ(FormatBytes(3 * kGiB / 2), "1.5 GiB");
  EXPECT_EQ(FormatBytes(123), "123 B");
}

TEST(ParseShareMilli, AcceptsPercentages) {
  EXPECT_EQ(*ParseShareMilli("30%"), 300u);
  EXPECT_EQ(*ParseShareMilli("30"), 300u);
  EXPECT_EQ(*ParseShareMilli("12.5%"), 125u);
  EXPECT_EQ(*ParseShareMilli("100%"), 1000u);
  EXPECT_EQ(*ParseShareMilli(" 0.1 % "), 1u);
  EXPECT_EQ(FormatShareMilli(125), "12.5%");
  EXPECT_EQ(FormatShareMilli(300), "30%");
}

TEST(ParseShareMilli, RejectsOutOfRangeAndMalformed) {
  for (const char* text : {"", "0%", "101%", "12.55%", "abc", "-5%", "30%%", "1e2"}) {
    auto r = ParseShareMilli(text);
    EXPECT_FALSE(r.ok()) << text;
  }
  EXPECT_NE(ParseShareMilli("101%").status().message().find("'101%'"), std::string::npos);
}

TEST(ParseDuration, AcceptsUnitsAndCompounds) {
  using std::chrono::milliseconds;
  EXPECT_EQ(*ParseDuration("90s"), milliseconds(90'000));
  EXPECT_EQ(*ParseDuration("30m"), milliseconds(1'800'000));
  EXPECT_EQ(*ParseDuration("2h"), milliseconds(7'200'000));
  EXPECT_EQ(*ParseDuration("1d"), milliseconds(86'400'000));
  EXPECT_EQ(*ParseDuration("1h30m"), milliseconds(5'400'000));
  EXPECT_EQ(*ParseDuration("500ms"), milliseconds(500));
  EXPECT_EQ(*ParseDuration("45"), milliseconds(45'000));
  EXPECT_EQ(FormatDuration(milliseconds(5'400'000)), "1h30m");
}

TEST(ParseDuration, RejectsBadInput) {
  for (const char* text : {"", "0s", "5y", "h", "1h 3", "-5m"}) {
    EXPECT_FALSE(ParseDuration(text).ok()) << text;
  }
}

TEST(ParsePriority, KnowsThreeLevels) {
  EXPECT_EQ(*ParsePriority("HIGH"), Priority::kHigh);
  EXPECT_EQ(*ParsePriority("normal"), Priority::kNormal);
  EXPECT_EQ(*ParsePriority("low"), Priority::kLow);
  EXPECT_NE(ParsePriority("urgent").status().message().find("'urgent'"), std::string::npos);
}

TEST(ParsePerDeviceBytes, SingleSizeAppliesToAllDevices) {
  auto r = ParsePerDeviceBytes("4GiB");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->at(-1), 4 * kGiB);
}

TEST(ParsePerDeviceBytes, ListIsKeyedByIndex) {
  auto r = ParsePerDeviceBytes("0=4GiB, 1=2GiB");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->size(), 2u);
  EXPECT_EQ(r->at(0), 4 * kGiB);
  EXPECT_EQ(r->at(1), 2 * kGiB);
}

TEST(ParsePerDeviceBytes, RejectsDuplicatesAndBadItems) {
  EXPECT_FALSE(ParsePerDeviceBytes("0=4GiB,0=2GiB").ok());
  EXPECT_FALSE(ParsePerDeviceBytes("0=4GiB,x=2GiB").ok());
  EXPECT_FALSE(ParsePerDeviceBytes("0=4GiB,1").ok());
  EXPECT_NE(ParsePerDeviceBytes("0=4Gb x").status().message().find("4Gb x"), std::string::npos);
}

}  // namespace
}  // namespace gpuslice::core

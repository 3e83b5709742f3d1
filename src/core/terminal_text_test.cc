#include "core/terminal_text.h"

#include <gtest/gtest.h>

#include <string>

namespace gpuslice::core {
namespace {

struct Case {
  const char* what;
  std::string in;
  std::string shown;
};

TEST(TerminalSafe, ShowsEveryControlAndEscapeVisiblyAndKeepsPrintableText) {
  const Case cases[] = {
      {"plain ASCII", "python train.py --lr=0.1", "python train.py --lr=0.1"},
      {"empty", "", ""},
      {"a backslash stays", "C:\\x1b", "C:\\x1b"},
      {"printable UTF-8 stays", "caf\xc3\xa9 \xe8\xa8\x93\xe7\xb7\xb4 \xf0\x9f\x9a\x80",
       "caf\xc3\xa9 \xe8\xa8\x93\xe7\xb7\xb4 \xf0\x9f\x9a\x80"},
      {"CSI clear screen", "a\x1b[2Jb", "a\\x1b[2Jb"},
      {"OSC 52 clipboard write ended by BEL", "\x1b]52;c;cm0gLXJmIH4=\x07",
       "\\x1b]52;c;cm0gLXJmIH4=\\x07"},
      {"OSC title ended by ST", "\x1b]0;root@host\x1b\\", "\\x1b]0;root@host\\x1b\\"},
      {"tab, newline, carriage return", "a\tb\nstate: cancelled\r", "a\\tb\\nstate: cancelled\\r"},
      {"NUL and DEL", std::string("a\0b\x7f", 4), "a\\x00b\\x7f"},
      {"C1 CSI as UTF-8",
       "x\xc2\x9b"
       "31m",
       "x\\u009b31m"},
      {"C1 CSI as a lone byte",
       "x\x9b"
       "31m",
       "x\\x9b31m"},
      {"right-to-left override", "evil\xe2\x80\xaetxt.exe", "evil\\u202etxt.exe"},
      {"directional isolates", "\xe2\x81\xa6x\xe2\x81\xa9", "\\u2066x\\u2069"},
      {"zero-width space and BOM", "ro\xe2\x80\x8bot\xef\xbb\xbf", "ro\\u200bot\\ufeff"},
      {"line separator",
       "a\xe2\x80\xa8"
       "b",
       "a\\u2028b"},
      {"soft hyphen", "ad\xc2\xadmin", "ad\\u00admin"},
      {"overlong ESC", "\xc0\x9b", "\\xc0\\x9b"},
      {"surrogate", "\xed\xa0\x80", "\\xed\\xa0\\x80"},
      {"truncated sequence at the end", "ok\xe2\x80", "ok\\xe2\\x80"},
      {"above U+10FFFF", "\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80"},
      {"Latin-1, not UTF-8", "caf\xe9", "caf\\xe9"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(TerminalSafe(c.in, /*utf8=*/true), c.shown) << c.what;
  }
}

TEST(TerminalSafe, ShowsNonAsciiAsCodePointsOnATerminalThatIsNotUtf8) {
  const Case cases[] = {
      {"accented letter", "caf\xc3\xa9", "caf\\u00e9"},
      {"CJK", "\xe8\xa8\x93", "\\u8a13"},
      {"above U+FFFF", "\xf0\x9f\x9a\x80", "\\U0001f680"},
      // U+011B's second byte is 0x9b, CSI to an 8-bit terminal.
      {"a character whose bytes hold a C1 control", "\xc4\x9b", "\\u011b"},
      {"controls as on a UTF-8 terminal", "a\x1b[2J\xe2\x80\xae", "a\\x1b[2J\\u202e"},
      {"invalid bytes", "caf\xe9", "caf\\xe9"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(TerminalSafe(c.in, /*utf8=*/false), c.shown) << c.what;
  }
}

TEST(TerminalSafe, NeverEmitsAControlByteWhateverTheInput) {
  // Every byte value, alone and after each possible lead byte.
  std::string all;
  for (int lead = 0; lead < 256; ++lead) {
    for (int b = 0; b < 256; ++b) {
      all += static_cast<char>(lead);
      all += static_cast<char>(b);
    }
  }
  const std::string shown = TerminalSafe(all, /*utf8=*/true);
  for (size_t i = 0; i < shown.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(shown[i]);
    ASSERT_TRUE(c >= 0x20 && c != 0x7f) << "control byte " << int(c) << " at " << i;
  }
  EXPECT_EQ(shown.find("\xc2\x9b"), std::string::npos) << "no C1 control as UTF-8";
  for (unsigned char c : TerminalSafe(all, /*utf8=*/false)) {
    ASSERT_TRUE(c >= 0x20 && c < 0x7f) << "byte " << int(c) << " on a terminal that is not UTF-8";
  }
}

}  // namespace
}  // namespace gpuslice::core

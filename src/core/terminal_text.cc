#include "core/terminal_text.h"

#include <cstdint>
#include <cstdio>

namespace gpuslice::core {
namespace {

void AppendByteEscape(std::string* out, unsigned char c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", c);
  *out += buf;
}

void AppendCodePointEscape(std::string* out, uint32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, cp > 0xffff ? "\\U%08x" : "\\u%04x", static_cast<unsigned>(cp));
  *out += buf;
}

// The length of the valid UTF-8 sequence starting at text[i] and its code
// point, or 0 when the bytes there are not one (RFC 3629: no overlong form,
// no surrogate, nothing above U+10FFFF).
size_t DecodeUtf8(std::string_view text, size_t i, uint32_t* cp) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  size_t len;
  uint32_t min;
  if (lead >= 0xc2 && lead <= 0xdf) {
    len = 2, min = 0x80, *cp = lead & 0x1f;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    len = 3, min = 0x800, *cp = lead & 0x0f;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    len = 4, min = 0x10000, *cp = lead & 0x07;
  } else {
    return 0;
  }
  if (i + len > text.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
    *cp = (*cp << 6) | (byte(i + k) & 0x3f);
  }
  if (*cp < min || *cp > 0x10ffff || (*cp >= 0xd800 && *cp <= 0xdfff)) return 0;
  return len;
}

// Code points above U+007F that a terminal acts on (C1), that change the
// order or the lines of the text around them, or that print nothing at all
// (so that two names that look alike differ).
bool IsHiddenControl(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9f) || cp == 0x00ad || cp == 0x061c || cp == 0x180e ||
         (cp >= 0x200b && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202e) ||
         (cp >= 0x2060 && cp <= 0x2069) || cp == 0xfeff || (cp >= 0xfff9 && cp <= 0xfffb);
}

}  // namespace

std::string TerminalSafe(std::string_view text, bool utf8) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (c < 0x80) {
      if (c == '\t') {
        out += "\\t";
      } else if (c == '\n') {
        out += "\\n";
      } else if (c == '\r') {
        out += "\\r";
      } else {
        AppendByteEscape(&out, c);
      }
      ++i;
      continue;
    }
    uint32_t cp = 0;
    const size_t len = DecodeUtf8(text, i, &cp);
    if (len == 0) {
      AppendByteEscape(&out, c);
      ++i;
    } else if (IsHiddenControl(cp) || !utf8) {
      AppendCodePointEscape(&out, cp);
      i += len;
    } else {
      out.append(text.substr(i, len));
      i += len;
    }
  }
  return out;
}

}  // namespace gpuslice::core

#pragma once

// Text that came from a job or a user (argv, a job's name, its image, labels,
// reasons and event messages that quote them) made safe to print on a
// terminal. A job's owner chooses those bytes and an admin's terminal shows
// them: an ESC or a C1 control starts a sequence the terminal acts on (clear
// the screen, set the title, write the clipboard with OSC 52, fake lines with
// cursor moves), and Unicode's direction controls make text read other than
// it is. Every human-readable view of the CLI prints such text through
// TerminalSafe; JSON output never does (it stays exact, and JSON escapes
// control characters itself). A job's own output (`gpuslice logs`) is its
// owner's and is printed as it is.

#include <string>
#include <string_view>

namespace gpuslice::core {

// `text` with everything a terminal would act on shown visibly instead:
//   - printable ASCII: as it is;
//   - printable non-ASCII characters: as they are (UTF-8) when `utf8` (the
//     terminal's locale is UTF-8), else "\uHHHH" (a terminal of an 8-bit
//     character set takes bytes 0x80-0x9f, which UTF-8 sequences hold, for
//     C1 controls; "\UHHHHHHHH" above U+FFFF);
//   - tab, newline, carriage return: "\t", "\n", "\r";
//   - other C0 controls and DEL: "\xHH" (ESC is "\x1b");
//   - bytes that are not part of valid UTF-8 (overlong forms, surrogates,
//     truncated sequences, 0x80-0xff alone): "\xHH" for each byte;
//   - C1 controls (U+0080-U+009F, e.g. the one-character CSI U+009B), the
//     Unicode controls that reorder or break lines (U+061C, U+200E, U+200F,
//     U+2028-U+202E, U+2066-U+2069) and the characters that print nothing
//     (U+00AD, U+180E, U+200B-U+200D, U+2060-U+2064, U+FEFF,
//     U+FFF9-U+FFFB): "\uHHHH".
// A backslash is left as it is: a literal "\x1b" typed into a name and an ESC
// shown as "\x1b" look alike, and neither reaches the terminal as ESC.
std::string TerminalSafe(std::string_view text, bool utf8);

}  // namespace gpuslice::core

#include "daemon/launch/job_log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "daemon/launch/launcher.h"

namespace gpuslice::daemon {
namespace {

constexpr char kNotePrefix[] = "gpuslice: ";
constexpr char kNoteSuffix[] = " bytes of older output dropped\n";

void WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// "gpuslice: N bytes of older output dropped\n" into `buf` (no allocation:
// runs in the supervisor); returns its length.
size_t FormatNote(uint64_t dropped, char* buf, size_t cap) {
  char digits[24];
  size_t nd = 0;
  do {
    digits[nd++] = static_cast<char>('0' + dropped % 10);
    dropped /= 10;
  } while (dropped > 0);
  size_t len = 0;
  auto put = [&](const char* s, size_t n) {
    n = std::min(n, cap - len);
    std::memcpy(buf + len, s, n);
    len += n;
  };
  put(kNotePrefix, sizeof kNotePrefix - 1);
  while (nd > 0 && len < cap) buf[len++] = digits[--nd];
  put(kNoteSuffix, sizeof kNoteSuffix - 1);
  return len;
}

}  // namespace

LogTrim ParseLogTrim(const char* data, size_t n) {
  const size_t prefix = sizeof kNotePrefix - 1, suffix = sizeof kNoteSuffix - 1;
  if (n < prefix + 1 + suffix || std::memcmp(data, kNotePrefix, prefix) != 0) return {};
  uint64_t dropped = 0;
  size_t i = prefix;
  while (i < n && i < prefix + 20 && data[i] >= '0' && data[i] <= '9') {
    dropped = dropped * 10 + static_cast<uint64_t>(data[i] - '0');
    ++i;
  }
  if (i == prefix || n - i < suffix || std::memcmp(data + i, kNoteSuffix, suffix) != 0) return {};
  return {dropped, i + suffix};
}

core::Result<LogRead> ReadJobLog(const std::string& path, uint64_t offset, uint64_t limit) {
  LogRead out;
  out.next_offset = offset;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return out;
    return ErrnoError(errno, "open log " + path);
  }
  // One descriptor for the note and the data: a trim renames a new file in,
  // and this one stays consistent.
  char head[96];
  ssize_t hn = pread(fd, head, sizeof head, 0);
  LogTrim trim = hn > 0 ? ParseLogTrim(head, static_cast<size_t>(hn)) : LogTrim{};
  uint64_t from = std::max(offset, trim.dropped);
  if (offset < trim.dropped) out.data.assign(head, trim.header_bytes);
  size_t prefix = out.data.size();
  out.data.resize(prefix + limit);
  ssize_t n = pread(fd, out.data.data() + prefix, limit,
                    static_cast<off_t>(trim.header_bytes + (from - trim.dropped)));
  int err = errno;
  close(fd);
  if (n < 0) return ErrnoError(err, "read log " + path);
  out.data.resize(prefix + static_cast<size_t>(n));
  out.next_offset = from + static_cast<uint64_t>(n);
  return out;
}

void LogWriter::Write(const char* data, size_t n) {
  if (fd_ < 0 || n == 0) return;
  if (cap_ != 0) {
    // The file's size, not a count of our own writes: the daemon appends
    // notes (idle reclaim, watchdog) to the same file.
    struct stat st;
    uint64_t size = fstat(fd_, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
    if (size + n > cap_) {
      Trim(data, n, size);
      return;
    }
  }
  WriteAll(fd_, data, n);
}

void LogWriter::Trim(const char* data, size_t n, uint64_t size) {
  // Keep the newest half of the cap: each trim then copies at most cap/2
  // bytes per cap/2 bytes written, instead of the whole file every write.
  uint64_t content = size > header_bytes_ ? size - header_bytes_ : 0;
  uint64_t keep = std::min<uint64_t>(cap_ / 2, content + n);
  uint64_t new_dropped = dropped_ + content + n - keep;
  char note[96];
  size_t note_len = FormatNote(new_dropped, note, sizeof note);
  int in = open(path_, O_RDONLY | O_CLOEXEC);
  int out = open(tmp_path_, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (in < 0 || out < 0) {
    // Cannot build the copy (disk full, say): drop this output instead of
    // growing past the cap.
    if (in >= 0) close(in);
    if (out >= 0) close(out);
    return;
  }
  WriteAll(out, note, note_len);
  uint64_t from_file = keep > n ? keep - n : 0;
  off_t pos = static_cast<off_t>(size - std::min(from_file, content));
  char buf[64 * 1024];
  while (static_cast<uint64_t>(pos) < size) {
    ssize_t r = pread(in, buf, std::min<uint64_t>(sizeof buf, size - static_cast<uint64_t>(pos)), pos);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    WriteAll(out, buf, static_cast<size_t>(r));
    pos += r;
  }
  uint64_t from_data = std::min<uint64_t>(keep, n);
  WriteAll(out, data + (n - from_data), static_cast<size_t>(from_data));
  close(in);
  if (rename(tmp_path_, path_) != 0) {
    close(out);
    unlink(tmp_path_);
    return;
  }
  // Appending from here, so lines the daemon adds land after ours.
  fcntl(out, F_SETFL, fcntl(out, F_GETFL) | O_APPEND);
  close(fd_);
  fd_ = out;
  dropped_ = new_dropped;
  header_bytes_ = note_len;
}

}  // namespace gpuslice::daemon

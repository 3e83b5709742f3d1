#pragma once

// A job's output logs (`<state>/jobs/ID/stdout`, `stderr`) and their size cap.
//
// The job never holds its log files: its stdout and stderr are pipes to its
// supervisor, which writes them (LogWriter). When a write would take a file
// past the cap (config max_log_size, default 1 GiB), the supervisor keeps the
// newest half of the cap, behind one first line
//
//   gpuslice: N bytes of older output dropped
//
// (N counts every byte dropped since the job started), written to a new file
// renamed over the old one, so a reader sees one or the other whole.
//
// Offsets in the API (`GET /v1/jobs/ID/logs?offset=`) count bytes of the
// job's output since it started, as if nothing had been dropped; ReadJobLog
// maps them to the file: a reader behind the dropped part gets the note line
// and then the oldest byte kept, so `logs -f` and `run` keep streaming
// across a trim. A job that itself writes such a line first is only
// misread in its own log.

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace gpuslice::daemon {

struct LogTrim {
  uint64_t dropped = 0;       // Bytes of output dropped before the first one in the file.
  uint64_t header_bytes = 0;  // Length of the note line (0: never trimmed).
};
// Parses the note line at the start of a log file ({0, 0} when there is none).
LogTrim ParseLogTrim(const char* data, size_t n);

struct LogRead {
  std::string data;
  uint64_t next_offset = 0;
};
// Reads up to `limit` bytes of output from stream offset `offset` (see above).
// A missing file reads as empty.
core::Result<LogRead> ReadJobLog(const std::string& path, uint64_t offset, uint64_t limit);

// The smallest cap accepted: a trim keeps half of it, which must hold more
// than one read of the pipe (LogWriter's callers read at most 16 KiB).
constexpr uint64_t kMinLogCap = 64 * 1024;

// Appends a job's output to its log, trimming at the cap. For the
// supervisor after fork: only system calls, no allocation; the paths must
// outlive it. Every failure is silent (output is dropped rather than the
// job stopped).
class LogWriter {
 public:
  // `path`: the log; `tmp_path`: where a trimmed copy is built; `fd`: the log
  // open for appending. cap 0 = no cap.
  LogWriter(const char* path, const char* tmp_path, int fd, uint64_t cap)
      : path_(path), tmp_path_(tmp_path), fd_(fd), cap_(cap) {}
  void Write(const char* data, size_t n);
  int fd() const { return fd_; }

 private:
  void Trim(const char* data, size_t n, uint64_t size);

  const char* path_;
  const char* tmp_path_;
  int fd_;
  uint64_t cap_;
  uint64_t dropped_ = 0;
  uint64_t header_bytes_ = 0;
};

}  // namespace gpuslice::daemon

// The one way stepscope writes an output file (JSON report, Chrome trace,
// HTML page): a reader never sees half a file, and nothing the library did
// not create is ever deleted or replaced.
//
//   std::string error;
//   if (!write_file_atomically("report.json", text.data(), text.size(), error))
//     warn("cannot write report.json (" + error + ")");  // e.g. "No space left on device"
//
// How each kind of target is written:
//  - a regular file, or a path that does not exist yet: a temporary file
//    beside the target (same directory, so rename is atomic; created
//    exclusively, O_EXCL, never through a link), fsync, rename over the
//    target. The temporary file is removed on every failure path, and by
//    remove_pending_temp_file() from a signal handler.
//  - a symbolic link (to a regular file, or dangling): opened by the kernel
//    through the link (its permission checks and protected_symlinks apply)
//    and written in place: a temporary file is never renamed over a link's
//    target. A link in a world-writable sticky directory (/tmp) that neither
//    this process's user nor the directory's owner owns is not followed at
//    all, whatever the sysctl says (an error: the caller falls back).
//  - one of this process's open descriptors (/dev/stdout, /dev/stderr,
//    /proc/self/fd/N, /dev/fd/N): written through that descriptor, at its
//    offset (appended where it was opened with >>), never reopened or
//    truncated: `train >> train.log` keeps its log.
//  - a regular file reached through another process's /proc/<pid>/fd/N:
//    appended to, never truncated.
//  - a character device or a FIFO (/dev/null, a terminal, a named pipe):
//    written in place, never renamed over or removed. A FIFO is
//    opened without blocking; with no reader within kFifoReaderWaitMs the
//    write fails ("no reader on the FIFO") and the caller falls back. A pipe
//    or socket that is already open is written a PIPE_BUF at a time when poll
//    says there is room. SIGPIPE is blocked for the write: a reader that went
//    away is an EPIPE error, not the end of the run.
//  - anything else (a directory, a socket by name): an error, nothing touched.
// A file created in a world-writable directory is 0600 (a report holds the
// host, the pid and every set_config value).
#pragma once

#include <cstddef>
#include <string>

namespace stepscope {
inline namespace v1 {
namespace detail {

// How long a FIFO target may wait for a reader to open it, and for a reader
// that stopped reading to make room again (ms). Short: this runs at exit and
// after SIGTERM, where the whole report must be out within about a second.
inline constexpr int kFifoReaderWaitMs = 300;

// Writes size bytes to path as described above. False with `error` set to
// the reason (the errno text, or what was wrong with the target). Never throws.
// durable = false skips the fsync: the file survives the process dying (the
// kernel has its pages) but not the machine crashing; for frequent rewrites.
bool write_file_atomically(const std::string& path, const char* data, std::size_t size, std::string& error,
                           bool durable = true) noexcept;
inline bool write_file_atomically(const std::string& path, const std::string& text, std::string& error,
                                  bool durable = true) noexcept {
  return write_file_atomically(path, text.data(), text.size(), error, durable);
}

// Creates `path` exclusively (O_CREAT | O_EXCL | O_NOFOLLOW), mode 0600, empty,
// as mkstemp does: when the name is taken (a planted file or link), a name
// with a random part instead, and `path` says which. For fallback files in a
// shared directory ($TMPDIR): the caller then writes its content over this
// file of its own. False with `error` set. Never throws.
bool create_private_file(std::string& path, std::string& error) noexcept;

// True when path names an existing FIFO, character device or socket, or a
// file reached through /proc (after following links): such a target is
// written in place and is no place for a file that is rewritten (the flight
// recorder skips it).
bool is_stream_target(const std::string& path) noexcept;

// Text to one of this process's open descriptors (stderr's summary) as the
// report goes to /dev/stderr: a pipe whose reader stopped reading costs at
// most a second per stall, never a hang; a regular file is appended to.
bool write_to_descriptor(int fd, const std::string& text) noexcept;

// Async-signal-safe: removes the temporary file of a write in progress, if
// any (only unlink on a path in static storage). A signal handler that is
// about to end the process calls it, so no temporary file outlives the run.
void remove_pending_temp_file() noexcept;

}  // namespace detail
}  // namespace v1
}  // namespace stepscope

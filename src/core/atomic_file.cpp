// The one output-file writer (see atomic_file.hpp for what each kind of
// target gets). Plain POSIX calls, no stdio: every error keeps its errno, and
// the pending temporary file's name sits in static storage where a signal
// handler may unlink it.
#include "core/atomic_file.hpp"

#include <stepscope/clock.hpp>

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>

namespace stepscope {
inline namespace v1 {
namespace detail {

namespace {

// The temporary file being written, for remove_pending_temp_file(). One slot:
// the library writes its outputs one after another on one thread; a second
// concurrent writer (rare: a tool writing while the run time does) goes
// untracked rather than wait. States: 0 free, 1 being filled or emptied
// (the handler must not read the name), 2 armed (the name is complete).
char g_pending_temp[PATH_MAX];
std::atomic<int> g_pending_state{0};

bool arm_pending(const std::string& tmp) noexcept {
  int expected = 0;
  if (tmp.size() >= sizeof g_pending_temp ||
      !g_pending_state.compare_exchange_strong(expected, 1, std::memory_order_acquire))
    return false;
  std::memcpy(g_pending_temp, tmp.c_str(), tmp.size() + 1);
  g_pending_state.store(2, std::memory_order_release);
  return true;
}

void disarm_pending(bool armed) noexcept {
  if (armed) g_pending_state.store(0, std::memory_order_release);
}

std::string errno_text(int err) {
  return std::strerror(err);
}

std::string directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Follows symbolic links to the final path (which may not exist yet: a
// dangling link names the file to create). Relative link text is relative to
// the link's own directory. via_proc: some hop went through /proc (as
// /dev/stdout -> /proc/self/fd/1 does): the target is a file some process
// has open. 0 or an errno.
int resolve_links(const std::string& path, std::string& out, bool* via_proc = nullptr) {
  std::string p = path;
  for (int hops = 0; hops < 40; ++hops) {
    if (via_proc != nullptr && p.rfind("/proc/", 0) == 0) *via_proc = true;
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) {
      if (errno != ENOENT) return errno;
      out = p;
      return 0;
    }
    if (!S_ISLNK(st.st_mode)) {
      out = p;
      return 0;
    }
    char buf[PATH_MAX];
    const ssize_t n = ::readlink(p.c_str(), buf, sizeof buf - 1);
    if (n < 0) return errno;
    const std::string link(buf, static_cast<std::size_t>(n));
    p = (!link.empty() && link[0] == '/') ? link : directory_of(p) + "/" + link;
  }
  return ELOOP;
}

long long monotonic_ms() {
  return static_cast<long long>(monotonic_ns() / 1000000);
}

void sleep_ms(int ms) {
  timespec ts{ms / 1000, static_cast<long>(ms % 1000) * 1000000L};
  while (::nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

// Writes everything to fd. A non-blocking fd (a FIFO) waits for room at most
// stall_ms at a time. 0 or an errno (ETIMEDOUT: the reader stopped reading).
int write_all(int fd, const char* data, std::size_t size, int stall_ms) {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      const int ready = ::poll(&p, 1, stall_ms);
      if (ready == 0) return ETIMEDOUT;
      if (ready < 0 && errno != EINTR) return errno;
      continue;
    }
    return n < 0 ? errno : EIO;
  }
  return 0;
}

// A FIFO, a character device or a socket: written in place. SIGPIPE (a
// reader that went away) is blocked on this thread for the write and any
// pending one consumed, so it fails with EPIPE instead of ending the run.
bool write_stream(const std::string& path, const struct stat& st, const char* data, std::size_t size,
                  std::string& error) {
  if (S_ISSOCK(st.st_mode)) {
    error = "it is a socket";
    return false;
  }
  int fd = -1;
  if (S_ISFIFO(st.st_mode)) {
    // Blocking open would wait for a reader forever; O_NONBLOCK fails with
    // ENXIO while there is none.
    const long long deadline = monotonic_ms() + kFifoReaderWaitMs;
    for (;;) {
      fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
      if (fd >= 0 || errno != ENXIO || monotonic_ms() >= deadline) break;
      sleep_ms(10);
    }
    if (fd < 0) {
      error = errno == ENXIO ? "no reader on the FIFO within " + std::to_string(kFifoReaderWaitMs) + " ms"
                             : errno_text(errno);
      return false;
    }
  } else {
    fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
      error = errno_text(errno);
      return false;
    }
  }
  sigset_t pipe_only, previous;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  const bool masked = ::pthread_sigmask(SIG_BLOCK, &pipe_only, &previous) == 0;
  int err = write_all(fd, data, size, 1000);
  if (::close(fd) != 0 && err == 0 && errno != EINTR) err = errno;
  if (masked) {
    if (err == EPIPE) {
      const timespec zero{0, 0};
      (void)::sigtimedwait(&pipe_only, nullptr, &zero);
    }
    ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  }
  if (err != 0) {
    error = err == ETIMEDOUT ? "the reader stopped reading" : errno_text(err);
    return false;
  }
  return true;
}

// A regular file (or one to create): temporary file beside it, fsync, rename.
bool write_replacing(const std::string& target, const struct stat* existing, const char* data, std::size_t size,
                     bool durable, std::string& error) {
  const std::string tmp = target + ".stepscope-tmp." + std::to_string(static_cast<long>(::getpid()));
  const bool armed = arm_pending(tmp);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0666);
  if (fd < 0 && errno == EEXIST) {
    // Named with our pid: left by an earlier process with the same pid that
    // was killed mid-write. Ours to remove.
    ::unlink(tmp.c_str());
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0666);
  }
  if (fd < 0) {
    error = errno_text(errno);
    disarm_pending(armed);
    return false;
  }
  if (existing != nullptr) (void)::fchmod(fd, existing->st_mode & 07777);  // keep the target's permissions
  int err = write_all(fd, data, size, 1000);
  if (err == 0 && durable && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0 && errno != EINTR) err = errno;
  if (err == 0 && ::rename(tmp.c_str(), target.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    error = errno_text(err);
  }
  disarm_pending(armed);
  return err == 0;
}

}  // namespace

bool is_stream_target(const std::string& path) noexcept {
  try {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return false;
    if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode) || S_ISSOCK(st.st_mode)) return true;
    std::string target;
    bool via_proc = false;
    return resolve_links(path, target, &via_proc) == 0 && via_proc;  // an open descriptor's file: written in place
  } catch (...) {
    return true;
  }
}

bool write_file_atomically(const std::string& path, const char* data, std::size_t size, std::string& error,
                           bool durable) noexcept {
  try {
    if (path.empty()) {
      error = "empty path";
      return false;
    }
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) {
      if (S_ISDIR(st.st_mode)) {
        error = "it is a directory";
        return false;
      }
      if (!S_ISREG(st.st_mode)) return write_stream(path, st, data, size, error);
      std::string target;
      bool via_proc = false;
      if (const int err = resolve_links(path, target, &via_proc); err != 0) {
        error = errno_text(err);
        return false;
      }
      struct stat resolved {};
      if (via_proc || ::stat(target.c_str(), &resolved) != 0 || resolved.st_ino != st.st_ino ||
          resolved.st_dev != st.st_dev) {
        // A file reached through an open descriptor (/dev/stdout redirected
        // to a file): renaming over it would leave the descriptor on the old,
        // deleted file, so it is rewritten in place. The same for a link the
        // kernel follows but whose text is no path (a deleted file's fd).
        const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOCTTY);
        if (fd < 0) {
          error = errno_text(errno);
          return false;
        }
        int werr = write_all(fd, data, size, 1000);
        if (::close(fd) != 0 && werr == 0 && errno != EINTR) werr = errno;
        if (werr != 0) error = errno_text(werr);
        return werr == 0;
      }
      return write_replacing(target, &st, data, size, durable, error);
    }
    if (errno != ENOENT) {
      error = errno_text(errno);
      return false;
    }
    // Nothing there yet, or a dangling link: create the file it names.
    std::string target;
    if (const int err = resolve_links(path, target); err != 0) {
      error = errno_text(err);
      return false;
    }
    return write_replacing(target, nullptr, data, size, durable, error);
  } catch (const std::exception& e) {
    error = e.what();
    return false;
  }
}

void remove_pending_temp_file() noexcept {
  if (g_pending_state.load(std::memory_order_acquire) == 2) ::unlink(g_pending_temp);
}

}  // namespace detail
}  // namespace v1
}  // namespace stepscope

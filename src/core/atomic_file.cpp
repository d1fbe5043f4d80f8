// The one output-file writer (see atomic_file.hpp for what each kind of
// target gets). Plain POSIX calls, no stdio: every error keeps its errno, and
// the pending temporary file's name sits in static storage where a signal
// handler may unlink it.
#include "core/atomic_file.hpp"

#include "core/env.hpp"

#include <stepscope/clock.hpp>

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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

// What the links of an output path lead to (walk_links).
struct LinkWalk {
  std::string final_path;  // the last hop: the file to write (may not exist yet)
  bool any_link = false;   // the path was a symbolic link (or a chain of them)
  bool via_proc = false;   // some hop went through /proc: a file some process has open
  int own_fd = -1;         // a hop named one of this process's descriptors (/proc/self/fd/N, /dev/fd/N)
};

// N when `p` names this process's descriptor N (/dev/stdout -> /proc/self/fd/1,
// /dev/fd/N, /proc/<our pid>/fd/N) and that descriptor is open; else -1.
int own_descriptor(const std::string& p) {
  const std::string pid_prefix = "/proc/" + std::to_string(static_cast<long>(::getpid())) + "/fd/";
  for (const std::string& prefix :
       {std::string("/proc/self/fd/"), std::string("/proc/thread-self/fd/"), std::string("/dev/fd/"), pid_prefix}) {
    if (p.rfind(prefix, 0) != 0 || p.size() == prefix.size() || p.size() - prefix.size() > 9) continue;
    int fd = 0;
    for (std::size_t i = prefix.size(); i < p.size(); ++i) {
      if (p[i] < '0' || p[i] > '9') return -1;
      fd = fd * 10 + (p[i] - '0');
    }
    return ::fcntl(fd, F_GETFD) >= 0 ? fd : -1;
  }
  return -1;
}

// The kernel's protected_symlinks, protected_fifos and protected_regular
// rules, applied whatever the sysctls say: in a world-writable sticky
// directory (/tmp) a link is followed, and a FIFO or file written, only when
// this process's user or the directory's owner owns it. A link planted there
// by another user would make this run write wherever it points; a FIFO, hand
// the report (host, pid, every set_config value) to whoever reads it.
// 0 or EACCES with `why` set.
int check_shared_directory_owner(const std::string& path, const struct stat& st, std::string& why) {
  struct stat dir {};
  if (::stat(directory_of(path).c_str(), &dir) != 0) return 0;  // the open below fails on its own
  const bool shared = (dir.st_mode & S_ISVTX) != 0 && (dir.st_mode & S_IWOTH) != 0;
  if (!shared || st.st_uid == ::geteuid() || st.st_uid == dir.st_uid) return 0;
  const char* what = S_ISLNK(st.st_mode) ? "a symbolic link" : S_ISFIFO(st.st_mode) ? "a FIFO" : "a file";
  why = "'" + path + "' is " + what + " owned by another user (uid " + std::to_string(st.st_uid) +
        ") in a world-writable sticky directory: " + (S_ISLNK(st.st_mode) ? "not followed" : "not written");
  return EACCES;
}

// Follows the symbolic links of `path` to the file they name (which may not
// exist yet: a dangling link names the file to create). Relative link text is
// relative to the link's own directory. Stops at a hop that names one of this
// process's descriptors. 0, or an errno with `why` set when it is not errno's text.
int walk_links(const std::string& path, LinkWalk& out, std::string& why) {
  std::string p = path;
  for (int hops = 0; hops < 40; ++hops) {
    if (p.rfind("/proc/", 0) == 0) out.via_proc = true;
    if ((out.own_fd = own_descriptor(p)) >= 0) {
      out.final_path = p;
      return 0;
    }
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) {
      if (errno != ENOENT) return errno;
      out.final_path = p;
      return 0;
    }
    if (!S_ISLNK(st.st_mode)) {
      out.final_path = p;
      return check_shared_directory_owner(p, st, why);
    }
    if (const int err = check_shared_directory_owner(p, st, why); err != 0) return err;
    out.any_link = true;
    char buf[PATH_MAX];
    const ssize_t n = ::readlink(p.c_str(), buf, sizeof buf - 1);
    if (n < 0) return errno;
    const std::string link(buf, static_cast<std::size_t>(n));
    p = (!link.empty() && link[0] == '/') ? link : directory_of(p) + "/" + link;
  }
  return ELOOP;
}

// A directory anyone may write to (/tmp, /dev/shm): a file created there is
// readable by its owner only (reports hold the host, pid and every
// set_config value).
bool world_writable_directory(const std::string& path) {
  struct stat dir {};
  return ::stat(directory_of(path).c_str(), &dir) == 0 && (dir.st_mode & S_IWOTH) != 0;
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

// SIGPIPE (a reader that went away) blocked on this thread while `write`
// runs, and a pending one it raised consumed: the write fails with EPIPE
// instead of ending the run.
template <typename Write>
int without_sigpipe(Write write) {
  sigset_t pipe_only, previous;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  sigset_t before;
  const bool was_pending = ::sigpending(&before) == 0 && sigismember(&before, SIGPIPE) == 1;
  const bool masked = ::pthread_sigmask(SIG_BLOCK, &pipe_only, &previous) == 0;
  const int err = write();
  if (masked) {
    if (err == EPIPE && !was_pending) {
      const timespec zero{0, 0};
      (void)::sigtimedwait(&pipe_only, nullptr, &zero);
    }
    ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  }
  return err;
}

// A pipe, socket or terminal that is already open (a shared, blocking
// descriptor: its flags are not ours to change): a chunk no larger than
// PIPE_BUF at a time, each after poll says there is room, so a reader that
// stopped reading costs at most stall_ms, not a hang.
int write_polled(int fd, const char* data, std::size_t size, int stall_ms) {
  std::size_t done = 0;
  while (done < size) {
    pollfd p{fd, POLLOUT, 0};
    const int ready = ::poll(&p, 1, stall_ms);
    if (ready == 0) return ETIMEDOUT;
    if (ready < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if ((p.revents & (POLLERR | POLLHUP)) != 0 && (p.revents & POLLOUT) == 0) return EPIPE;
    const std::size_t chunk = size - done < PIPE_BUF ? size - done : PIPE_BUF;
    const ssize_t n = ::write(fd, data + done, chunk);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
    } else if (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
      return errno;
    }
  }
  return 0;
}

std::string stream_error_text(int err) {
  return err == ETIMEDOUT ? "the reader stopped reading" : errno_text(err);
}

// One of this process's open descriptors (/dev/stdout, /dev/stderr,
// /proc/self/fd/N): written through a duplicate of it, at its offset (its
// O_APPEND honoured), never reopened: reopening a file with O_TRUNC would
// destroy what `>> train.log` collected, and a socket cannot be reopened.
bool write_descriptor(int fd, const char* data, std::size_t size, std::string& error) {
  const int dup = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  struct stat st {};
  if (dup < 0 || ::fstat(dup, &st) != 0) {
    error = errno_text(errno);
    if (dup >= 0) ::close(dup);
    return false;
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(dup);
    error = "it is a directory";
    return false;
  }
  int err = S_ISREG(st.st_mode) ? write_all(dup, data, size, 1000)
                                : without_sigpipe([&] { return write_polled(dup, data, size, 1000); });
  if (::close(dup) != 0 && err == 0 && errno != EINTR) err = errno;
  if (err != 0) error = stream_error_text(err);
  return err == 0;
}

// A FIFO, a character device or a socket reached by its name: written in
// place, never renamed over or removed.
bool write_stream(const std::string& path, const struct stat& st, const char* data, std::size_t size,
                  std::string& error) {
  if (S_ISSOCK(st.st_mode)) {
    error = "it is a socket";
    return false;
  }
  // Never a blocking open: it would wait forever for a FIFO's reader (ENXIO
  // with O_NONBLOCK while there is none: retried a while) or for a serial
  // line's carrier. The writes poll (write_all).
  const bool fifo = S_ISFIFO(st.st_mode);
  const long long deadline = monotonic_ms() + kFifoReaderWaitMs;
  int fd = -1;
  for (;;) {
    fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd >= 0 || !fifo || errno != ENXIO || monotonic_ms() >= deadline) break;
    sleep_ms(10);
  }
  if (fd < 0) {
    error = fifo && errno == ENXIO ? "no reader on the FIFO within " + std::to_string(kFifoReaderWaitMs) + " ms"
                                   : errno_text(errno);
    return false;
  }
  int err = without_sigpipe([&] { return write_all(fd, data, size, 1000); });
  if (::close(fd) != 0 && err == 0 && errno != EINTR) err = errno;
  if (err != 0) error = stream_error_text(err);
  return err == 0;
}

// A regular file reached through a symbolic link, or through /proc (another
// process's descriptor): opened by the kernel through the link - its
// permission checks and protected_symlinks apply - and written in place; a
// temporary file is never renamed over the link's target. `append`: written at
// the end (an open file of some process), else from the start and cut to size.
bool write_in_place(const std::string& path, const char* data, std::size_t size, bool append, bool durable,
                    std::string& error) {
  const int flags = O_WRONLY | O_CLOEXEC | O_NOCTTY | (append ? O_APPEND : O_CREAT);
  const int fd = ::open(path.c_str(), flags, world_writable_directory(path) ? 0600 : 0666);
  if (fd < 0) {
    error = errno_text(errno);
    return false;
  }
  struct stat st {};
  int err = ::fstat(fd, &st) != 0 ? errno : 0;
  if (err == 0 && !S_ISREG(st.st_mode)) {
    ::close(fd);
    error = "it is not a regular file";
    return false;
  }
  if (err == 0 && !append && ::ftruncate(fd, 0) != 0) err = errno;
  if (err == 0) err = write_all(fd, data, size, 1000);
  if (err == 0 && durable && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0 && errno != EINTR) err = errno;
  if (err != 0) error = errno_text(err);
  return err == 0;
}

// Creates the temporary file beside `target` exclusively (O_EXCL: never
// through a link, never someone else's file), named with our pid and a random
// part: names planted in advance in a shared directory cannot make every try
// fail. Returns the descriptor (armed for remove_pending_temp_file) or -1.
int create_temp_file(const std::string& target, mode_t mode, std::string& tmp, bool& armed) {
  const std::string base = target + ".stepscope-tmp." + std::to_string(static_cast<long>(::getpid())) + ".";
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::uint64_t random = 0;
    if (::getrandom(&random, sizeof random, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof random))
      random = monotonic_ns() * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(attempt);
    char suffix[17];
    std::snprintf(suffix, sizeof suffix, "%016llx", static_cast<unsigned long long>(random));
    tmp = base + suffix;
    armed = arm_pending(tmp);
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW, mode);
    if (fd >= 0 || errno != EEXIST) return fd;
    disarm_pending(armed);
    armed = false;
  }
  errno = EEXIST;
  return -1;
}

// A regular file that is not a link (or one to create): temporary file beside
// it, fsync, rename.
bool write_replacing(const std::string& target, const struct stat* existing, const char* data, std::size_t size,
                     bool durable, std::string& error) {
  std::string tmp;
  bool armed = false;
  const mode_t mode = world_writable_directory(target) ? 0600 : 0666;
  const int fd = create_temp_file(target, mode, tmp, armed);
  if (fd < 0) {
    error = errno_text(errno);
    disarm_pending(armed);
    return false;
  }
  // Keep the target's permissions when it is this user's own file with no
  // other name: a hard link planted in a shared directory (another user's
  // file, or one of ours linked there) must not hand its mode to the report.
  if (existing != nullptr && existing->st_uid == ::geteuid() && existing->st_nlink == 1)
    (void)::fchmod(fd, existing->st_mode & 0777);
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

bool write_to_descriptor(int fd, const std::string& text) noexcept {
  try {
    std::string error;
    return write_descriptor(fd, text.data(), text.size(), error);
  } catch (...) {
    return false;
  }
}

bool is_stream_target(const std::string& path) noexcept {
  try {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return false;
    if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode) || S_ISSOCK(st.st_mode)) return true;
    LinkWalk walk;
    std::string why;
    // An open descriptor's file (/dev/stdout redirected to a file): written in place, once.
    return walk_links(path, walk, why) == 0 && (walk.via_proc || walk.own_fd >= 0);
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
    LinkWalk walk;
    std::string why;
    if (const int err = walk_links(path, walk, why); err != 0) {
      error = why.empty() ? errno_text(err) : why;
      return false;
    }
    if (walk.own_fd >= 0) return write_descriptor(walk.own_fd, data, size, error);
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) {
      if (S_ISDIR(st.st_mode)) {
        error = "it is a directory";
        return false;
      }
      if (!S_ISREG(st.st_mode)) return write_stream(path, st, data, size, error);
      if (walk.via_proc) return write_in_place(path, data, size, /*append=*/true, durable, error);
    } else if (errno != ENOENT) {
      error = errno_text(errno);
      return false;
    }
    if (walk.any_link) return write_in_place(path, data, size, /*append=*/false, durable, error);
    return write_replacing(walk.final_path, S_ISREG(st.st_mode) ? &st : nullptr, data, size, durable, error);
  } catch (const std::exception& e) {
    error = e.what();
    return false;
  }
}

bool create_private_file(std::string& path, std::string& error) noexcept {
  try {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0600);
    if (fd < 0 && errno == EEXIST) {
      // Taken (by a planted file or link, or an earlier process with our
      // pid): a name no one can guess, as mkstemp makes it.
      std::string name = with_file_tag(path, ".XXXXXX");
      const std::size_t suffix = name.size() - (name.rfind("XXXXXX") + 6);
      fd = ::mkostemps(&name[0], static_cast<int>(suffix), O_CLOEXEC);
      if (fd >= 0) path = name;
    }
    if (fd < 0) {
      error = errno_text(errno);
      return false;
    }
    (void)::fchmod(fd, 0600);
    ::close(fd);
    return true;
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

// The report file of a live run, and where it goes when its path cannot be
// written (a fallback file, then stderr): the run time's last hand-off
// (docs/architecture.md).
#include "run/runtime.hpp"

#include "core/env.hpp"
#include "text/printable.hpp"

#include <stepscope/merge.hpp>
#include <stepscope/report.hpp>

#include <fmt/format.h>

#include "core/atomic_file.hpp"
#include "core/collector.hpp"
#include "core/trace.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

namespace stepscope {
inline namespace v1 {
namespace detail {

namespace {

long long realtime_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

// When this library was loaded; the fallback for process_start_ns().
const long long g_loaded_ns = realtime_ns();

// When this process started (CLOCK_REALTIME ns, to the next of the kernel's 10 ms ticks):
// its age from /proc/self/stat's start time against CLOCK_BOOTTIME. A report
// modified after it was not left by an earlier run. The load time where /proc
// cannot tell: later (a Python process imports stepscope after torch), so a
// sibling that ended before this one imported it reads as an earlier run.
long long process_start_ns() {
  long long start = g_loaded_ns;
  if (FILE* f = std::fopen("/proc/self/stat", "r")) {
    char buf[1024];
    const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = '\0';
    // Field 22 (starttime, in clock ticks since boot); the command name in
    // field 2 is parenthesised and may hold spaces: count from its last ')'.
    const char* p = std::strrchr(buf, ')');
    for (int field = 2; p != nullptr && field < 22; ++field) p = std::strchr(p + 1, ' ');
    const long ticks_per_s = ::sysconf(_SC_CLK_TCK);
    timespec boot{};
    if (p != nullptr && ticks_per_s > 0 && ::clock_gettime(CLOCK_BOOTTIME, &boot) == 0) {
      const long long ticks = std::strtoll(p + 1, nullptr, 10);
      const long long since_boot = static_cast<long long>(boot.tv_sec) * 1000000000LL + boot.tv_nsec;
      // The tick is rounded down: one more keeps a file its parent wrote just
      // before starting it (as a test does) on the earlier side.
      const long long tick = 1000000000LL / ticks_per_s;
      const long long age = since_boot - ticks * tick;
      if (ticks > 0 && age >= 0) start = std::min(start, realtime_ns() - age + tick);
    }
  }
  return start;
}

long long modified_ns(const struct stat& st) {
  return static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
}

std::string directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// An exclusive flock on a directory, waited for a bounded time; without it
// (a file system without flock, or a holder that does not let go) the
// writer goes on unlocked rather than wait.
class DirectoryLock {
 public:
  explicit DirectoryLock(const std::string& dir, int wait_ms) {
    fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd_ < 0) return;
    for (int waited = 0;; waited += 2) {
      if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
      if ((errno != EWOULDBLOCK && errno != EINTR) || waited >= wait_ms) break;
      timespec ts{0, 2000000};
      ::nanosleep(&ts, nullptr);
    }
    ::close(fd_);
    fd_ = -1;
  }
  ~DirectoryLock() {
    if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the lock
  }
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

bool ReportFile::write(const std::string& wanted, Report& report, bool durable, std::string& written,
                       std::string& error) {
  if (!moved_to_.empty()) {  // every later report says why it is here
    report.warnings.push_back(moved_note_);
    written = moved_to_;
    return write_file_atomically(written, report_to_json(report) + "\n", error, durable);
  }
  if (is_stream_target(wanted)) {
    written = wanted;
    return write_file_atomically(written, report_to_json(report) + "\n", error, durable);
  }
  const DirectoryLock lock(directory_of(wanted), kDirectoryLockWaitMs);
  written = wanted;
  struct stat st {};
  if (::stat(wanted.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    const bool ours = have_last_ && last_path_ == wanted && st.st_dev == last_dev_ && st.st_ino == last_ino_;
    const long long modified = modified_ns(st);
    if (started_ns_ == 0) started_ns_ = process_start_ns();
    if (!ours && modified >= started_ns_) {
      moved_to_ = with_file_tag(wanted, ".pid" + std::to_string(static_cast<long>(::getpid())));
      written = moved_to_;
      // Whose report it is, and what would have told the two apart.
      const char* whose = report.ranks           ? "the job report of another job"
                          : report.run.rank >= 0 ? "the report of another process of the same rank (another job)"
                                                 : "the report of another process";
      const char* advice = report.ranks           ? "put {pid} or the job's name in STEPSCOPE_MERGED_OUT"
                           : report.run.rank >= 0 ? "put {pid} or the job's name in STEPSCOPE_OUT"
                                                  : "no rank tells the two apart: set RANK and WORLD_SIZE, call "
                                                    "set_rank(), or put {pid} in STEPSCOPE_OUT";
      moved_note_ = fmt::format(
          "'{}' holds {} that ran at the same time as this one (written {:.1f} s ago; {}); this process writes '{}' "
          "instead of replacing it",
          wanted, whose, static_cast<double>(realtime_ns() - modified) / 1e9, advice, moved_to_);
      moved_note_ = printable(moved_note_, kMaxWarningChars);
      std::fprintf(stderr, "stepscope: warning: %s\n", moved_note_.c_str());
      report.warnings.push_back(moved_note_);
    }
  }
  if (!write_file_atomically(written, report_to_json(report) + "\n", error, durable)) return false;
  struct stat now {};
  if (::stat(written.c_str(), &now) == 0) {
    // This process's earlier file at another path (a snapshot before a rank
    // was set) would read as a second run: removed while it is still ours.
    struct stat old {};
    if (have_last_ && last_path_ != written && ::stat(last_path_.c_str(), &old) == 0 && old.st_dev == last_dev_ &&
        old.st_ino == last_ino_)
      ::unlink(last_path_.c_str());
    last_path_ = written;
    last_dev_ = now.st_dev;
    last_ino_ = now.st_ino;
    have_last_ = true;
  }
  return true;
}

std::string write_report_with_fallback(ReportFile& file, Report& report, const std::string& path, int rank,
                                       std::string& fallback) {
  std::string error, written;
  if (file.write(path, report, /*durable=*/true, written, error)) {
    if (!fallback.empty()) ::unlink(fallback.c_str());  // snapshots' refuge: the report is where it was wanted
    fallback.clear();
    return written;
  }
  // The fallback is in a shared directory ($TMPDIR, /tmp): a file of our own,
  // created exclusively and 0600, never one a name planted there leads to.
  std::string error2;
  if (fallback.empty()) reserve_fallback(rank, fallback, error2);
  const std::string message =
      printable("cannot write the report to '" + path + "' (" + error + "); writing it to '" +
                    (fallback.empty() ? fallback_report_path(rank, ::getpid()) : fallback) + "' instead",
                kMaxWarningChars);
  std::fprintf(stderr, "stepscope: warning: %s\n", message.c_str());
  report.warnings.push_back(message);
  if (!fallback.empty() && write_report_file(report, fallback, error2)) return fallback;
  std::fprintf(stderr, "stepscope: error: cannot write the report to '%s' either (%s); here it is:\n%s\n",
               printable(fallback, kMaxWarningChars).c_str(), printable(error2).c_str(),
               report_to_json(report).c_str());
  return "<stderr>";
}

bool reserve_fallback(int rank, std::string& fallback, std::string& error) {
  std::string candidate = fallback_report_path(rank, static_cast<long>(::getpid()));
  if (!create_private_file(candidate, error)) return false;
  fallback = candidate;
  return true;
}

void write_trace_if_enabled(Collector& collector, Report& report, const Settings& s, const std::string& report_path,
                            long child_pid) {
  TraceCapture capture = collector.take_trace();
  if (s.trace.empty() || capture.window.empty()) return;
  const RunInfo& run = report.run;
  std::string note, path;
  if (s.trace_out.empty()) {
    // Beside the report, whatever the working directory.
    const auto slash = report_path.rfind('/');
    const std::string dir = slash == std::string::npos ? "" : report_path.substr(0, slash + 1);
    path = dir + process_output_path("", "stepscope-trace.json.gz", run.rank, run.world_size, child_pid, note);
  } else {
    path = process_output_path(s.trace_out, "", run.rank, run.world_size, child_pid, note);
  }
  std::string error;
  if (write_chrome_trace(capture, run, path, error)) {
    if (!s.quiet)
      std::fprintf(stderr, "stepscope: trace of steps %s (%zu events%s) written to %s\n", capture.window.c_str(),
                   capture.events.size(), capture.events_over_limit ? ", some over the limit" : "",
                   printable(path, kMaxWarningChars).c_str());
    return;
  }
  // As the report's fallback: a file of our own, created exclusively, 0600.
  std::string fallback = fallback_report_path(run.rank, static_cast<long>(::getpid())) + ".trace.json.gz";
  std::string error2;
  const bool reserved = create_private_file(fallback, error2);
  const std::string failed = "cannot write the trace to '" + path + "' (" + error + ")";
  std::string message = failed + "; writing it to '" + fallback + "' instead";
  if (!reserved || !write_chrome_trace(capture, run, fallback, error2))
    message = failed + ", nor to '" + fallback + "' (" + error2 + "); no trace is written";
  message = printable(message, kMaxWarningChars);
  std::fprintf(stderr, "stepscope: warning: %s\n", message.c_str());
  report.warnings.push_back(message);
}

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

std::map<std::string, std::string> build_options() {
  std::map<std::string, std::string> build;
  build["enable"] = STEPSCOPE_ENABLE ? "ON" : "OFF";
#if defined(STEPSCOPE_WITH_CUDA) && STEPSCOPE_WITH_CUDA
  build["cuda"] = "ON";
#else
  build["cuda"] = "OFF";
#endif
#if defined(__clang__)
  build["compiler"] = std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  build["compiler"] = std::string("gcc ") + __VERSION__;
#endif
#if defined(NDEBUG)
  build["assertions"] = "OFF";
#else
  build["assertions"] = "ON";
#endif
  return build;
}

}  // namespace detail

std::string write_job_report(Report& job, const std::string& path, std::string& error) noexcept {
  try {
    std::string note;  // {pid} expanded; one job report per process, so no tag is ever added
    const std::string target = detail::process_output_path(path, "stepscope-report.merged.json", -1, 1, 0, note);
    detail::ReportFile file;
    std::string written;
    return file.write(target, job, /*durable=*/true, written, error) ? written : "";
  } catch (const std::exception& e) {
    error = e.what();
    return "";
  }
}

}  // namespace v1
}  // namespace stepscope

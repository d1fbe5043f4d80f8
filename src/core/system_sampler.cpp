#include "core/system_sampler.hpp"

#include <stepscope/clock.hpp>
#include <stepscope/ring.hpp>

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

namespace stepscope {
inline namespace v1 {
namespace detail {

namespace {

// Reads a small /proc file into buf with pread (no allocation). Returns length.
std::size_t read_fd(int fd, char* buf, std::size_t size) {
  if (fd < 0) return 0;
  const ssize_t n = ::pread(fd, buf, size - 1, 0);
  if (n <= 0) return 0;
  buf[n] = '\0';
  return static_cast<std::size_t>(n);
}

// Scheduler state letter from /proc/.../stat: the field after "(comm)".
char stat_state(const char* buf) {
  const char* close = std::strrchr(buf, ')');
  if (close == nullptr || close[1] == '\0' || close[2] == '\0') return '?';
  return close[2];
}

// Field n (1-based, as in proc(5)) of /proc/.../stat, counting past "(comm)".
bool stat_field(const char* buf, int n, unsigned long long& out) {
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr) return false;
  p += 2;  // now at field 3
  for (int field = 3; field < n; ++field) {
    p = std::strchr(p, ' ');
    if (p == nullptr) return false;
    ++p;
  }
  char* end = nullptr;
  out = std::strtoull(p, &end, 10);
  return end != p;
}

// Appends the pids of a children file's text (read_fd's) to pids, up to max.
std::size_t parse_pids(char* buf, std::size_t n, long* pids, std::size_t found, std::size_t max) {
  for (char* p = buf; n > 0 && found < max;) {
    char* end = nullptr;
    const long pid = std::strtol(p, &end, 10);
    if (end == p) break;
    pids[found++] = pid;
    p = end;
  }
  return found;
}

// A process's user + system CPU time in clock ticks, from its open stat file.
bool cpu_ticks(int stat_fd, unsigned long long& ticks) {
  char buf[1024];
  unsigned long long user = 0, system = 0;
  if (read_fd(stat_fd, buf, sizeof buf) == 0 || !stat_field(buf, 14, user) || !stat_field(buf, 15, system))
    return false;
  ticks = user + system;
  return true;
}

// A process's first argument after its program name (argv[1]: the script an
// interpreter runs), read from /proc/<pid>/cmdline into buf (no allocation);
// "" where it has none. pid 0: this process.
std::string_view first_argument(long pid, char (&buf)[1024]) {
  char path[64];
  if (pid == 0)
    std::snprintf(path, sizeof path, "/proc/self/cmdline");
  else
    std::snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  const std::size_t n = read_fd(fd, buf, sizeof buf);
  if (fd >= 0) ::close(fd);
  const char* end = buf + n;
  const char* arg = static_cast<const char*>(std::memchr(buf, '\0', n));
  if (arg == nullptr || ++arg >= end) return {};
  return std::string_view(arg, std::strlen(arg));  // read_fd ends the text with a NUL
}

}  // namespace

SystemSampler::~SystemSampler() {
  for (int fd : {statm_fd_, io_fd_, stat_fd_, loadavg_fd_, proc_stat_fd_, main_children_fd_, parent_children_fd_})
    if (fd >= 0) ::close(fd);
  for (const auto* list : {&children_, &siblings_})
    for (const ChildFiles& c : *list)
      for (int fd : {c.stat_fd, c.children_fd})
        if (fd >= 0) ::close(fd);
  for (auto& t : threads_) {
    if (t.stat_fd >= 0) ::close(t.stat_fd);
    if (t.schedstat_fd >= 0) ::close(t.schedstat_fd);
  }
}

namespace {
// The value after `key` in a "key: value" /proc file, 0 when absent.
unsigned long long keyed_value(const char* buf, const char* key) {
  const char* at = std::strstr(buf, key);
  return at != nullptr ? std::strtoull(at + std::strlen(key), nullptr, 10) : 0;
}
}  // namespace

SystemSampler::Totals SystemSampler::read_totals() const {
  Totals t;
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) == 0) {
    t.user_s = static_cast<double>(ru.ru_utime.tv_sec) + static_cast<double>(ru.ru_utime.tv_usec) * 1e-6;
    t.system_s = static_cast<double>(ru.ru_stime.tv_sec) + static_cast<double>(ru.ru_stime.tv_usec) * 1e-6;
    t.minflt = static_cast<std::uint64_t>(ru.ru_minflt);
    t.majflt = static_cast<std::uint64_t>(ru.ru_majflt);
    t.nvcsw = static_cast<std::uint64_t>(ru.ru_nvcsw);
    t.nivcsw = static_cast<std::uint64_t>(ru.ru_nivcsw);
  }
  char buf[1024];
  if (read_fd(io_fd_, buf, sizeof buf) > 0) {
    t.read_bytes = keyed_value(buf, "read_bytes:");
    t.write_bytes = keyed_value(buf, "\nwrite_bytes:");
  }
  unsigned long long ticks = 0;
  if (read_fd(stat_fd_, buf, sizeof buf) > 0 && stat_field(buf, 42, ticks))  // delayacct_blkio_ticks
    t.blkio_s = static_cast<double>(ticks) / static_cast<double>(sysconf(_SC_CLK_TCK));
  read_machine(t);
  read_children(t);
  read_siblings(t);
  return t;
}

// The parent's other children that run this program, in this process's
// group: the job's own
// processes where no rank says so (pytorch/examples' mnist_hogwild: two
// mp.Process trainers, each counted the other as "other processes"). Found
// through the parent's main thread's children file at every reading (they
// may start after this one); a program is told by /proc/<pid>/exe, read once
// per pid with its first argument. Bounded as the descendants.
void SystemSampler::read_siblings(Totals& t) const {
  if (parent_children_fd_ < 0) return;
  t.siblings_s = gone_siblings_s_;
  char buf[1024];
  long pids[kMaxChildren];
  const std::size_t found = parse_pids(buf, read_fd(parent_children_fd_, buf, sizeof buf), pids, 0, kMaxChildren);
  for (ChildFiles& c : siblings_) c.seen = false;
  const long self = static_cast<long>(::getpid());
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  for (std::size_t i = 0; i < found; ++i) {
    const long pid = pids[i];
    if (pid == self || std::find(not_siblings_.begin(), not_siblings_.end(), pid) != not_siblings_.end()) continue;
    auto it = std::find_if(siblings_.begin(), siblings_.end(), [pid](const ChildFiles& c) { return c.pid == pid; });
    if (it == siblings_.end()) {
      if (siblings_.size() >= siblings_.capacity() || not_siblings_.size() >= not_siblings_.capacity()) continue;
      char path[64], target[512];
      std::snprintf(path, sizeof path, "/proc/%ld/exe", pid);
      const ssize_t len = ::readlink(path, target, sizeof target);
      // And in this process's group: a launcher's workers and multiprocessing's
      // children stay in it; a shell's separate jobs and a notebook server's
      // kernels (each started in a session of its own) do not.
      const int fd = open_proc("/proc/%ld/stat", pid);
      unsigned long long group = 0;
      // And with the same first argument: the script an interpreter runs (a
      // shell script's `tensorboard &` beside `python train.py` is python too).
      const bool same = len > 0 && static_cast<std::size_t>(len) == exe_.size() &&
                        exe_.compare(0, exe_.size(), target, static_cast<std::size_t>(len)) == 0 &&
                        read_fd(fd, buf, sizeof buf) > 0 && stat_field(buf, 5, group) &&
                        group == static_cast<unsigned long long>(::getpgrp()) && first_argument(pid, buf) == argument_;
      if (!same) {
        if (fd >= 0) ::close(fd);
        not_siblings_.push_back(pid);
        continue;
      }
      siblings_.push_back(ChildFiles{pid, fd, -1, false, ~0ull, 0});
      it = siblings_.end() - 1;
    }
    unsigned long long ticks = 0;
    if (!cpu_ticks(it->stat_fd, ticks)) continue;
    it->seen = true;
    if (it->first_ticks == ~0ull) it->first_ticks = ticks;
    it->last_ticks = ticks;
    t.siblings_s += static_cast<double>(ticks) / tick;
    // A multiprocessing resource tracker, a launcher's idle helper: the same
    // program, no work. Counted once it has used CPU while watched.
    if (it->last_ticks > it->first_ticks) ++t.siblings;
  }
  drop_unseen(siblings_, [&](const ChildFiles& gone) {  // its CPU as last read stays counted
    gone_siblings_s_ += static_cast<double>(gone.last_ticks) / tick;
    t.siblings_s += static_cast<double>(gone.last_ticks) / tick;
  });
}

// The descendants' CPU: the waited-for ones from RUSAGE_CHILDREN, the live
// ones from /proc/<pid>/stat, found through the children files of the main
// thread and the step threads (the threads that fork DataLoader workers),
// then of each child's main thread (a forkserver's workers). Bounded: 64
// processes, 4 levels. Each descendant's files stay open while it lives (an
// fd names the process, not a pid that may be reused), so a reading is a
// pread per file: about 15 us with two workers, where opening them each time
// doubled the sampler's cost.
void SystemSampler::read_children(Totals& t) const {
  rusage ru{};
  if (getrusage(RUSAGE_CHILDREN, &ru) == 0)
    t.children_s = static_cast<double>(ru.ru_utime.tv_sec) + static_cast<double>(ru.ru_utime.tv_usec) * 1e-6 +
                   static_cast<double>(ru.ru_stime.tv_sec) + static_cast<double>(ru.ru_stime.tv_usec) * 1e-6;
  long pids[kMaxChildren];
  std::size_t found = 0;
  char buf[1024];
  const auto parse = [&](std::size_t n) { found = parse_pids(buf, n, pids, found, kMaxChildren); };
  const long self = static_cast<long>(::getpid());
  if (main_children_fd_ == -2) main_children_fd_ = open_proc("/proc/%ld/task/%ld/children", self);
  parse(read_fd(main_children_fd_, buf, sizeof buf));
  for (const ThreadFile& f : threads_) {
    if (f.tid == self) continue;
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%ld/task/%ld/children", self, static_cast<long>(f.tid));
    const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    parse(read_fd(fd, buf, sizeof buf));
    if (fd >= 0) ::close(fd);
  }
  for (ChildFiles& c : children_) c.seen = false;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  std::size_t next = 0;
  for (int level = 0; level < 4 && next < found; ++level) {
    const std::size_t level_end = found;
    for (; next < level_end; ++next) {
      ChildFiles* c = child_files(pids[next]);
      if (c == nullptr) continue;
      unsigned long long ticks = 0;
      if (!cpu_ticks(c->stat_fd, ticks)) continue;
      c->seen = true;
      t.children_s += static_cast<double>(ticks) / tick;
      ++t.children;
      parse(read_fd(c->children_fd, buf, sizeof buf));
    }
  }
  drop_unseen(children_, [](const ChildFiles&) {});  // waited for: in RUSAGE_CHILDREN from now on
}

// Closes the files of the processes the last reading did not see (gone) and
// forgets them, after `gone` had its look.
template <class Gone>
void SystemSampler::drop_unseen(std::vector<ChildFiles>& list, Gone&& gone) {
  for (std::size_t i = 0; i < list.size();) {
    if (list[i].seen) {
      ++i;
      continue;
    }
    gone(list[i]);
    for (int fd : {list[i].stat_fd, list[i].children_fd})
      if (fd >= 0) ::close(fd);
    list[i] = list.back();
    list.pop_back();
  }
}

int SystemSampler::open_proc(const char* format, long pid) {
  char path[64];
  std::snprintf(path, sizeof path, format, pid, pid);
  return ::open(path, O_RDONLY | O_CLOEXEC);
}

SystemSampler::ChildFiles* SystemSampler::child_files(long pid) const {
  for (ChildFiles& c : children_)
    if (c.pid == pid) return &c;
  if (children_.size() >= children_.capacity()) return nullptr;  // reserved at start(): no allocation here
  ChildFiles c{pid, open_proc("/proc/%ld/stat", pid), open_proc("/proc/%ld/task/%ld/children", pid), false};
  if (c.stat_fd < 0) {
    if (c.children_fd >= 0) ::close(c.children_fd);
    return nullptr;
  }
  children_.push_back(c);
  return &children_.back();
}

// Machine-wide load, so a report says whether it ran on a busy machine and
// `diff` can tell a slower machine from slower code.
void SystemSampler::read_machine(Totals& t) const {
  char buf[512];
  double one_minute = 0;
  if (read_fd(loadavg_fd_, buf, sizeof buf) > 0 && std::sscanf(buf, "%lf", &one_minute) == 1)
    t.load_average = one_minute;
  // First line of /proc/stat: "cpu user nice system idle iowait irq softirq steal ..." in clock ticks.
  unsigned long long v[8] = {};
  if (read_fd(proc_stat_fd_, buf, sizeof buf) > 0 &&
      std::sscanf(buf, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                  &v[7]) == 8) {
    const unsigned long long busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];  // without idle, iowait
    t.machine_busy_s = static_cast<double>(busy) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
}

double SystemSampler::measure_page_fault_us() {
  // Fresh anonymous pages, never from the application's heap; no huge pages
  // (one fault would map 512 pages). The minimum of a few rounds: preemption
  // only ever adds to a round.
  constexpr std::size_t kPages = 32;
  const long page = sysconf(_SC_PAGESIZE);
  if (page <= 0) return -1;
  const std::size_t bytes = kPages * static_cast<std::size_t>(page);
  double best_ns = -1;
  for (int round = 0; round < 3; ++round) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return -1;
    (void)::madvise(p, bytes, MADV_NOHUGEPAGE);
    auto* bytes_at = static_cast<volatile char*>(p);
    const std::uint64_t t0 = monotonic_ns();
    for (std::size_t i = 0; i < kPages; ++i) bytes_at[i * static_cast<std::size_t>(page)] = 1;
    const auto ns = static_cast<double>(monotonic_ns() - t0);
    ::munmap(p, bytes);
    if (best_ns < 0 || ns < best_ns) best_ns = ns;
  }
  return best_ns / static_cast<double>(kPages) * 1e-3;
}

double SystemSampler::read_rss_mb() {
  char buf[256];
  if (read_fd(statm_fd_, buf, sizeof buf) == 0) return 0;
  unsigned long long size = 0, resident = 0;
  if (std::sscanf(buf, "%llu %llu", &size, &resident) != 2) return 0;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

void SystemSampler::start(std::int64_t now_ns) {
  started_ = true;
  start_ns_ = now_ns;
  io_fd_ = ::open("/proc/self/io", O_RDONLY | O_CLOEXEC);
  stat_fd_ = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  loadavg_fd_ = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  proc_stat_fd_ = ::open("/proc/stat", O_RDONLY | O_CLOEXEC);
  try {
    children_.reserve(kMaxChildren);
    siblings_.reserve(kMaxChildren);
    not_siblings_.reserve(4 * kMaxChildren);
    char exe[512];
    const ssize_t len = ::readlink("/proc/self/exe", exe, sizeof exe);
    const long parent = static_cast<long>(::getppid());  // none where that is init (pid 1): no launcher
    if (len > 0 && static_cast<std::size_t>(len) < sizeof exe && parent > 1) {
      exe_.assign(exe, static_cast<std::size_t>(len));
      char own[1024];
      argument_ = first_argument(0, own);
      parent_children_fd_ = open_proc("/proc/%ld/task/%ld/children", parent);
    }
  } catch (...) {  // out of memory: descendants' live CPU unread (RUSAGE_CHILDREN still), siblings unread
  }
  start_ = read_totals();
  statm_fd_ = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  rss_mb_ = rss_start_mb_ = rss_peak_mb_ = read_rss_mb();
}

SystemSampler::Sched SystemSampler::sched(const ThreadFile& t) const {
  char buf[256];
  const ThreadSchedTimes now = parse_sched_times(buf, read_fd(t.schedstat_fd, buf, sizeof buf));
  if (now.known) return {std::max(now.run_ns, t.window_end.run_ns), std::max(now.wait_ns, t.window_end.wait_ns)};
  return t.window_end;
}

void SystemSampler::mark_window(Mark& mark, std::int64_t now_ns, std::uint64_t measured, bool opening) {
  mark.totals = read_totals();
  mark.ns = now_ns;
  mark.measured = measured;
  for (auto& t : threads_) {
    t.window_end = sched(t);
    if (opening) t.window_start = t.window_end;
  }
}

SystemSampler::ThreadFile* SystemSampler::thread_file(std::int64_t tid, const ThreadSchedTimes& at_start) {
  for (auto& t : threads_)
    if (t.tid == tid) return &t;
  if (threads_.size() >= 64) return nullptr;  // bound: sample at most 64 step threads
  const std::string base = "/proc/self/task/" + std::to_string(tid);
  ThreadFile t{tid,
               ::open((base + "/stat").c_str(), O_RDONLY | O_CLOEXEC),
               ::open((base + "/schedstat").c_str(), O_RDONLY | O_CLOEXEC),
               {},
               {},
               {}};
  // A thread first seen inside the window: its times count from now. Its
  // run's count from its registration when known: a run shorter than a
  // collector tick is first seen at the final drain, when it is over (a
  // 40 ms loop beside two busy processes read 0 ms of CPU wait).
  t.start = t.window_start = t.window_end = sched(t);
  if (at_start.known && at_start.run_ns <= t.start.run_ns && at_start.wait_ns <= t.start.wait_ns)
    t.start = Sched{at_start.run_ns, at_start.wait_ns};
  threads_.push_back(t);
  return &threads_.back();
}

void SystemSampler::sample(const std::vector<ThreadSample>& step_threads, StepProgress progress) {
  if (!started_) return;
  const std::uint64_t t0 = monotonic_ns();
  rss_mb_ = read_rss_mb();
  if (rss_mb_ > rss_peak_mb_) rss_peak_mb_ = rss_mb_;
  char buf[1024];
  for (const auto& s : step_threads) {
    // Known from here on, in a step or not: a loop shorter than a tick is
    // over when the final drain first sees its thread.
    ThreadFile* f = thread_file(s.tid, s.at_start);
    const std::size_t slot = s.kind == kInStepNoPhase ? kInStep : s.kind;
    if (slot > kInStep) continue;  // outside every step: nothing to attribute
    if (f == nullptr || read_fd(f->stat_fd, buf, sizeof buf) == 0) continue;
    const char state = stat_state(buf);
    ++kind_samples_[slot];
    if (state == 'R') ++kind_running_[slot];
    if (state == 'D') ++kind_disk_[slot];
  }
  if (progress.warmup_over && !window_closed_) {
    const auto now = static_cast<std::int64_t>(monotonic_ns());
    if (!window_open_) {
      window_open_ = true;
      mark_window(window_start_, now, progress.measured, true);
      window_end_ = window_start_;
    } else if (progress.measured > window_end_.measured) {
      mark_window(window_end_, now, progress.measured, false);
    }
  }
  ++samples_;
  cost_ns_ += monotonic_ns() - t0;
}

bool SystemSampler::wants_samples() const noexcept {
  for (const std::uint64_t n : kind_samples_)
    if (n < kMinKindSamples && n * 5 >= samples_) return true;
  return false;
}

void SystemSampler::end_window_at(std::int64_t now_ns, std::uint64_t measured) {
  if (window_open_ && measured > window_end_.measured) mark_window(window_end_, now_ns, measured, false);
  window_closed_ = true;
}

SystemSignals SystemSampler::finish(std::int64_t now_ns, std::uint64_t measured_steps) {
  SystemSignals out;
  if (!started_) return out;
  Mark run_end;
  run_end.totals = read_totals();
  run_end.ns = now_ns;
  out.available = true;
  out.run_wall_s = static_cast<double>(now_ns - start_ns_) * 1e-9;
  // The measured steps' window when a tick fell inside them, else the run.
  const bool windowed = window_open_ && window_end_.measured > window_start_.measured;
  Mark run_start;
  run_start.totals = start_;
  run_start.ns = start_ns_;
  const Mark& from = windowed ? window_start_ : run_start;
  const Mark& to = windowed ? window_end_ : run_end;
  const Totals &a = from.totals, &b = to.totals;
  // Scaled from the window's steps to all measured steps: every figure is per measured step.
  double scale = 1;
  if (windowed) {
    out.window_steps = static_cast<double>(window_end_.measured - window_start_.measured);
    if (measured_steps > 0) scale = static_cast<double>(measured_steps) / out.window_steps;
    out.before_steps_wall_s = static_cast<double>(window_start_.ns - start_ns_) * 1e-9;
    out.before_steps_cpu_system_s = std::max(0.0, window_start_.totals.system_s - start_.system_s);
    out.before_steps_minor_faults =
        window_start_.totals.minflt >= start_.minflt ? window_start_.totals.minflt - start_.minflt : 0;
  }
  const auto counted = [scale](std::uint64_t end, std::uint64_t begin) {
    return end >= begin ? static_cast<std::uint64_t>(std::llround(static_cast<double>(end - begin) * scale)) : 0;
  };
  out.wall_s = static_cast<double>(to.ns - from.ns) * 1e-9 * scale;
  out.cpu_user_s = std::max(0.0, b.user_s - a.user_s) * scale;
  out.cpu_system_s = std::max(0.0, b.system_s - a.system_s) * scale;
  cpu_set_t set;
  CPU_ZERO(&set);
  out.cores_available =
      sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  if (out.wall_s > 0 && out.cores_available > 0)
    out.cpu_utilization = (out.cpu_user_s + out.cpu_system_s) / (out.wall_s * out.cores_available);
  out.minor_faults = counted(b.minflt, a.minflt);
  out.major_faults = counted(b.majflt, a.majflt);
  out.voluntary_switches = counted(b.nvcsw, a.nvcsw);
  out.involuntary_switches = counted(b.nivcsw, a.nivcsw);
  out.read_bytes = counted(b.read_bytes, a.read_bytes);
  out.write_bytes = counted(b.write_bytes, a.write_bytes);
  out.io_wait_s = std::max(0.0, b.blkio_s - a.blkio_s) * scale;
  out.load_average_start = a.load_average;
  out.load_average_end = b.load_average;
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  out.cores_online = online > 0 ? static_cast<int>(online) : 0;
  // Live children exited and reaped inside the window move from one sum to
  // the other; one that exited unreaped is lost from both (a bound, not more).
  out.children_cpu_s = std::max(0.0, b.children_s - a.children_s) * scale;
  out.child_processes = std::max(a.children, b.children);
  if (a.machine_busy_s >= 0 && b.machine_busy_s >= a.machine_busy_s)
    out.other_processes_cpu_s = std::max(
        0.0, (b.machine_busy_s - a.machine_busy_s) * scale - (out.cpu_user_s + out.cpu_system_s) - out.children_cpu_s);
  // A sibling first seen after the window opened counts from its start; one
  // gone before the end, up to the last reading it was in (its time after
  // that is lost: a bound); never more than the others used.
  if (parent_children_fd_ >= 0) {
    out.siblings_cpu_s = std::max(0.0, b.siblings_s - a.siblings_s) * scale;
    if (out.other_processes_cpu_s >= 0) out.siblings_cpu_s = std::min(out.siblings_cpu_s, out.other_processes_cpu_s);
    out.sibling_processes = std::max(a.siblings, b.siblings);
  }
  // Time on a CPU is measured when every step thread's schedstat could be read.
  const bool all_read = !threads_.empty() && std::all_of(threads_.begin(), threads_.end(),
                                                         [](const ThreadFile& t) { return t.schedstat_fd >= 0; });
  if (all_read) out.step_threads_on_cpu_s = 0;
  for (auto& t : threads_) {
    const Sched begin = windowed ? t.window_start : t.start;
    const Sched end = windowed ? t.window_end : sched(t);
    out.runqueue_wait_s += static_cast<double>(end.wait_ns - begin.wait_ns) * 1e-9 * scale;
    if (all_read) out.step_threads_on_cpu_s += static_cast<double>(end.run_ns - begin.run_ns) * 1e-9 * scale;
  }
  // Costed only when the steps faulted: the calibration is itself 96 faults
  // (~1 ms on a VM whose faults trap to the host), most of a quiet
  // collector's fixed cost, and the analysis prices faults per step with it.
  if (out.minor_faults >= kFaultsWorthCosting) out.page_fault_us = measure_page_fault_us();
  out.rss_start_mb = rss_start_mb_;
  out.rss_end_mb = read_rss_mb();
  out.rss_peak_mb = std::max(rss_peak_mb_, out.rss_end_mb);
  const auto in = static_cast<std::size_t>(PhaseKind::input), co = static_cast<std::size_t>(PhaseKind::compute);
  // Fewer than kMinKindSamples say little; leave the fraction unmeasured (-1).
  if (kind_samples_[in] >= kMinKindSamples) {
    out.input_on_cpu_fraction = static_cast<double>(kind_running_[in]) / static_cast<double>(kind_samples_[in]);
    out.input_disk_wait_fraction = static_cast<double>(kind_disk_[in]) / static_cast<double>(kind_samples_[in]);
  }
  if (kind_samples_[co] >= kMinKindSamples)
    out.compute_on_cpu_fraction = static_cast<double>(kind_running_[co]) / static_cast<double>(kind_samples_[co]);
  if (kind_samples_[kInStep] >= kMinKindSamples)
    out.unattributed_on_cpu_fraction =
        static_cast<double>(kind_running_[kInStep]) / static_cast<double>(kind_samples_[kInStep]);
  out.input_samples = kind_samples_[in];
  out.samples = samples_;
  out.sampling_cost_ms = static_cast<double>(cost_ns_) * 1e-6;
  return out;
}

}  // namespace detail
}  // namespace v1
}  // namespace stepscope

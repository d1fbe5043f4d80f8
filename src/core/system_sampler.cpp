#include "core/system_sampler.hpp"

#include <stepscope/clock.hpp>

#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

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

}  // namespace

SystemSampler::~SystemSampler() {
  if (statm_fd_ >= 0) ::close(statm_fd_);
  for (auto& t : threads_) {
    if (t.stat_fd >= 0) ::close(t.stat_fd);
    if (t.schedstat_fd >= 0) ::close(t.schedstat_fd);
  }
}

SystemSampler::Totals SystemSampler::read_totals() {
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
  std::ifstream io("/proc/self/io");
  std::string key;
  unsigned long long value = 0;
  while (io >> key >> value) {
    if (key == "read_bytes:") t.read_bytes = value;
    if (key == "write_bytes:") t.write_bytes = value;
  }
  char buf[1024];
  const int fd = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    unsigned long long ticks = 0;
    if (read_fd(fd, buf, sizeof buf) > 0 && stat_field(buf, 42, ticks))  // delayacct_blkio_ticks
      t.blkio_s = static_cast<double>(ticks) / static_cast<double>(sysconf(_SC_CLK_TCK));
    ::close(fd);
  }
  read_machine(t);
  return t;
}

// Machine-wide load, so a report says whether it ran on a busy machine and
// `diff` can tell a slower machine from slower code.
void SystemSampler::read_machine(Totals& t) {
  char buf[512];
  int fd = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    double one_minute = 0;
    if (read_fd(fd, buf, sizeof buf) > 0 && std::sscanf(buf, "%lf", &one_minute) == 1) t.load_average = one_minute;
    ::close(fd);
  }
  // First line of /proc/stat: "cpu user nice system idle iowait irq softirq steal ..." in clock ticks.
  fd = ::open("/proc/stat", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    unsigned long long v[8] = {};
    if (read_fd(fd, buf, sizeof buf) > 0 &&
        std::sscanf(buf, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                    &v[6], &v[7]) == 8) {
      const unsigned long long busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];  // without idle, iowait
      t.machine_busy_s = static_cast<double>(busy) / static_cast<double>(sysconf(_SC_CLK_TCK));
    }
    ::close(fd);
  }
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
  start_ = read_totals();
  statm_fd_ = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  rss_mb_ = rss_start_mb_ = rss_peak_mb_ = read_rss_mb();
}

SystemSampler::ThreadFile* SystemSampler::thread_file(std::int64_t tid) {
  for (auto& t : threads_)
    if (t.tid == tid) return &t;
  if (threads_.size() >= 64) return nullptr;  // bound: sample at most 64 step threads
  const std::string base = "/proc/self/task/" + std::to_string(tid);
  ThreadFile t{tid, ::open((base + "/stat").c_str(), O_RDONLY | O_CLOEXEC),
               ::open((base + "/schedstat").c_str(), O_RDONLY | O_CLOEXEC), 0};
  char buf[256];
  unsigned long long run = 0, wait = 0;
  if (read_fd(t.schedstat_fd, buf, sizeof buf) > 0 && std::sscanf(buf, "%llu %llu", &run, &wait) == 2)
    t.runqueue_start_ns = wait;
  threads_.push_back(t);
  return &threads_.back();
}

void SystemSampler::sample(const std::vector<ThreadSample>& step_threads) {
  if (!started_) return;
  const std::uint64_t t0 = monotonic_ns();
  rss_mb_ = read_rss_mb();
  if (rss_mb_ > rss_peak_mb_) rss_peak_mb_ = rss_mb_;
  char buf[1024];
  for (const auto& s : step_threads) {
    if (s.kind >= kind_samples_.size()) continue;  // not in a phase: nothing to attribute
    ThreadFile* f = thread_file(s.tid);
    if (f == nullptr || read_fd(f->stat_fd, buf, sizeof buf) == 0) continue;
    const char state = stat_state(buf);
    ++kind_samples_[s.kind];
    if (state == 'R') ++kind_running_[s.kind];
    if (state == 'D') ++kind_disk_[s.kind];
  }
  ++samples_;
  cost_ns_ += monotonic_ns() - t0;
}

SystemSignals SystemSampler::finish(std::int64_t now_ns) {
  SystemSignals out;
  if (!started_) return out;
  const Totals end = read_totals();
  out.available = true;
  out.wall_s = static_cast<double>(now_ns - start_ns_) * 1e-9;
  out.cpu_user_s = end.user_s - start_.user_s;
  out.cpu_system_s = end.system_s - start_.system_s;
  cpu_set_t set;
  CPU_ZERO(&set);
  out.cores_available = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  if (out.wall_s > 0 && out.cores_available > 0)
    out.cpu_utilization = (out.cpu_user_s + out.cpu_system_s) / (out.wall_s * out.cores_available);
  out.minor_faults = end.minflt - start_.minflt;
  out.major_faults = end.majflt - start_.majflt;
  out.voluntary_switches = end.nvcsw - start_.nvcsw;
  out.involuntary_switches = end.nivcsw - start_.nivcsw;
  out.read_bytes = end.read_bytes >= start_.read_bytes ? end.read_bytes - start_.read_bytes : 0;
  out.write_bytes = end.write_bytes >= start_.write_bytes ? end.write_bytes - start_.write_bytes : 0;
  out.io_wait_s = end.blkio_s - start_.blkio_s;
  out.load_average_start = start_.load_average;
  out.load_average_end = end.load_average;
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  out.cores_online = online > 0 ? static_cast<int>(online) : 0;
  if (start_.machine_busy_s >= 0 && end.machine_busy_s >= start_.machine_busy_s)
    out.other_processes_cpu_s = std::max(
        0.0, (end.machine_busy_s - start_.machine_busy_s) - (out.cpu_user_s + out.cpu_system_s));
  char buf[256];
  for (auto& t : threads_) {
    unsigned long long run = 0, wait = 0;
    if (read_fd(t.schedstat_fd, buf, sizeof buf) > 0 && std::sscanf(buf, "%llu %llu", &run, &wait) == 2 &&
        wait >= t.runqueue_start_ns)
      out.runqueue_wait_s += static_cast<double>(wait - t.runqueue_start_ns) * 1e-9;
  }
  out.rss_start_mb = rss_start_mb_;
  out.rss_end_mb = read_rss_mb();
  out.rss_peak_mb = std::max(rss_peak_mb_, out.rss_end_mb);
  const auto in = static_cast<std::size_t>(PhaseKind::input), co = static_cast<std::size_t>(PhaseKind::compute);
  // Fewer than 10 samples say little; leave the fraction unmeasured (-1).
  if (kind_samples_[in] >= 10) {
    out.input_on_cpu_fraction = static_cast<double>(kind_running_[in]) / static_cast<double>(kind_samples_[in]);
    out.input_disk_wait_fraction = static_cast<double>(kind_disk_[in]) / static_cast<double>(kind_samples_[in]);
  }
  if (kind_samples_[co] >= 10)
    out.compute_on_cpu_fraction = static_cast<double>(kind_running_[co]) / static_cast<double>(kind_samples_[co]);
  out.input_samples = kind_samples_[in];
  out.samples = samples_;
  out.sampling_cost_ms = static_cast<double>(cost_ns_) * 1e-6;
  return out;
}

}  // namespace detail
}  // namespace v1
}  // namespace stepscope

// Host and operating-system signals, sampled by the collector thread.
//
// Process totals (CPU, faults, context switches, storage bytes, block-I/O
// delay) are read at start and end. Each collector tick it also samples, for
// every step thread, the scheduler state from /proc/self/task/TID/stat
// together with the phase kind the thread has published on its ring: a
// wall-clock sampling profiler that tells whether the thread was on a CPU
// (working) or sleeping (waiting) inside its input phases — without any
// system call on the training thread. Files are opened once and re-read
// with pread, so a sample costs a few microseconds.
#pragma once

#include <stepscope/report.hpp>

#include <array>
#include <cstdint>
#include <vector>

namespace stepscope {
inline namespace v1 {
namespace detail {

class SystemSampler {
 public:
  SystemSampler() = default;
  SystemSampler(const SystemSampler&) = delete;
  SystemSampler& operator=(const SystemSampler&) = delete;
  ~SystemSampler();

  void start(std::int64_t now_ns);
  // kind: PhaseKind as a byte, 0xff when the thread is in no phase.
  struct ThreadSample {
    std::int64_t tid;
    std::uint8_t kind;
  };
  void sample(const std::vector<ThreadSample>& step_threads);
  double rss_mb() const { return rss_mb_; }
  SystemSignals finish(std::int64_t now_ns);

 private:
  struct Totals {
    double user_s = 0, system_s = 0;
    std::uint64_t minflt = 0, majflt = 0, nvcsw = 0, nivcsw = 0;
    std::uint64_t read_bytes = 0, write_bytes = 0;
    double blkio_s = 0;
    // The machine around the process: 1-minute load average and the busy CPU
    // time of all CPUs since boot (/proc/stat: all but idle and iowait). <0: unreadable.
    double load_average = -1;
    double machine_busy_s = -1;
  };
  struct ThreadFile {
    std::int64_t tid;
    int stat_fd;
    int schedstat_fd;
    std::uint64_t runqueue_start_ns;
  };
  static Totals read_totals();
  static void read_machine(Totals& t);
  ThreadFile* thread_file(std::int64_t tid);
  double read_rss_mb();

  bool started_ = false;
  std::int64_t start_ns_ = 0;
  Totals start_;
  int statm_fd_ = -1;
  double rss_mb_ = 0, rss_start_mb_ = 0, rss_peak_mb_ = 0;
  std::vector<ThreadFile> threads_;
  // [kind 0..4]: samples, samples on CPU (state R), samples in state D.
  std::array<std::uint64_t, 5> kind_samples_{}, kind_running_{}, kind_disk_{};
  std::uint64_t samples_ = 0;
  std::uint64_t cost_ns_ = 0;
  double runqueue_wait_s_ = 0;
};

}  // namespace detail
}  // namespace v1
}  // namespace stepscope

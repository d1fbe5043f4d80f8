// Host and operating-system signals, sampled by the collector thread.
//
// Process totals (CPU, faults, context switches, storage bytes, block-I/O
// delay) are read at start, at the measured steps' boundaries and at the end:
// per-step figures come from the measured steps only. The window opens at the
// first tick after the warm-up ended and closes at the last tick that saw a
// measured step end (before the final drain, which may come long after the
// loop); what came before it (start-up, warm-up steps, lazy initialisation in
// the first step) is reported apart, as such. Each collector tick it also samples, for
// every step thread, the scheduler state from /proc/self/task/TID/stat
// together with the phase kind the thread has published on its ring: a
// wall-clock sampling profiler that tells whether the thread was on a CPU
// (working) or sleeping (waiting) inside its input phases — without any
// system call on the training thread. Files are opened once and re-read
// with pread, so a sample costs a few microseconds.
#pragma once

#include <stepscope/report.hpp>

#include "core/registry.hpp"  // ThreadSchedTimes

#include <array>
#include <cstdint>
#include <string>
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
  // kind: ThreadRing::current_kind (a PhaseKind, kInStepNoPhase or kNoPhase).
  struct ThreadSample {
    std::int64_t tid;
    std::uint8_t kind;
    ThreadSchedTimes at_start;  // when it registered (RingEntry::sched_at_start)
  };
  // Where the steps are, as the aggregator saw them at this drain.
  struct StepProgress {
    bool warmup_over;        // every warm-up step completed (or none configured)
    std::uint64_t measured;  // measured steps completed
  };
  void sample(const std::vector<ThreadSample>& step_threads, StepProgress progress);
  // The final drain follows: the window keeps its last boundary.
  void end_window() { window_closed_ = true; }
  // Ends the window at now_ns (the loop just ended) when it opened and
  // steps were measured since its last mark, even after end_window().
  void end_window_at(std::int64_t now_ns, std::uint64_t measured);
  double rss_mb() const { return rss_mb_; }
  // A part of the step (a phase kind, or the step outside its phases) in a
  // fifth of the samples or more has fewer than kMinKindSamples, the least
  // its on-CPU fraction is reported from: the collector samples at its
  // quiet interval until it has them, then as seldom as its cost asks.
  static constexpr std::uint64_t kMinKindSamples = 10;
  bool wants_samples() const noexcept;
  // measured_steps: the measured steps of the whole run (the window's counters are scaled to them).
  SystemSignals finish(std::int64_t now_ns, std::uint64_t measured_steps = 0);
  // Wall time (us) of one first touch of a fresh page: the minimum over a few
  // rounds of touching fresh anonymous pages. <0 when it could not be measured.
  // finish() measures it when the measured steps faulted at least
  // kFaultsWorthCosting pages (page_fault_us stays <0 otherwise).
  static double measure_page_fault_us();
  static constexpr std::uint64_t kFaultsWorthCosting = 64;

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
    // This process's descendants: CPU time (live and waited-for) and how many live.
    double children_s = 0;
    int children = 0;
    // Its siblings: the parent's other children running the same program
    // (mp.Process / mp.spawn workers, a launcher's ranks): CPU time, how many.
    double siblings_s = 0;
    int siblings = 0;  // of them, those that used CPU since first seen (not an idle helper)
  };
  // A thread's schedstat: time on a CPU and time runnable but waiting for one (ns).
  struct Sched {
    std::uint64_t run_ns = 0, wait_ns = 0;
  };
  struct ThreadFile {
    std::int64_t tid;
    int stat_fd;
    int schedstat_fd;
    Sched start;
    // At the window's open and at its last boundary.
    Sched window_start, window_end;
  };
  // A reading of the process counters at one instant.
  struct Mark {
    Totals totals;
    std::int64_t ns = 0;
    std::uint64_t measured = 0;
  };
  Totals read_totals() const;
  void read_machine(Totals& t) const;
  void read_children(Totals& t) const;
  void read_siblings(Totals& t) const;
  // A live descendant's /proc files, open while it lives.
  struct ChildFiles {
    long pid;
    int stat_fd;
    int children_fd;
    bool seen;
    unsigned long long first_ticks = 0, last_ticks = 0;  // CPU at the first and the last reading (siblings)
  };
  static constexpr std::size_t kMaxChildren = 64;
  static int open_proc(const char* format, long pid);
  ChildFiles* child_files(long pid) const;
  template <class Gone>
  static void drop_unseen(std::vector<ChildFiles>& list, Gone&& gone);
  // Now, never below the last reading (the last reading when unreadable: the thread exited).
  Sched sched(const ThreadFile& t) const;
  void mark_window(Mark& mark, std::int64_t now_ns, std::uint64_t measured, bool opening);
  ThreadFile* thread_file(std::int64_t tid, const ThreadSchedTimes& at_start);
  double read_rss_mb();

  bool started_ = false;
  std::int64_t start_ns_ = 0;
  Totals start_;
  int statm_fd_ = -1;
  double rss_mb_ = 0, rss_start_mb_ = 0, rss_peak_mb_ = 0;
  std::vector<ThreadFile> threads_;
  // [kind 0..4, then kInStep: in a step outside its phases]: samples,
  // samples on CPU (state R), samples in state D.
  static constexpr std::size_t kInStep = 5;
  std::array<std::uint64_t, kInStep + 1> kind_samples_{}, kind_running_{}, kind_disk_{};
  std::uint64_t samples_ = 0;
  // The measured steps' window (collector thread only).
  bool window_open_ = false, window_closed_ = false;
  Mark window_start_, window_end_;
  // /proc files read at every window boundary, kept open (pread).
  int io_fd_ = -1, stat_fd_ = -1, loadavg_fd_ = -1, proc_stat_fd_ = -1;
  // The descendants' files (read_children, from read_totals() const): -2 not opened yet.
  mutable int main_children_fd_ = -2;
  mutable std::vector<ChildFiles> children_;
  // The siblings' files as the descendants', and the parent's children that
  // run another program (not read again).
  std::string exe_, argument_;  // this program, and its first argument (first_argument)
  mutable int parent_children_fd_ = -1;
  mutable std::vector<ChildFiles> siblings_;
  mutable double gone_siblings_s_ = 0;  // the CPU of those gone, as last read
  mutable std::vector<long> not_siblings_;
  std::uint64_t cost_ns_ = 0;
  double runqueue_wait_s_ = 0;
};

}  // namespace detail
}  // namespace v1
}  // namespace stepscope

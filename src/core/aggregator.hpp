// Aggregation of phase records into per-phase statistics and the per-step
// breakdown. Owned and used by the collector thread only: no locks.
//
//   Aggregator agg(options);
//   ThreadId t = agg.add_thread(tid);
//   agg.consume(t, record);          // for every drained record, in push order
//   Report facts = agg.build_report();
#pragma once

#include "core/clock.hpp"
#include "core/histogram.hpp"

#include <stepscope/report.hpp>
#include <stepscope/ring.hpp>

#include <array>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

namespace stepscope::detail {

struct AggregatorOptions {
  std::uint64_t warmup_steps = 5;
  std::size_t series_capacity = 1024;   // points kept per step series (then downsampled)
  std::size_t step_intervals_kept = 4096;
  std::size_t pending_background_max = 1 << 16;
};

inline constexpr int kKindCount = 5;  // PhaseKind values

// Aggregates of one phase on one thread, split in-step / not-in-step.
struct PhaseAggregate {
  DurationStats inclusive;  // measured (post-warm-up)
  RunningStats self;        // moments only: the collector's budget has no room for a second histogram
  DurationStats warmup;     // inclusive, warm-up steps only
  std::uint64_t overlap_ns = 0;  // with steps (not-in-step records only)
  std::uint64_t overlap_measured_ns = 0;  // inclusive time whose overlap was computed
  void merge(const PhaseAggregate& other) {
    inclusive.merge(other.inclusive);
    self.merge(other.self);
    warmup.merge(other.warmup);
    overlap_ns += other.overlap_ns;
    overlap_measured_ns += other.overlap_measured_ns;
  }
  bool empty() const { return inclusive.moments.count() == 0 && warmup.moments.count() == 0; }
};

class Aggregator {
 public:
  using ThreadId = std::uint32_t;

  Aggregator(AggregatorOptions options, const TickConverter* clock);

  ThreadId add_thread(std::int64_t os_tid);
  // The thread exited and its ring is drained: fold its state into the pools
  // so memory stays bounded by live threads.
  void retire_thread(ThreadId thread);

  // One record, in the order its thread pushed it. Hot for the collector.
  void consume(ThreadId thread, const PhaseRecord& record);
  // Device time for a phase occurrence resolved later by a device backend.
  void add_device_time(const PhaseSite* site, bool in_step, std::uint64_t step, std::uint64_t device_ns);
  // Latest process RSS (MB), attached to the steps that complete after it.
  void set_rss_mb(double mb) { rss_mb_ = mb; }
  // Processes background records still waiting for their steps to complete.
  void flush_pending();

  std::uint64_t records() const { return records_; }
  bool ran_steps(ThreadId thread) const { return threads_[thread].ran_steps; }
  double median_step_ms() const { return step_wall_.histogram.quantile(0.5) * 1e-6; }
  std::uint64_t steps_completed() const { return steps_measured_ + steps_warmup_; }
  std::uint64_t first_ticks() const { return first_ticks_; }
  std::uint64_t last_ticks() const { return last_ticks_; }
  std::vector<std::string> notes() const;

  // Facts for the report (no verdict): steps, phases, records.
  void fill_report(Report& report) const;

 private:
  struct PhaseInfo {
    std::string name;
    PhaseKind kind;
  };
  struct ThreadInfo {
    std::int64_t os_tid = 0;
    bool live = true;
    bool ran_steps = false;
    // Inclusive time of completed children, per depth (self = inclusive - children).
    std::array<std::uint64_t, 66> child_ns{};
    // Self time by kind within the step in progress on this thread.
    std::array<std::uint64_t, kKindCount> step_kind_ns{};
    // [phase id][0: in step, 1: not in step]
    std::vector<std::array<PhaseAggregate, 2>> phases;
  };
  struct StepPoint {  // accumulates one series point
    std::uint64_t first_step = 0, n = 0;
    std::uint64_t wall_ns = 0, unattributed_ns = 0;
    std::array<std::uint64_t, kKindCount> kind_ns{};
    double rss_mb = 0;
  };
  struct PendingBackground {
    std::uint32_t phase;
    ThreadId thread;
    std::uint64_t start, end;  // ticks
  };

  // Records made before the (warmup+1)-th step started belong to the warm-up
  // (including those before the first step); with no warm-up, none do.
  bool is_warmup(std::uint64_t step) const { return options_.warmup_steps > 0 && step <= options_.warmup_steps; }
  std::uint32_t phase_id(const PhaseSite* site);
  PhaseAggregate& aggregate(ThreadId thread, std::uint32_t phase, bool in_step);
  void complete_step(ThreadInfo& t, const PhaseRecord& r, std::uint64_t wall_ns, std::uint64_t self_ns);
  void add_series_point(const StepPoint& point);
  void process_background(const PendingBackground& p);
  std::uint64_t overlap_with_steps(std::uint64_t start, std::uint64_t end) const;

  AggregatorOptions options_;
  const TickConverter* clock_;
  std::vector<PhaseInfo> phase_info_;
  std::unordered_map<const PhaseSite*, std::uint32_t> site_ids_;
  std::unordered_map<std::string, std::uint32_t> name_ids_;  // "kind/name"
  // Direct-mapped cache in front of site_ids_: a step's few call sites hit
  // it every time, so the collector pays a shift and a compare per record
  // instead of a hash-map lookup.
  struct SiteCacheEntry {
    const PhaseSite* site = nullptr;
    std::uint32_t id = 0;
  };
  static constexpr std::size_t kSiteCacheSize = 256;
  std::array<SiteCacheEntry, kSiteCacheSize> site_cache_{};

  std::vector<ThreadInfo> threads_;
  // Pools of retired threads: [0] ran steps, [1] never did.
  std::array<std::vector<std::array<PhaseAggregate, 2>>, 2> retired_;
  // Threads folded into each pool that ran each phase: [pool][phase][in_step ? 0 : 1].
  std::array<std::vector<std::array<std::uint32_t, 2>>, 2> retired_threads_;
  // Device time per phase, [phase][in_step ? 0 : 1] (not per thread).
  std::vector<std::array<DurationStats, 2>> device_;

  // Steps.
  DurationStats step_wall_, step_warmup_wall_;
  std::array<std::uint64_t, kKindCount> step_kind_total_ns_{};
  std::uint64_t step_unattributed_total_ns_ = 0;
  std::uint64_t steps_measured_ = 0, steps_warmup_ = 0;
  std::deque<std::pair<std::uint64_t, std::uint64_t>> step_intervals_;  // ticks, by end
  std::uint64_t last_step_end_ = 0;
  std::uint64_t last_step_start_ = 0;

  // Series: closed points + the point being filled.
  std::vector<StepPoint> series_;
  StepPoint open_point_;
  std::uint64_t series_stride_ = 1;
  double rss_mb_ = 0;

  std::vector<PendingBackground> pending_;
  std::uint64_t pending_overflowed_ = 0;
  std::uint64_t depth_clamped_ = 0;
  std::uint64_t records_ = 0;
  std::uint64_t first_ticks_ = ~std::uint64_t{0}, last_ticks_ = 0;
};

}  // namespace stepscope::detail

// Aggregation of phase records into per-phase statistics and the per-step
// breakdown. Owned and used by the collector thread only: no locks.
//
//   Aggregator agg(options);
//   ThreadId t = agg.add_thread(tid);
//   agg.consume(t, records, count);  // drained records, in push order
//   agg.consume(t, record);          // or one at a time
//   Report facts;
//   agg.fill_report(facts);          // per-phase stats, steps, breakdown
#pragma once

#include "core/env.hpp"
#include "stats/clock.hpp"
#include "stats/histogram.hpp"

#include <stepscope/report.hpp>
#include <stepscope/ring.hpp>

#include <array>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

namespace stepscope {
inline namespace v1 {
namespace detail {

struct AggregatorOptions {
  std::uint64_t warmup_steps = kDefaultWarmupSteps;
  std::size_t series_capacity = 1024;      // points kept per step series (then downsampled)
  std::size_t step_intervals_kept = 4096;  // at least (rounded up to a power of two)
  std::size_t pending_background_max = 1 << 16;
};

inline constexpr int kKindCount = static_cast<int>(kPhaseKindCount);  // PhaseKind values
// Call sites kept apart per phase name; more share one "(other call sites)"
// row, so a name used in generated code cannot grow the report without bound.
inline constexpr std::size_t kMaxSitesPerPhase = 16;

// Aggregates of one phase on one thread, split in-step / not-in-step.
//
// Post-warm-up moments are kept apart for occurrences without and with
// children: a leaf's self time is its inclusive time, so a leaf (most
// occurrences: the innermost phases are the most frequent) updates one set
// of moments where it would update two. Integer moments merge exactly, so
//   inclusive = leaf + parent,  self = leaf + parent_self.
struct PhaseAggregate {
  RunningStats leaf;                      // inclusive (= self) time of occurrences with no child time
  RunningStats parent;                    // inclusive time of occurrences with child time
  RunningStats parent_self;               // self time of the same occurrences
  Histogram inclusive_histogram;          // inclusive time, every post-warm-up occurrence
  DurationStats warmup;                   // inclusive, warm-up steps only
  std::uint64_t overlap_ns = 0;           // with steps (not-in-step records only)
  std::uint64_t overlap_measured_ns = 0;  // inclusive time whose overlap was computed

  void add(std::uint64_t inclusive_ns, std::uint64_t child_ns, std::uint64_t self_ns) noexcept {
    inclusive_histogram.add(inclusive_ns);
    if (child_ns == 0) {
      leaf.add(inclusive_ns);
    } else {
      parent.add(inclusive_ns);
      parent_self.add(self_ns);
    }
  }
  RunningStats inclusive() const noexcept {
    RunningStats m = leaf;
    m.merge(parent);
    return m;
  }
  // Self time has moments only: the collector's budget has no room for a second histogram.
  RunningStats self() const noexcept {
    RunningStats m = leaf;
    m.merge(parent_self);
    return m;
  }
  std::uint64_t count() const noexcept { return leaf.count() + parent.count(); }
  void merge(const PhaseAggregate& other) {
    leaf.merge(other.leaf);
    parent.merge(other.parent);
    parent_self.merge(other.parent_self);
    inclusive_histogram.merge(other.inclusive_histogram);
    warmup.merge(other.warmup);
    overlap_ns += other.overlap_ns;
    overlap_measured_ns += other.overlap_measured_ns;
  }
  bool empty() const { return count() == 0 && warmup.moments.count() == 0; }
};

class Aggregator {
 public:
  using ThreadId = std::uint32_t;

  Aggregator(AggregatorOptions options, const TickConverter* clock);

  ThreadId add_thread(std::int64_t os_tid);
  // The thread exited and its ring is drained: fold its state into the pools
  // so memory stays bounded by live threads.
  void retire_thread(ThreadId thread);

  // Records of one thread, in the order it pushed them: the collector's hot
  // loop (it passes each contiguous run of a drained ring).
  void consume(ThreadId thread, const PhaseRecord* records, std::size_t count);
  void consume(ThreadId thread, const PhaseRecord& record) { consume(thread, &record, 1); }
  // Device time for a phase (or step) occurrence resolved later by a device
  // backend; depth: the record's nesting depth on its thread.
  void add_device_time(const PhaseSite* site, bool in_step, std::uint64_t step, std::uint64_t device_ns,
                       std::uint8_t depth = 0);
  // Latest process RSS (MB), attached to the steps that complete after it.
  void set_rss_mb(double mb) { rss_mb_ = mb; }
  // Processes background records still waiting for their steps to complete.
  void flush_pending();

  std::uint64_t records() const { return records_; }
  bool ran_steps(ThreadId thread) const { return threads_[thread].ran_steps; }
  double median_step_ms() const { return step_wall_.histogram.quantile(0.5) * 1e-6; }
  std::uint64_t measured_steps() const { return step_wall_.moments.count(); }
  std::uint64_t steps_completed() const { return step_wall_.moments.count() + step_warmup_wall_.moments.count(); }
  std::uint64_t last_step_end_ticks() const { return last_step_end_; }  // 0: no step ended
  std::vector<std::string> notes() const;

  // Facts for the report (no verdict): steps, phases, records.
  void fill_report(Report& report) const;

 private:
  // One call site (file:line) of a phase: the unit the aggregates are kept
  // in. Sites with the same kind and name are one phase (a PhaseGroup) in
  // the report, with per-site rows when there are several.
  struct PhaseInfo {
    std::string name;
    PhaseKind kind;
    std::uint32_t group;
    std::string file;
    int line;
  };
  struct PhaseGroup {
    std::vector<std::uint32_t> ids;                 // into phase_info_, at most kMaxSitesPerPhase + 1
    std::uint32_t overflow_id = ~std::uint32_t{0};  // "(other call sites)"; none yet
    std::uint64_t sites_merged = 0;                 // distinct sites folded into it
  };
  struct ThreadInfo {
    std::int64_t os_tid = 0;
    bool live = true;
    bool ran_steps = false;
    // Inclusive time of completed children, per depth (self = inclusive -
    // children): a slot for every 8-bit depth and the child slot of the
    // deepest, so the depth indexes it unchecked. The recording thread
    // clamps the depth at kMaxDepth; those records are counted for a note.
    std::array<std::uint64_t, 257> child_ns{};
    // Self time by kind within the step in progress on this thread.
    std::array<std::uint64_t, kKindCount> step_kind_ns{};
    // Between steps: when this thread's last outermost step ended (ticks),
    // and the self time of input phases it ran since (the fetch of a
    // range-for header), which the next step's breakdown counts as input.
    std::uint64_t last_step_end = 0;
    bool ended_a_step = false;
    std::uint64_t between_input_ns = 0;
    // A steps() loop ended on this thread since its last step
    // (kRecordLoopEnd): the gap to its next step is between loops.
    bool loop_ended = false;
    RunningStats loop_steps;          // the measured steps of its current steps() loop
    std::uint64_t step_calls = 0;     // phase occurrences in the measured step in progress
    std::uint64_t loop_first_ns = 0;  // that loop's first step, when it opened after another loop
    // [phase id][0: in step, 1: not in step]
    std::vector<std::array<PhaseAggregate, 2>> phases;
    // Cache from (call site, in step) to the aggregate it feeds, so a record
    // finds its aggregate with one compare: no phase id lookup, no index
    // arithmetic. Two-way: a key lives at its slot or, when two hot keys
    // collide, at the neighbouring one (slot ^ 1), checked on a miss. Points
    // into phases: cleared whenever that reallocates.
    //
    // A step repeats the same phases in the same order, so each entry also
    // remembers the entry the next in-step record used last time: checking
    // that guess is one load and one compare, cheaper than hashing the key.
    struct alignas(32) SlotCacheEntry {
      std::uintptr_t key = 0;  // site address | in-step bit (sites are 8-byte aligned); 0: empty
      PhaseAggregate* aggregate = nullptr;
      const SlotCacheEntry* next = &none;  // the guess; never null
      std::uint32_t phase = 0;
      std::uint32_t kind_slot = 0;       // PhaseKind, as an index below kKindCount
      static const SlotCacheEntry none;  // matches no key
    };
    static constexpr int kSlotCacheBits = 6;
    std::array<SlotCacheEntry, 1u << kSlotCacheBits> slot_cache{};
    static std::uintptr_t slot_key(const PhaseSite* site, unsigned flags) noexcept {
      return reinterpret_cast<std::uintptr_t>(site) | (flags & kRecordInStep);
    }
    SlotCacheEntry& slot_entry(std::uintptr_t key) noexcept { return slot_cache[slot_index(key)]; }
    static std::size_t slot_index(std::uintptr_t key) noexcept {
      // Fibonacci hashing: the top bits of the product by 2^64/phi depend on
      // every bit of the key, the in-step bit included, and spread call
      // sites laid out at a fixed stride. One multiply and one shift.
      const std::uint64_t mixed = static_cast<std::uint64_t>(key) * 0x9E3779B97F4A7C15ull;
      return static_cast<std::size_t>(mixed >> (64 - kSlotCacheBits));
    }
  };
  struct StepPoint {  // accumulates one series point
    std::uint64_t first_step = 0, last_step = 0, n = 0;
    std::uint64_t wall_ns = 0, unattributed_ns = 0;
    std::uint64_t between_ns = 0;        // gaps before its steps, in no input phase
    std::uint64_t between_input_ns = 0;  // input phases in those gaps (also in kind_ns)
    std::array<std::uint64_t, kKindCount> kind_ns{};
    double rss_mb = 0;
    // The device's side of its steps (fill_device_clock): steps timed, their
    // device time, and their outermost phases' device time by kind.
    std::uint64_t device_n = 0, device_ns = 0;
    std::array<std::uint64_t, kKindCount> device_kind_ns{};
  };
  struct SlowStepEntry {  // one of the slowest steps so far (StepStats::slowest)
    std::uint64_t step = 0, wall_ns = 0, unattributed_ns = 0, between_ns = 0;
    std::array<std::uint64_t, kKindCount> kind_ns{};
  };
  struct PendingBackground {
    std::uint32_t phase;
    ThreadId thread;
    std::uint64_t start, end;  // ticks
  };

  // Records made while one of the first `warmup_steps` steps was the latest
  // started belong to the warm-up; with no warm-up, none do. Those before
  // any step (setup, or a process that marks no steps: its phases would all
  // have read zero) are measured, outside the steps.
  bool is_warmup(std::uint64_t step) const {
    return options_.warmup_steps > 0 && step >= 1 && step <= options_.warmup_steps;
  }
  struct SiteCacheEntry;
  // The phase of a call site: a direct-mapped cache hit (inline), else the maps.
  const SiteCacheEntry& site_entry(const PhaseSite* site) {
    SiteCacheEntry& cached = site_cache_[(reinterpret_cast<std::uintptr_t>(site) >> 3) % kSiteCacheSize];
    if (__builtin_expect(cached.site == site, 1)) return cached;
    return site_entry_miss(site, cached);
  }
  const SiteCacheEntry& site_entry_miss(const PhaseSite* site, SiteCacheEntry& cached);
  std::uint32_t phase_id(const PhaseSite* site) { return site_entry(site).id; }
  PhaseAggregate& aggregate(ThreadInfo& t, std::uint32_t phase, bool in_step) {
    if (__builtin_expect(phase >= t.phases.size(), 0)) {
      t.phases.resize(phase_info_.size());
      t.slot_cache = {};  // its pointers may have moved
    }
    return t.phases[phase][in_step ? 0 : 1];
  }
  PhaseAggregate& aggregate(ThreadId thread, std::uint32_t phase, bool in_step) {
    return aggregate(threads_[thread], phase, in_step);
  }
  ThreadInfo::SlotCacheEntry& slot_entry_miss(ThreadInfo& t, const PhaseSite* site, unsigned flags);
  template <TickScale::Parts kTickParts>
  void consume_run(ThreadInfo& t, ThreadId thread, const PhaseRecord* records, std::size_t count);
  void consume_other(ThreadInfo& t, ThreadId thread, const PhaseRecord& r, std::uint64_t wall_ns,
                     std::uint64_t child_ns, std::uint64_t self_ns, bool warm);
  void complete_step(ThreadInfo& t, const PhaseRecord& r, std::uint64_t wall_ns, std::uint64_t self_ns,
                     std::uint64_t calls);
  void complete_warmup_step(ThreadInfo& t, const PhaseRecord& r, std::uint64_t wall_ns);
  void complete_unended_step(ThreadInfo& t, const PhaseRecord& r, std::uint64_t wall_ns);
  void evaluation_loop(ThreadInfo& t, bool step);
  void outer_step(ThreadInfo& t, unsigned flags);
  // The time between this step and the thread's previous one (0 for its
  // first, and for steps nested in another): updates the coverage totals.
  struct StepGap {
    std::uint64_t input_ns = 0, other_ns = 0;  // in input phases / the rest
    bool after_loop = false;                   // the step opens a steps() loop that followed another
  };
  StepGap gap_before(ThreadInfo& t, const PhaseRecord& r, std::uint64_t wall_ns);
  std::uint32_t site_id_in_group(std::uint32_t group, const PhaseSite* site);
  void fill_phases(Report& report, double step_total_ms) const;
  void add_step_interval(const PhaseRecord& r);
  void settle_pending();
  void add_background(ThreadId thread, std::uint32_t phase, const PhaseRecord& r);
  void add_series_point(const StepPoint& point);
  void keep_slow_step(const ThreadInfo& t, std::uint64_t step, std::uint64_t wall_ns, std::uint64_t unattributed_ns,
                      std::uint64_t between_ns);
  static void keep_slowest(std::vector<SlowStepEntry>& kept, std::uint64_t& floor_ns, const SlowStepEntry& entry);
  static std::vector<SlowStep> slowest_of(const std::vector<SlowStepEntry>& kept);
  void add_device_step(std::uint64_t step, std::uint64_t device_ns, std::uint8_t depth);
  StepPoint& series_point_of(std::uint64_t step);
  void process_background(const PendingBackground& p);
  std::uint64_t overlap_with_steps(std::uint64_t start, std::uint64_t end) const;

  AggregatorOptions options_;
  const TickConverter* clock_;
  std::vector<PhaseInfo> phase_info_;
  std::unordered_map<const PhaseSite*, std::uint32_t> site_ids_;
  std::vector<PhaseGroup> groups_;
  std::unordered_map<std::string, std::uint32_t> name_groups_;  // "kind/name" -> groups_ index
  // Direct-mapped cache in front of site_ids_, for what misses a thread's
  // slot cache (and for device times): a shift and a compare instead of a
  // hash-map lookup.
  struct SiteCacheEntry {
    const PhaseSite* site = nullptr;
    std::uint32_t id = 0;
    std::uint32_t kind_slot = 0;  // PhaseKind, as an index below kKindCount
  };
  static constexpr std::size_t kSiteCacheSize = 256;
  std::array<SiteCacheEntry, kSiteCacheSize> site_cache_{};

  std::deque<ThreadInfo> threads_;  // a deque: cache entries point into a ThreadInfo, which must not move
  // Pools of retired threads: [0] ran steps, [1] never did.
  std::array<std::vector<std::array<PhaseAggregate, 2>>, 2> retired_;
  // Threads folded into each pool that ran each phase: [pool][phase][in_step ? 0 : 1].
  std::array<std::vector<std::array<std::uint32_t, 2>>, 2> retired_threads_;
  // Device time per phase, [phase][in_step ? 0 : 1] (not per thread).
  std::vector<std::array<DurationStats, 2>> device_;
  // The device-true accounting (fill_device_clock): the measured steps'
  // device times (outermost steps: the least step depth seen), and the device
  // time of in-step phases by kind at each nesting depth below kDeviceDepths.
  static constexpr std::size_t kDeviceDepths = 8;
  DurationStats step_device_;
  std::uint8_t step_device_depth_ = 0xff;
  std::array<std::array<std::uint64_t, kKindCount>, kDeviceDepths> device_kind_ns_{};
  // The last few steps' phase device time by depth and kind, by step number
  // (a step's phases resolve before the step itself: their events come
  // first), joined to the step's own device time in add_device_step.
  struct DeviceStepParts {
    std::uint64_t step = ~std::uint64_t{0};
    std::array<std::array<std::uint64_t, kKindCount>, kDeviceDepths> kind_ns{};
  };
  static constexpr std::size_t kDeviceStepsJoined = 16;
  std::array<DeviceStepParts, kDeviceStepsJoined> device_parts_{};
  // The device-paced slowest steps (as slow_steps_, device step times).
  std::vector<SlowStepEntry> device_slow_steps_;
  std::uint64_t device_slow_floor_ns_ = 0;
  void fill_device_clock(Report& report) const;
  void fill_device_series(Report& report, bool device_paced) const;

  // Steps.
  DurationStats step_wall_, step_warmup_wall_, step_unended_wall_;
  std::uint64_t outer_steps_ = 0;       // steps that held steps (kRecordOuterStep): loops of steps
  std::uint64_t evaluation_loops_ = 0;  // steps() loops that evaluated (kRecordEvaluationStep)
  std::uint64_t last_step_end_ = 0;
  // The union of the steps' intervals (ticks) as disjoint intervals sorted
  // by start, a circular buffer of options.step_intervals_kept (rounded up
  // to a power of two, size - 1 in step_intervals_mask_): logical
  // positions [step_union_begin_, step_union_end_), slot = position & mask.
  // overlap_with_steps binary-searches it: O(log n + intervals it overlaps)
  // per background record, where scanning the steps was O(steps kept).
  std::vector<std::pair<std::uint64_t, std::uint64_t>> step_union_;
  std::uint64_t step_intervals_mask_ = 0;
  std::uint64_t step_union_begin_ = 0, step_union_end_ = 0;
  void add_to_step_union(std::uint64_t start, std::uint64_t end);
  // Coverage: outermost steps' wall time, and the gaps between consecutive
  // ones on the same thread (all steps, warm-up included).
  std::uint64_t covered_ns_ = 0, gap_ns_ = 0, gap_input_ns_ = 0;
  std::uint64_t gaps_ = 0;  // gaps measured (steps that followed another on their thread)
  // Gaps after a steps() loop ended (epoch boundaries): outside every step,
  // charged to no step and not in the coverage.
  std::uint64_t loop_gap_ns_ = 0, loop_gaps_ = 0;
  // Measured steps that opened a steps() loop after another loop (the first
  // step of epoch 2, 3, ...): count, total and slowest wall time.
  std::uint64_t loop_first_steps_ = 0, loop_first_ns_ = 0;
  // The spread of step times inside each steps() loop, pooled over the loops
  // that ended: their squared deviations from their own loop's mean, the
  // degrees of freedom, the loops. Steps of different loops (a training and
  // an evaluation loop, stages of different sizes) differ by design.
  // Also, of the loops that opened after another and had more steps than
  // their first: the first steps' total, and the total of the mean of the
  // rest of each one's own loop (a loop's first step is judged against its
  // own loop's steps: an evaluation loop's steps are not a training loop's).
  struct WithinLoops {
    double scatter_ns2 = 0;
    std::uint64_t dof = 0, loops = 0;
    std::uint64_t compared = 0, compared_first_max_ns = 0;
    double compared_first_ns = 0, compared_rest_ns = 0;
    void add(const RunningStats& loop, std::uint64_t first_ns) {
      if (loop.count() == 0) return;
      const double sd = loop.stddev_ns();
      scatter_ns2 += sd * sd * static_cast<double>(loop.count() - 1);
      dof += loop.count() - 1;
      ++loops;
      if (first_ns == 0 || loop.count() < 2) return;
      ++compared;
      compared_first_max_ns = std::max(compared_first_max_ns, first_ns);
      compared_first_ns += static_cast<double>(first_ns);
      compared_rest_ns += static_cast<double>(loop.total_ns() - first_ns) / static_cast<double>(loop.count() - 1);
    }
  };
  WithinLoops within_loops_;

  // The slowest outermost measured steps: a min-heap on wall time of at most
  // StepStats::kSlowestStepsKept; once full, a step must be slower than
  // slow_floor_ns_ (its front) to enter. A steady run enters it about
  // kept * ln(steps) times in all.
  std::vector<SlowStepEntry> slow_steps_;
  std::uint64_t slow_floor_ns_ = 0;
  // Phase occurrences per measured step against the step's wall time: exact
  // integer sums of both, their squares and their product (128 bits where a
  // product of nanoseconds needs them), so the path of every step has no
  // conversion or division and the variance no cancellation; and the fewest
  // and most occurrences.
  __extension__ using Wide = unsigned __int128;
  struct CallsAndWall {
    std::uint64_t n = 0, sx = 0, sy = 0, sxx = 0;
    Wide syy = 0, sxy = 0;
    std::uint64_t min_calls = ~std::uint64_t{0}, max_calls = 0;
    void add(std::uint64_t calls, std::uint64_t wall_ns) noexcept {
      ++n;
      sx += calls;
      sy += wall_ns;
      sxx += calls * calls;
      syy += static_cast<Wide>(wall_ns) * wall_ns;
      sxy += static_cast<Wide>(calls) * wall_ns;
      min_calls = std::min(min_calls, calls);
      max_calls = std::max(max_calls, calls);
    }
  };
  CallsAndWall calls_and_wall_;
  std::optional<CallsPerStep> calls_per_step() const;

  // Series: closed points + the point being filled.
  std::vector<StepPoint> series_;
  StepPoint open_point_;
  std::uint64_t series_stride_ = 1;
  double rss_mb_ = 0;

  std::vector<PendingBackground> pending_;
  std::uint64_t pending_overflowed_ = 0;
  std::uint64_t depth_clamped_ = 0;
  std::uint64_t records_ = 0;
};

}  // namespace detail
}  // namespace v1
}  // namespace stepscope

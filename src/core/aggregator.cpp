#include "core/aggregator.hpp"

#include <stepscope/phase.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace stepscope {
inline namespace v1 {
namespace detail {

namespace {
constexpr double kNsToMs = 1e-6;

// to[k] += from[k], unrolled (GCC -O2 keeps a five-iteration loop a loop).
template <std::size_t... K>
inline void add_kinds(std::array<std::uint64_t, kKindCount>& to, const std::array<std::uint64_t, kKindCount>& from,
                      std::index_sequence<K...>) {
  ((to[K] += from[K]), ...);
}
}  // namespace

Aggregator::Aggregator(AggregatorOptions options, const TickConverter* clock) : options_(options), clock_(clock) {
  if (options_.series_capacity < 2) options_.series_capacity = 2;
  series_.reserve(options_.series_capacity);
  // A power of two, so a slot of the step union is a mask away.
  std::size_t kept = 1;
  while (kept < options_.step_intervals_kept) kept *= 2;
  step_intervals_mask_ = kept - 1;
  step_union_.resize(kept);
}

const Aggregator::ThreadInfo::SlotCacheEntry Aggregator::ThreadInfo::SlotCacheEntry::none{};

Aggregator::ThreadId Aggregator::add_thread(std::int64_t os_tid) {
  ThreadInfo& info = threads_.emplace_back();
  info.os_tid = os_tid;
  info.phases.resize(phase_info_.size());
  return static_cast<ThreadId>(threads_.size() - 1);
}

void Aggregator::retire_thread(ThreadId thread) {
  // Background records of this thread may still be pending: settle them first.
  flush_pending();
  ThreadInfo& t = threads_[thread];
  const int which = t.ran_steps ? 0 : 1;
  auto& pool = retired_[which];
  auto& counts = retired_threads_[which];
  if (pool.size() < phase_info_.size()) pool.resize(phase_info_.size());
  if (counts.size() < phase_info_.size()) counts.resize(phase_info_.size());
  for (std::size_t i = 0; i < t.phases.size(); ++i) {
    for (int j = 0; j < 2; ++j) {
      if (t.phases[i][j].empty()) continue;
      pool[i][j].merge(t.phases[i][j]);
      ++counts[i][j];
    }
  }
  within_loops_.add(t.loop_steps, t.loop_first_ns);
  t.loop_steps = RunningStats{};
  t.phases.clear();
  t.phases.shrink_to_fit();
  t.slot_cache = {};
  t.live = false;
}

const Aggregator::SiteCacheEntry& Aggregator::site_entry_miss(const PhaseSite* site, SiteCacheEntry& cached) {
  auto it = site_ids_.find(site);
  std::uint32_t id;
  if (it != site_ids_.end()) {
    id = it->second;
  } else {
    // Call sites with the same name and kind are one phase (a group); each
    // place (file:line) in it keeps its own aggregates, merged in the report.
    std::string key = std::string(to_string(site->kind)) + "/" + (site->name ? site->name : "");
    auto named = name_groups_.find(key);
    std::uint32_t group;
    if (named != name_groups_.end()) {
      group = named->second;
    } else {
      group = static_cast<std::uint32_t>(groups_.size());
      groups_.emplace_back();
      name_groups_.emplace(std::move(key), group);
    }
    id = site_id_in_group(group, site);
    site_ids_.emplace(site, id);
  }
  cached = SiteCacheEntry{site, id, static_cast<std::uint32_t>(site->kind) % kKindCount};
  return cached;
}

namespace {
bool same_file(const char* a, const std::string& b) {
  return b == (a != nullptr ? a : "");
}
}  // namespace

std::uint32_t Aggregator::site_id_in_group(std::uint32_t group, const PhaseSite* site) {
  PhaseGroup& g = groups_[group];
  for (std::uint32_t id : g.ids) {
    const PhaseInfo& info = phase_info_[id];
    if (id != g.overflow_id && info.line == site->line && same_file(site->file, info.file)) return id;
  }
  std::string file = site->file != nullptr ? site->file : "";
  int line = site->line;
  if (g.ids.size() >= kMaxSitesPerPhase) {
    ++g.sites_merged;
    if (g.overflow_id != ~std::uint32_t{0}) return g.overflow_id;
    file = "(other call sites)";
    line = 0;
  }
  const auto id = static_cast<std::uint32_t>(phase_info_.size());
  phase_info_.push_back(PhaseInfo{site->name ? site->name : "", site->kind, group, std::move(file), line});
  g.ids.push_back(id);
  if (g.ids.size() > kMaxSitesPerPhase) g.overflow_id = id;
  // Every live thread has a slot for every phase, so consume() indexes
  // without a bounds check (retired threads have none and get no records).
  for (ThreadInfo& t : threads_) {
    if (!t.live) continue;
    t.phases.resize(phase_info_.size());
    t.slot_cache = {};  // its pointers may have moved
  }
  return id;
}

Aggregator::StepGap Aggregator::gap_before(ThreadInfo& t, const PhaseRecord& r, std::uint64_t wall) {
  StepGap gap;
  covered_ns_ += wall;
  if (t.ended_a_step && r.start_ticks >= t.last_step_end) {
    const std::uint64_t between = clock_->duration_ns(t.last_step_end, r.start_ticks);
    if (t.loop_ended) {
      // Between two steps() loops (an epoch's evaluation, a checkpoint):
      // no step waited for it, so no step's wall time holds it. The
      // loop-header fetch such a gap would otherwise suggest cannot be
      // there: steps() times every fetch as its step's data phase.
      loop_gap_ns_ += between;
      ++loop_gaps_;
      gap.after_loop = true;
    } else {
      gap.input_ns = std::min(t.between_input_ns, between);
      gap.other_ns = between - gap.input_ns;
      gap_ns_ += between;
      gap_input_ns_ += gap.input_ns;
    }
    ++gaps_;
  }
  t.between_input_ns = 0;
  t.loop_ended = (r.flags & kRecordLoopEnd) != 0;  // left by break/return/exception
  t.last_step_end = r.end_ticks;
  t.ended_a_step = true;
  return gap;
}

// A measured step: inline in consume()'s loop (one record in five in a
// typical step); the rarer work is out of line.
__attribute__((always_inline)) inline void Aggregator::complete_step(ThreadInfo& t, const PhaseRecord& r,
                                                                     std::uint64_t wall, std::uint64_t self,
                                                                     std::uint64_t calls) {
  t.ran_steps = true;
  step_wall_.add(wall);
  const StepGap gap = gap_before(t, r, wall);
  if (__builtin_expect(gap.after_loop, 0)) {
    ++loop_first_steps_;
    loop_first_ns_ += wall;
    within_loops_.add(t.loop_steps, t.loop_first_ns);
    t.loop_steps = RunningStats{};
    t.loop_first_ns = wall;
  }
  t.loop_steps.add(wall);
  calls_and_wall_.add(calls, wall);
  // The step totals of the breakdown are the sums of the series points
  // (fill_report adds them up), so each step is added in one place only.
  StepPoint& point = open_point_;
  if (point.n == 0) point.first_step = r.step;
  point.last_step = r.step;
  ++point.n;
  point.wall_ns += wall + gap.input_ns + gap.other_ns;
  point.unattributed_ns += self;
  point.between_ns += gap.other_ns;
  point.between_input_ns += gap.input_ns;
  t.step_kind_ns[static_cast<int>(PhaseKind::input)] += gap.input_ns;
  add_kinds(point.kind_ns, t.step_kind_ns, std::make_index_sequence<kKindCount>{});
  const std::uint64_t step_ns = wall + gap.input_ns + gap.other_ns;
  if (__builtin_expect(step_ns > slow_floor_ns_, 0) && !gap.after_loop)
    keep_slow_step(t, r.step, step_ns, self, gap.other_ns);
  t.step_kind_ns = {};
  point.rss_mb = rss_mb_;
  if (__builtin_expect(point.n >= series_stride_, 0)) {
    add_series_point(point);
    point = StepPoint{};
  }
  add_step_interval(r);
}

// Out of line and cold: a steady run calls it about kept * ln(steps) times.
__attribute__((noinline, cold)) void Aggregator::keep_slow_step(const ThreadInfo& t, std::uint64_t step,
                                                                std::uint64_t wall_ns, std::uint64_t unattributed_ns,
                                                                std::uint64_t between_ns) {
  keep_slowest(slow_steps_, slow_floor_ns_, SlowStepEntry{step, wall_ns, unattributed_ns, between_ns, t.step_kind_ns});
}

void Aggregator::keep_slowest(std::vector<SlowStepEntry>& kept, std::uint64_t& floor_ns, const SlowStepEntry& entry) {
  const auto later = [](const SlowStepEntry& a, const SlowStepEntry& b) { return a.wall_ns > b.wall_ns; };
  if (kept.size() >= StepStats::kSlowestStepsKept) {
    std::pop_heap(kept.begin(), kept.end(), later);
    kept.back() = entry;
  } else {
    kept.push_back(entry);
  }
  std::push_heap(kept.begin(), kept.end(), later);
  if (kept.size() >= StepStats::kSlowestStepsKept) floor_ns = kept.front().wall_ns;
}

std::vector<SlowStep> Aggregator::slowest_of(const std::vector<SlowStepEntry>& kept) {
  std::vector<SlowStep> out;
  for (const SlowStepEntry& e : kept) {
    SlowStep slow;
    slow.step = e.step;
    slow.wall_ms = static_cast<double>(e.wall_ns) * kNsToMs;
    for (PhaseKind k : kPhaseKinds) slow.kind_ms[k] = static_cast<double>(e.kind_ns[detail::kind_index(k)]) * kNsToMs;
    slow.unattributed_ms = static_cast<double>(e.unattributed_ns) * kNsToMs;
    slow.between_steps_ms = static_cast<double>(e.between_ns) * kNsToMs;
    out.push_back(slow);
  }
  std::sort(out.begin(), out.end(), [](const SlowStep& a, const SlowStep& b) {
    return a.wall_ms != b.wall_ms ? a.wall_ms > b.wall_ms : a.step < b.step;
  });
  return out;
}

void Aggregator::complete_warmup_step(ThreadInfo& t, const PhaseRecord& r, std::uint64_t wall) {
  t.ran_steps = true;
  step_warmup_wall_.add(wall);
  (void)gap_before(t, r, wall);
  t.step_kind_ns = {};
  add_step_interval(r);
}

// A step not known to be whole (kRecordUnendedStep): a next_step() step
// closed by finish() or its thread's exit, whose wall time runs to wherever
// the program stopped, or a steps() step the loop was left in before its
// body recorded anything. Counted and left out of the step statistics, the
// breakdown and the steps' coverage; its phases stay in the phase table. The
// latter's loop ended at its start: its time is between loops.
void Aggregator::complete_unended_step(ThreadInfo& t, const PhaseRecord& r, std::uint64_t wall) {
  t.ran_steps = true;
  step_unended_wall_.add(wall);
  t.step_kind_ns = {};
  if (r.flags & kRecordLoopEnd) t.loop_ended = true;
}

// A steps() loop that evaluated (kRecordEvaluationStep): on the step it
// opened before it was known to be one (StepLoop::evaluation), left out
// like the rest of the loop, whose later iterations are no steps; or on the
// first fetch of a loop known from its start (StepLoop::evaluation_loop).
// Its time lies between the thread's last training step and its next, which
// reads it as a gap between loops. Its phases stay in the phase table.
void Aggregator::evaluation_loop(ThreadInfo& t, bool step) {
  ++evaluation_loops_;
  t.loop_ended = true;
  if (!step) return;
  t.ran_steps = true;
  t.step_kind_ns = {};
}

// A step that holds steps on its thread is a loop of steps: the steps in it
// are the steps (kRecordHoldsSteps marks where the first opened, the
// outer step's record its end). What it recorded before that mark was
// counted toward the step about to open: it lies before that step, in the
// gap from the previous one (input there is the next step's, as between
// any two steps). Its own record is counted and left out.
void Aggregator::outer_step(ThreadInfo& t, unsigned flags) {
  if (flags & kRecordOuterStep) {
    ++outer_steps_;
    if (flags & kRecordLoopEnd) t.loop_ended = true;  // its steps() loop was left: what follows is between loops
    return;
  }
  if (t.ended_a_step) t.between_input_ns += t.step_kind_ns[static_cast<int>(PhaseKind::input)];
  t.step_kind_ns = {};
}

inline void Aggregator::add_step_interval(const PhaseRecord& r) {
  add_to_step_union(r.start_ticks, r.end_ticks);
  if (r.end_ticks > last_step_end_) {
    last_step_end_ = r.end_ticks;
    if (__builtin_expect(!pending_.empty(), 0)) settle_pending();
  }
}

void Aggregator::settle_pending() {
  // Background records that ended before the last step did can be settled now.
  auto settled = std::partition(pending_.begin(), pending_.end(),
                                [&](const PendingBackground& p) { return p.end > last_step_end_; });
  for (auto it = settled; it != pending_.end(); ++it) process_background(*it);
  pending_.erase(settled, pending_.end());
}

Aggregator::ThreadInfo::SlotCacheEntry& Aggregator::slot_entry_miss(ThreadInfo& t, const PhaseSite* site,
                                                                    unsigned flags) {
  const std::uintptr_t key = ThreadInfo::slot_key(site, flags);
  const std::size_t index = ThreadInfo::slot_index(key);
  if (t.slot_cache[index ^ 1].key == key) return t.slot_cache[index ^ 1];
  // Both may clear t.slot_cache (a new phase, a resized phases vector).
  const SiteCacheEntry& phase = site_entry(site);
  PhaseAggregate* aggregate = &this->aggregate(t, phase.id, (flags & kRecordInStep) != 0);
  // The previous occupant moves to the neighbouring slot rather than out.
  ThreadInfo::SlotCacheEntry& entry = t.slot_cache[index];
  t.slot_cache[index ^ 1] = entry;
  entry = ThreadInfo::SlotCacheEntry{};
  entry.key = key;
  entry.aggregate = aggregate;
  entry.phase = phase.id;
  entry.kind_slot = phase.kind_slot;
  return entry;
}

void Aggregator::consume(ThreadId thread, const PhaseRecord* records, std::size_t count) {
  records_ += count;
  // The tick conversion without the parts this clock does not need: a TSC
  // has no whole ns per tick, CLOCK_MONOTONIC no fraction.
  switch (clock_->scale().parts()) {
    case TickScale::kFractionOnly:
      consume_run<TickScale::kFractionOnly>(threads_[thread], thread, records, count);
      break;
    case TickScale::kWholeOnly:
      consume_run<TickScale::kWholeOnly>(threads_[thread], thread, records, count);
      break;
    case TickScale::kWholeAndFraction:
      consume_run<TickScale::kWholeAndFraction>(threads_[thread], thread, records, count);
      break;
  }
}

// The collector's hot loop. What it reads repeatedly is copied into locals
// first: the compiler cannot keep members in registers across the stores into
// histograms and sums, which may alias them as far as it knows.
template <TickScale::Parts kTickParts>
void Aggregator::consume_run(ThreadInfo& t, ThreadId thread, const PhaseRecord* records, std::size_t count) {
  const TickScale scale = clock_->scale();
  // is_warmup() as one signed comparison: no step is <= -1.
  const std::int64_t last_warmup_step = options_.warmup_steps == 0
                                            ? -1
                                            : static_cast<std::int64_t>(std::min<std::uint64_t>(
                                                  options_.warmup_steps, std::numeric_limits<std::int64_t>::max()));
  // The cache entry of the previous in-step record, whose guess is checked first.
  ThreadInfo::SlotCacheEntry* previous = &t.slot_cache[0];
  // t.step_calls in a register: stores through the aggregates may alias t.
  std::uint64_t step_calls = t.step_calls;
  for (const PhaseRecord *r = records, *end = records + count; r != end; ++r) {
    const std::uint64_t wall =
        scale.to_ns<kTickParts>(r->end_ticks > r->start_ticks ? r->end_ticks - r->start_ticks : 0);
    const std::size_t depth = r->depth;  // child_ns has a slot for any 8-bit depth + 1
    std::uint64_t children = t.child_ns[depth + 1];
    t.child_ns[depth + 1] = 0;
    t.child_ns[depth] += wall;
    std::uint64_t self = wall > children ? wall - children : 0;
    const unsigned flags = r->flags;

    // One test for the common case: a measured phase in a step, not nested
    // so deep that the recording thread clamped its depth.
    if (__builtin_expect(flags != kRecordInStep || static_cast<std::int64_t>(r->step) <= last_warmup_step ||
                             depth >= static_cast<std::size_t>(kMaxDepth),
                         0)) {
      // is_warmup() again rather than the comparison above: GCC would keep
      // that one's result in a register for this rarer path.
      const bool warm = is_warmup(r->step);
      if (depth >= static_cast<std::size_t>(kMaxDepth)) ++depth_clamped_;
      if (__builtin_expect((flags & (kRecordLoopEnd | kRecordIsStep)) == kRecordLoopEnd, 0)) {
        // The fetch that found a steps() loop's end opened a step it then
        // withdrew: what was nested in it (depth + 2) is its own children,
        // and belongs to no step.
        if (depth + 2 < t.child_ns.size()) {
          children += t.child_ns[depth + 2];
          t.child_ns[depth + 2] = 0;
          self = wall > children ? wall - children : 0;
        }
        if (!(flags & kRecordInStep)) t.step_kind_ns = {};
      }
      if (__builtin_expect(flags & (kRecordHoldsSteps | kRecordOuterStep), 0)) {
        outer_step(t, flags);
        step_calls = 0;
      } else if (flags & kRecordIsStep) {
        if (__builtin_expect(flags & kRecordEvaluationStep, 0))
          evaluation_loop(t, true);
        else if (warm)
          complete_warmup_step(t, *r, wall);
        else if (flags & kRecordUnendedStep)
          complete_unended_step(t, *r, wall);
        else
          complete_step(t, *r, wall, self, step_calls);
        step_calls = 0;
      } else {
        consume_other(t, thread, *r, wall, children, self, warm);
      }
      continue;
    }
    // The common case, kept free of the other cases' tests.
    const std::uintptr_t key = ThreadInfo::slot_key(r->site, kRecordInStep);
    const ThreadInfo::SlotCacheEntry* slot = previous->next;
    if (__builtin_expect(slot->key != key, 0)) {
      slot = &t.slot_entry(key);
      if (slot->key != key) slot = &slot_entry_miss(t, r->site, kRecordInStep);
      previous->next = slot;
    }
    previous = const_cast<ThreadInfo::SlotCacheEntry*>(slot);  // always one of t.slot_cache
    t.step_kind_ns[slot->kind_slot] += self;
    ++step_calls;
    slot->aggregate->add(wall, children, self);
  }
  t.step_calls = step_calls;
}

// The other phase records: warm-up ones, and those outside any step on their
// thread (background work, or setup on the step thread), whose overlap with
// the steps is measured.
void Aggregator::consume_other(ThreadInfo& t, ThreadId thread, const PhaseRecord& r, std::uint64_t wall,
                               std::uint64_t children, std::uint64_t self, bool warm) {
  const unsigned in_step = r.flags & kRecordInStep;
  const std::uintptr_t key = ThreadInfo::slot_key(r.site, in_step);
  const ThreadInfo::SlotCacheEntry* slot = &t.slot_entry(key);
  if (slot->key != key) slot = &slot_entry_miss(t, r.site, in_step);
  PhaseAggregate& agg = *slot->aggregate;
  if (in_step) t.step_kind_ns[slot->kind_slot] += self;
  if (__builtin_expect(r.flags & kRecordEvaluationStep, 0)) evaluation_loop(t, false);
  // The fetch that found a steps() loop's end. Inside an outer step (a loop
  // nested in a step) the gap before that step's successor is not between
  // loops: the outer step's own gap_before() decides.
  if (!in_step && (r.flags & kRecordLoopEnd)) t.loop_ended = true;
  // Input on a step thread after its last step: the wait of the next step.
  if (!in_step && t.ended_a_step && slot->kind_slot == static_cast<std::uint32_t>(PhaseKind::input) &&
      r.start_ticks >= t.last_step_end)
    t.between_input_ns += self;
  if (warm) {
    agg.warmup.add(wall);
    return;
  }
  agg.add(wall, children, self);
  if (!in_step) add_background(thread, slot->phase, r);
}

void Aggregator::add_background(ThreadId thread, std::uint32_t phase, const PhaseRecord& r) {
  PendingBackground p{phase, thread, r.start_ticks, r.end_ticks};
  if (r.end_ticks <= last_step_end_) {
    process_background(p);
  } else if (pending_.size() < options_.pending_background_max) {
    pending_.push_back(p);
  } else {
    ++pending_overflowed_;
    process_background(p);
  }
}

void Aggregator::add_series_point(const StepPoint& point) {
  series_.push_back(point);
  if (series_.size() < options_.series_capacity) return;
  // Full: halve the resolution by merging neighbours. Memory stays bounded
  // whatever the number of steps; the report says the stride.
  std::vector<StepPoint> merged;
  merged.reserve(options_.series_capacity);
  for (std::size_t i = 0; i + 1 < series_.size(); i += 2) {
    StepPoint m = series_[i];
    const StepPoint& b = series_[i + 1];
    m.n += b.n;
    m.wall_ns += b.wall_ns;
    m.unattributed_ns += b.unattributed_ns;
    m.between_ns += b.between_ns;
    m.between_input_ns += b.between_input_ns;
    m.last_step = b.last_step;
    m.device_n += b.device_n;
    m.device_ns += b.device_ns;
    for (int k = 0; k < kKindCount; ++k) {
      m.kind_ns[k] += b.kind_ns[k];
      m.device_kind_ns[k] += b.device_kind_ns[k];
    }
    m.rss_mb = b.rss_mb;
    merged.push_back(m);
  }
  if (series_.size() % 2 == 1) merged.push_back(series_.back());
  series_ = std::move(merged);
  series_stride_ *= 2;
}

void Aggregator::add_to_step_union(std::uint64_t start, std::uint64_t end) {
  if (end <= start) return;
  auto& u = step_union_;
  const std::uint64_t mask = step_intervals_mask_;
  const std::uint64_t size = mask + 1;
  // The usual case, one step thread: the step starts after the last one ended.
  if (step_union_end_ == step_union_begin_ || start > u[(step_union_end_ - 1) & mask].second) {
    if (step_union_end_ - step_union_begin_ == size) ++step_union_begin_;  // forget the oldest
    u[step_union_end_++ & mask] = {start, end};
    return;
  }
  // Several step threads: walk back over the intervals that end at or after
  // `start` (as many as steps completed out of order), merge those the new
  // one overlaps, or insert it before the ones it precedes.
  std::uint64_t first = step_union_end_;
  while (first > step_union_begin_ && u[(first - 1) & mask].second >= start) --first;
  std::uint64_t last = first;  // [first, last): the intervals merged with [start, end]
  while (last < step_union_end_ && u[last & mask].first <= end) {
    start = std::min(start, u[last & mask].first);
    end = std::max(end, u[last & mask].second);
    ++last;
  }
  if (last == first) {  // overlaps none: insert at `first`
    if (step_union_end_ - step_union_begin_ == size) {
      if (first == step_union_begin_) return;  // older than every interval kept
      ++step_union_begin_;
    }
    for (std::uint64_t i = step_union_end_; i > first; --i) u[i & mask] = u[(i - 1) & mask];
    u[first & mask] = {start, end};
    ++step_union_end_;
    return;
  }
  u[first & mask] = {start, end};
  const std::uint64_t removed = last - first - 1;
  if (removed > 0) {
    for (std::uint64_t i = last; i < step_union_end_; ++i) u[(i - removed) & mask] = u[i & mask];
    step_union_end_ -= removed;
  }
}

std::uint64_t Aggregator::overlap_with_steps(std::uint64_t start, std::uint64_t end) const {
  // The kept steps' union intersected with [start, end]: a binary search for
  // the first interval ending after `start` (ends are sorted, the intervals
  // being disjoint and sorted by start), then the intervals up to `end`.
  // Each background record costs O(log steps kept) plus the steps it
  // overlaps, so a flood of records drains in time linear in the records.
  const auto& u = step_union_;
  const std::uint64_t mask = step_intervals_mask_;
  std::uint64_t lo = step_union_begin_, hi = step_union_end_;
  while (lo < hi) {
    const std::uint64_t mid = lo + (hi - lo) / 2;
    if (u[mid & mask].second <= start)
      lo = mid + 1;
    else
      hi = mid;
  }
  std::uint64_t covered = 0;
  for (std::uint64_t i = lo; i < step_union_end_ && u[i & mask].first < end; ++i) {
    const std::uint64_t s = std::max(start, u[i & mask].first), e = std::min(end, u[i & mask].second);
    if (s < e) covered += e - s;
  }
  return clock_->duration_ns(0, covered);
}

void Aggregator::process_background(const PendingBackground& p) {
  ThreadInfo& t = threads_[p.thread];
  if (!t.live) return;  // already folded into a pool; its overlap is lost (counted in notes)
  PhaseAggregate& agg = aggregate(p.thread, p.phase, false);
  agg.overlap_ns += overlap_with_steps(p.start, p.end);
  agg.overlap_measured_ns += clock_->duration_ns(p.start, p.end);
}

void Aggregator::flush_pending() {
  for (const auto& p : pending_) process_background(p);
  pending_.clear();
}

std::vector<std::string> Aggregator::notes() const {
  std::vector<std::string> notes;
  if (depth_clamped_ > 0)
    notes.push_back(
        "phases nested deeper than 63 levels were recorded with a clamped depth; their self time is approximate (" +
        std::to_string(depth_clamped_) + " records)");
  if (pending_overflowed_ > 0)
    notes.push_back("background overlap for " + std::to_string(pending_overflowed_) +
                    " records was computed before their steps completed (pending buffer full)");
  return notes;
}

void Aggregator::fill_report(Report& report) const {
  // Steps.
  StepStats& s = report.steps;
  const std::uint64_t steps_measured = step_wall_.moments.count();
  s.count = steps_measured;
  s.warmup_excluded = step_warmup_wall_.moments.count();
  s.wall_ms = step_wall_.to_distribution_ms();
  s.warmup_wall_ms = step_warmup_wall_.to_distribution_ms();
  s.unended_excluded = step_unended_wall_.moments.count();
  s.unended_wall_ms = step_unended_wall_.to_distribution_ms().total;
  s.outer_excluded = outer_steps_;
  s.evaluation_loops = evaluation_loops_;
  s.histogram = step_wall_.histogram.to_data();
  if (steps_measured > 0) {
    // Every measured step is in exactly one point (merging points adds them).
    std::array<std::uint64_t, kKindCount> kind_total_ns{};
    std::uint64_t unattributed_total_ns = 0, between_total_ns = 0, between_input_total_ns = 0;
    auto add_totals = [&](const StepPoint& p) {
      for (int k = 0; k < kKindCount; ++k) kind_total_ns[k] += p.kind_ns[k];
      unattributed_total_ns += p.unattributed_ns;
      between_total_ns += p.between_ns;
      between_input_total_ns += p.between_input_ns;
    };
    for (const auto& p : series_) add_totals(p);
    add_totals(open_point_);
    const double n = static_cast<double>(steps_measured);
    auto mean_ms = [&](std::uint64_t total_ns) { return static_cast<double>(total_ns) * kNsToMs / n; };
    // The step's own time plus the gap before it (see StepBreakdown).
    s.breakdown.wall_ms = s.wall_ms.mean + mean_ms(between_total_ns + between_input_total_ns);
    for (PhaseKind k : kPhaseKinds) s.breakdown.kind_ms[k] = mean_ms(kind_total_ns[detail::kind_index(k)]);
    s.breakdown.unattributed_ms = mean_ms(unattributed_total_ns);
    s.breakdown.between_steps_input_ms = mean_ms(between_input_total_ns);
    s.breakdown.between_steps_ms = mean_ms(between_total_ns);
  }
  s.coverage.reset();
  if (gaps_ > 0 && covered_ns_ + gap_ns_ > 0)
    s.coverage = static_cast<double>(covered_ns_) / static_cast<double>(covered_ns_ + gap_ns_);
  s.between_steps_ms = static_cast<double>(gap_ns_) * kNsToMs;
  s.loop_boundaries = loop_gaps_;
  s.between_loops_ms = static_cast<double>(loop_gap_ns_) * kNsToMs;
  s.loop_first_steps = loop_first_steps_;
  s.loop_first_ms = static_cast<double>(loop_first_ns_) * kNsToMs;
  WithinLoops within = within_loops_;
  for (const ThreadInfo& t : threads_) within.add(t.loop_steps, t.loop_first_ns);  // the loops still open
  s.loop_first_compared = within.compared;
  s.loop_first_compared_ms = within.compared_first_ns * kNsToMs;
  s.loop_first_rest_ms = within.compared_rest_ns * kNsToMs;
  s.loop_first_max_ms = static_cast<double>(within.compared_first_max_ns) * kNsToMs;
  s.within_loop_stddev_ms.reset();
  if (within.loops >= 2 && within.dof > 0)
    s.within_loop_stddev_ms = std::sqrt(within.scatter_ns2 / static_cast<double>(within.dof)) * kNsToMs;
  s.between_steps_input_ms = static_cast<double>(gap_input_ns_) * kNsToMs;
  s.calls_per_step = calls_per_step();
  s.slowest = slowest_of(slow_steps_);
  StepSeries& series = s.series;
  series = StepSeries{};
  series.stride = static_cast<std::uint32_t>(series_stride_);
  auto add_point = [&](const StepPoint& p) {
    if (p.n == 0) return;
    const double n = static_cast<double>(p.n);
    auto ms = [&](std::uint64_t ns) { return static_cast<double>(ns) * kNsToMs / n; };
    series.first_step.push_back(p.first_step);
    series.wall_ms.push_back(ms(p.wall_ns));
    for (PhaseKind k : kPhaseKinds) series.kind_ms[k].push_back(ms(p.kind_ns[detail::kind_index(k)]));
    series.unattributed_ms.push_back(ms(p.unattributed_ns));
    series.between_steps_ms.push_back(ms(p.between_ns));
    series.rss_mb.push_back(p.rss_mb);
  };
  for (const auto& p : series_) add_point(p);
  add_point(open_point_);

  // Shares of the breakdown's wall time (gaps between steps included), so they agree with it.
  fill_phases(report, s.breakdown.wall_ms > 0 ? s.breakdown.wall_ms * static_cast<double>(s.count) : s.wall_ms.total);
  s.clock = "host";
  s.host_wall_ms.reset();
  s.host_breakdown.reset();
  fill_device_clock(report);
  report.total_records = records_;
}

std::optional<CallsPerStep> Aggregator::calls_per_step() const {
  const CallsAndWall& c = calls_and_wall_;
  if (c.n < 2) return std::nullopt;
  CallsPerStep out;
  out.min = static_cast<double>(c.min_calls);
  out.max = static_cast<double>(c.max_calls);
  const double n = static_cast<double>(c.n);
  out.mean = static_cast<double>(c.sx) / n;
  // n² times the variances and the covariance, exact in integers (signed:
  // the covariance may be negative), then as doubles.
  __extension__ using Signed = __int128;
  const auto scaled = [&](Wide sum_ab, Wide sum_a, Wide sum_b) {
    return static_cast<double>(static_cast<Signed>(c.n * sum_ab) - static_cast<Signed>(sum_a * sum_b));
  };
  const double m2_calls = scaled(c.sxx, c.sx, c.sx), m2_wall = scaled(c.syy, c.sy, c.sy);
  const double co = scaled(c.sxy, c.sx, c.sy);
  if (m2_calls > 0 && m2_wall > 0) out.explained_variance = std::clamp(co * co / (m2_calls * m2_wall), 0.0, 1.0);
  // The phase that ran most often in the steps (per call site), where it
  // ran more than once a step: where the steps' number of phases comes from.
  double most = 1;
  for (std::size_t id = 0; id < phase_info_.size(); ++id) {
    double calls = 0;
    for (const ThreadInfo& t : threads_)
      if (t.live && id < t.phases.size()) calls += static_cast<double>(t.phases[id][0].count());
    if (id < retired_[0].size()) calls += static_cast<double>(retired_[0][id][0].count());  // ended step threads
    if (calls / n > most) {
      most = calls / n;
      out.phase = phase_info_[id].name;
      out.phase_mean = most;
    }
  }
  return out;
}

void Aggregator::fill_phases(Report& report, double step_total_ms) const {
  // Per call site: the aggregates merged across threads by role (ThreadRole
  // order), with the threads that ran it.
  struct ByRole {
    std::array<PhaseAggregate, 3> aggregate;
    std::array<std::uint32_t, 3> threads{};
  };
  // In a process that ran no step at all, nothing overlaps a step: no
  // overlap to state (it read "ovl 0%").
  const bool no_steps = steps_completed() + step_unended_wall_.moments.count() == 0;
  auto site_by_role = [&](std::uint32_t id) {
    ByRole out;
    auto fold = [&](const std::array<PhaseAggregate, 2>& pair, bool ran_steps,
                    std::array<std::uint32_t, 2> thread_count) {
      if (!pair[0].empty()) {
        out.aggregate[0].merge(pair[0]);
        out.threads[0] += thread_count[0];
      }
      if (!pair[1].empty()) {
        const int role = ran_steps ? 1 : 2;
        out.aggregate[role].merge(pair[1]);
        out.threads[role] += thread_count[1];
      }
    };
    for (const auto& t : threads_)
      if (t.live && id < t.phases.size()) fold(t.phases[id], t.ran_steps, {1, 1});
    for (int pool = 0; pool < 2; ++pool)
      if (id < retired_[pool].size()) fold(retired_[pool][id], pool == 0, retired_threads_[pool][id]);
    return out;
  };
  report.phases.clear();
  for (const PhaseGroup& group : groups_) {
    std::vector<ByRole> sites;
    sites.reserve(group.ids.size());
    for (std::uint32_t id : group.ids) sites.push_back(site_by_role(id));
    const PhaseInfo& first = phase_info_[group.ids.front()];
    for (int role = 0; role < 3; ++role) {
      PhaseAggregate agg;
      std::uint32_t threads = 0;
      std::vector<PhaseCallSite> rows;
      DurationStats device;
      for (std::size_t i = 0; i < sites.size(); ++i) {
        const PhaseAggregate& site = sites[i].aggregate[static_cast<std::size_t>(role)];
        // Device time belongs to the step role when recorded in a step, else
        // to whichever non-step role the phase has.
        const std::uint32_t id = group.ids[i];
        if (id < device_.size() && (role == 0 || sites[i].aggregate[1].empty() || role == 1))
          device.merge(device_[id][role == 0 ? 0 : 1]);
        if (site.empty()) continue;
        agg.merge(site);
        // A thread that ran several sites counts once per site here: exact
        // for one site, an upper bound (capped below) for several.
        threads = std::max(threads, sites[i].threads[static_cast<std::size_t>(role)]);
        const PhaseInfo& info = phase_info_[id];
        rows.push_back(
            PhaseCallSite{info.file, info.line, to_distribution_ms(site.inclusive(), site.inclusive_histogram)});
      }
      if (agg.empty()) continue;
      PhaseSummary p;
      p.name = first.name;
      p.kind = first.kind;
      p.thread_role = static_cast<ThreadRole>(role);
      p.count = agg.count();
      p.host_ms = to_distribution_ms(agg.inclusive(), agg.inclusive_histogram);
      p.self_ms = moments_to_distribution_ms(agg.self());
      if (p.thread_role == ThreadRole::step && step_total_ms > 0) p.share_of_step = p.self_ms.total / step_total_ms;
      if (p.thread_role == ThreadRole::background && agg.overlap_measured_ns > 0 && !no_steps)
        p.overlap_with_steps = static_cast<double>(agg.overlap_ns) / static_cast<double>(agg.overlap_measured_ns);
      if (device.moments.count() > 0) p.device_ms = device.to_distribution_ms();
      p.threads = threads;
      p.histogram = agg.inclusive_histogram.to_data();
      if (rows.size() > 1) {
        std::stable_sort(rows.begin(), rows.end(), [](const PhaseCallSite& a, const PhaseCallSite& b) {
          return a.host_ms.total > b.host_ms.total;
        });
        p.sites = std::move(rows);
        p.sites_merged = group.sites_merged;
      }
      report.phases.push_back(std::move(p));
    }
  }
  // Most expensive first: step phases by share, then the rest by total time.
  std::stable_sort(report.phases.begin(), report.phases.end(), [](const PhaseSummary& a, const PhaseSummary& b) {
    if (a.thread_role != b.thread_role) return a.thread_role < b.thread_role;
    return a.self_ms.total > b.self_ms.total;
  });
}

}  // namespace detail
}  // namespace v1
}  // namespace stepscope

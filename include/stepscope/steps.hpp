// stepscope/steps.hpp — step boundaries the way training loops are written.
//
//   for (auto& batch : stepscope::steps(*loader)) {   // one iteration = one step
//     { STEPSCOPE_PHASE("forward"); loss = model.forward(batch); }
//     { STEPSCOPE_PHASE("backward"); loss.backward(); }
//   }
//
// A range-for fetches the next batch in the loop header (begin() and
// operator++ of a torch::data loader, operator++ of an input iterator), i.e.
// *between* the bodies: STEPSCOPE_STEP() inside the body never sees it. The
// adaptor makes the fetch the `data` phase (kind input) of the step it feeds:
// each step runs from the start of its fetch (begin(), operator++, and the
// comparison with end(), where a torch::data iterator fetches its first batch
// lazily) to the start of the next fetch,
// or to the end of the loop (break, return or an exception included: the last
// step closes when the adaptor is destroyed). A step the loop is left in
// before its body recorded anything (`if (i == n) break;` at the top of the
// body) holds a fetch and no work: when the loop had steps before it, it is
// counted and left out of the statistics (steps.unended_excluded) rather
// than read as a step of ~0 ms. A fetch that finds the end of the range is a
// `data` phase outside any step.
//
// For loops that cannot take a range (a while loop over a queue, a callback
// per batch), next_step() is the marker, like the PyTorch profiler's
// prof.step(): it ends the step it opened last on this thread and opens the
// next; the last one closes at finish() or when the thread exits, and is
// counted but left out of the statistics (steps.unended_excluded): no call
// ended it, so it holds whatever ran after the loop.
//
//   while (auto batch = queue.pop()) { stepscope::next_step(); train(*batch); }
//
// Cost when enabled: a step and a data record per iteration (two clock reads,
// two ring pushes) — less than STEPSCOPE_STEP() plus a "data" scope, which
// read the clock four times; no lock, allocation or system call after the
// call site's first use on a thread. STEPSCOPE_ENABLE=0: steps() returns
// its argument and next_step() is empty.
//
// Both record the caller's file:line (default arguments), so the report can
// tell call sites apart. Call next_step() at the loop's top level, outside
// STEPSCOPE_PHASE scopes.
#pragma once

#include <stepscope/phase.hpp>

#include <cstddef>
#include <iterator>
#include <type_traits>
#include <utility>

#ifndef STEPSCOPE_ENABLE
#define STEPSCOPE_ENABLE 1
#endif

namespace stepscope {
inline namespace v1 {
namespace detail {

// The sites of one steps() / next_step() call site: built once per call site
// (file, line) in the process, in static storage, so records can point at them
// for as long as the collector may read them.
struct StepCallSite {
  PhaseSite step;  // "step", is_step
  PhaseSite data;  // "data", kind input
};

// Cold: the call site's sites (a lock and a scan the first time a call site is
// seen in the process; no allocation: a fixed pool, and past it one shared
// site whose file is "(other call sites)").
STEPSCOPE_API STEPSCOPE_DETAIL_NOINLINE const StepCallSite* step_call_site_slow(const char* file, int line) noexcept;

// Cold: counts a next_step() call made inside another step (see next_step).
STEPSCOPE_API STEPSCOPE_DETAIL_NOINLINE void next_step_in_other_step() noexcept;
// How many there were in the process.
STEPSCOPE_API std::uint64_t next_steps_ignored() noexcept;
// Cold, once per steps() loop, before its first fetch (src/core/torch_grad.cpp):
// an evaluation loop from its start -- torch's gradients off on this thread
// (c10::GradMode, where the process has libtorch loaded) on a thread that
// trained: `trained` (the Python package: instrument() saw a backward or an
// optimizer step), or an earlier steps() loop on this thread began with
// them on. pytorch/examples' cpp/mnist and cpp/custom-dataset test under
// torch::NoGradGuard: a steps() loop over the test loader counted its
// batches as training steps.
STEPSCOPE_API STEPSCOPE_DETAIL_NOINLINE bool evaluates_from_start(bool trained) noexcept;
// The intra-op threads torch ran at the latest steps() loop's start, read
// there (at::get_num_threads, on the loop's thread); 0 without libtorch. The
// report records it as run.config.intra_op_threads where the Python package
// did not (a libtorch program).
STEPSCOPE_API int torch_intra_op_threads() noexcept;

// Per-thread cache in front of it: a call site in a loop finds its sites with
// one compare. Direct-mapped on the line; trivial, so the thread_local needs
// no guard.
struct StepCallSiteCache {
  static constexpr std::size_t kSize = 8;
  struct Entry {
    const char* file;
    int line;
    const StepCallSite* sites;
  };
  Entry entries[kSize];
};
STEPSCOPE_API inline thread_local StepCallSiteCache t_step_call_sites{};

STEPSCOPE_DETAIL_ALWAYS_INLINE const StepCallSite* step_call_site(const char* file, int line) noexcept {
  StepCallSiteCache::Entry& e = t_step_call_sites.entries[static_cast<std::size_t>(line) % StepCallSiteCache::kSize];
  if (STEPSCOPE_DETAIL_LIKELY(e.file == file && e.line == line && e.sites != nullptr)) return e.sites;
  const StepCallSite* sites = step_call_site_slow(file, line);
  e = StepCallSiteCache::Entry{file, line, sites};
  return sites;
}

// What a steps() loop has open: the step and its fetch. Lives in the range
// object, on the stack of the loop's caller.
class StepLoop {
 public:
  explicit StepLoop(const StepCallSite* sites) noexcept : sites_(sites) {}
  StepLoop(const StepLoop&) = delete;
  StepLoop& operator=(const StepLoop&) = delete;
  ~StepLoop() { end_loop(); }

  // Before begin() / operator++ of the wrapped iterator: the step in
  // progress ends and the fetch of the next batch starts (one clock read).
  // The fetch belongs to the step it feeds, so that step opens here (its
  // number taken now) with the fetch as its data phase: phases nested in the
  // fetch (a dataset's per-sample transform) are recorded inside that step,
  // under its data phase, not outside every step.
  //
  // A step another loop opened after this one's is still open (two steps()
  // loops zipped): the steps would overlap rather than nest. This loop's
  // step is left open, holding the other loop's steps, and the loop goes on
  // timing its fetches as data phases, opening no step (passive_).
  STEPSCOPE_DETAIL_ALWAYS_INLINE void fetch_starts() noexcept {
    end_data(0);
    std::uint64_t now = 0;
    if (step_.active) {
      ThreadState& ts = t_thread_state;
      if (STEPSCOPE_DETAIL_UNLIKELY(ts.step_depth > step_.level + 1)) {
        passive_ = true;
      } else {
        now = read_ticks();
        close_step(ts, step_, now, static_cast<std::uint8_t>(evaluation_ ? kRecordEvaluationStep : 0));
        closed_a_step_ = true;
        if (STEPSCOPE_DETAIL_UNLIKELY(evaluation_)) passive_ = true;
      }
    }
    fetching_ = false;
    if (!scope_enabled()) return;
    ThreadState& ts = t_thread_state;
    if (STEPSCOPE_DETAIL_UNLIKELY(ts.ring == nullptr) && register_thread(ts) == nullptr) return;
    fetching_ = true;
    device_slot_ = 0;
    if (DeviceBeginHook hook = g_device_begin.load(std::memory_order_relaxed)) device_slot_ = hook(&sites_->data);
    fetch_start_ = now != 0 && device_slot_ == 0 ? now : read_ticks();
    if (STEPSCOPE_DETAIL_LIKELY(!passive_)) {
      open_step(ts, step_, &sites_->step, fetch_start_);
      data_depth_ = step_.depth < kMaxDepth ? static_cast<std::uint8_t>(step_.depth + 1) : step_.depth;
    } else {
      data_depth_ = ts.depth;
    }
    if (data_depth_ < kMaxDepth) {
      ts.kind_stack[data_depth_] = static_cast<std::uint8_t>(PhaseKind::input);
      ts.depth = static_cast<std::uint8_t>(data_depth_ + 1);
    }
    ts.ring->current_kind.store(static_cast<std::uint8_t>(PhaseKind::input), std::memory_order_relaxed);
  }

  // The loop compared the iterator with the end: the fetch either produced
  // a batch (the step it opened goes on) or found the end (there is no
  // step: the fetch is recorded outside any step, marked as the loop's end,
  // which tells the collector that phases nested in it belong to no step).
  // Repeated comparisons after the first change nothing.
  STEPSCOPE_DETAIL_ALWAYS_INLINE void fetched(bool more) noexcept {
    if (!fetching_) return;
    fetching_ = false;
    if (more) {
      data_pending_ = true;
      return;
    }
    if (passive_) {  // a data phase like the others
      data_pending_ = true;
      end_data(0);
      return;
    }
    end_device();
    const std::uint64_t end = read_ticks();
    ThreadState& ts = t_thread_state;
    step_.active = false;  // withdrawn: no record
    // Its number too, unless another thread opened a step since: each epoch
    // would otherwise skip one, and slow steps every N by the program's own
    // count would drift off their period across epochs.
    std::uint32_t taken = step_.step;
    g_steps_started.compare_exchange_strong(taken, taken - 1, std::memory_order_relaxed);
    leave_step(ts);
    ts.depth = step_.depth;
    ts.ring->current_kind.store(ts.depth == 0 ? kNoPhase : ts.kind_stack[ts.depth - 1], std::memory_order_relaxed);
    push_record(ts, PhaseRecord{&sites_->data, fetch_start_, end, step_.step, device_slot_, ts.depth,
                                static_cast<std::uint8_t>((in_step(ts) ? kRecordInStep : 0) | kRecordLoopEnd)});
  }

  // After the dereference that hands the batch to the body: the data phase
  // ends (a lazy iterator's work in operator* is part of the fetch).
  STEPSCOPE_DETAIL_ALWAYS_INLINE void dereferenced() noexcept {
    if (STEPSCOPE_DETAIL_LIKELY(data_pending_)) end_data(read_ticks());
  }

  // The step in progress evaluated a model rather than trained it (the
  // Python package's instrument() saw a forward with gradients off and no
  // backward or optimizer step, on a thread that trained before): it ends
  // as an evaluation step, left out of the step statistics, and the loop's
  // later fetches open no step (as passive_): an evaluation loop is time
  // between the training loops, as it is when it runs outside steps().
  // Only a loop's outermost step: one nested in another step is that one's.
  void evaluation() noexcept {
    if (step_.active && step_.level == 0) evaluation_ = true;
  }
  // Before the loop's first fetch: it is an evaluation loop from the start
  // (gradients off there, on a thread that trained: evaluates_from_start):
  // it opens no step at all, and its first fetch's record says so
  // (kRecordEvaluationStep).
  void evaluation_loop() noexcept {
    if (step_.active || closed_a_step_ || passive_ || t_thread_state.step_depth != 0) return;
    passive_ = evaluation_ = announce_evaluation_ = true;
  }

  // The loop is over (normally, by break/return, or by an exception).
  void end_loop() noexcept {
    if (!fetching_ && !data_pending_ && !step_.active) return;
    const std::uint64_t now = read_ticks();
    if (fetching_) fetched(false);  // a fetch that threw: outside any step
    end_data(now);
    if (!step_.active) return;
    ThreadState& ts = t_thread_state;
    if (passive_ && ts.step_depth > step_.level + 1) {
      defer_step(ts, step_);  // under the other loop's open step
      return;
    }
    // Nothing recorded since its data phase: left before the body did any
    // instrumented work (see the top of this file).
    const bool empty = closed_a_step_ && ts.ring->offered() == body_start_;
    close_step(ts, step_, now,
               static_cast<std::uint8_t>(kRecordLoopEnd | (empty ? kRecordUnendedStep : 0) |
                                         (evaluation_ ? kRecordEvaluationStep : 0)));
  }

 private:
  void end_device() noexcept {
    if (device_slot_ == 0) return;
    if (DeviceEndHook hook = g_device_end.load(std::memory_order_relaxed)) hook(device_slot_);
  }
  // Pushes the pending data record, ending at `end` (0: now).
  STEPSCOPE_DETAIL_ALWAYS_INLINE void end_data(std::uint64_t end) noexcept {
    if (!data_pending_) return;
    data_pending_ = false;
    end_device();
    if (end == 0) end = read_ticks();
    ThreadState& ts = t_thread_state;
    ts.depth = data_depth_;  // the data phase is closed: the step's own level again
    if (STEPSCOPE_DETAIL_UNLIKELY(passive_)) {
      ts.ring->current_kind.store(data_depth_ == 0 ? kNoPhase : ts.kind_stack[data_depth_ - 1],
                                  std::memory_order_relaxed);
      const unsigned flags =
          (in_step(ts) ? unsigned{kRecordInStep} : 0u) | (announce_evaluation_ ? unsigned{kRecordEvaluationStep} : 0u);
      announce_evaluation_ = false;
      push_record(ts, PhaseRecord{&sites_->data, fetch_start_, end, g_steps_started.load(std::memory_order_relaxed),
                                  device_slot_, data_depth_, static_cast<std::uint8_t>(flags)});
      return;
    }
    ts.ring->current_kind.store(kInStepNoPhase, std::memory_order_relaxed);
    push_record(ts,
                PhaseRecord{&sites_->data, fetch_start_, end, step_.step, device_slot_, data_depth_, kRecordInStep});
    body_start_ = ts.ring->offered();
  }

  const StepCallSite* sites_;
  OpenStep step_{};
  std::uint64_t fetch_start_ = 0;
  std::uint16_t device_slot_ = 0;
  std::uint8_t data_depth_ = 0;       // depth of the fetch's data phase
  bool passive_ = false;              // another loop's steps overlap this one's: its fetches open no step
  bool fetching_ = false;             // a fetch started and its outcome is not known yet
  bool data_pending_ = false;         // the fetch fed step_ and its record is not pushed yet
  bool closed_a_step_ = false;        // a fetch closed an earlier step of this loop
  bool evaluation_ = false;           // an evaluation loop (see evaluation())
  bool announce_evaluation_ = false;  // evaluation_loop(): the next data record carries the mark
  std::uint64_t body_start_ = 0;      // the ring's offered() after step_'s data record
};

using std::begin;
using std::end;
template <typename Range>
using RangeIterator = decltype(begin(std::declval<Range&>()));
template <typename Range>
using RangeSentinel = decltype(end(std::declval<Range&>()));

}  // namespace detail

// Different definitions with STEPSCOPE_ENABLE on and off live in different
// namespaces, so translation units built both ways can share a program.
#if STEPSCOPE_ENABLE
inline namespace steps_on {

// What steps() returns: iterate it once with a range-for. Neither copyable nor
// movable (it holds the loop's open step); `Range` is a reference for an
// lvalue argument, a value for an rvalue.
template <typename Range>
class StepRange {
  using Inner = std::remove_reference_t<Range>;
  using InnerIterator = detail::RangeIterator<Inner>;
  using InnerSentinel = detail::RangeSentinel<Inner>;

 public:
  // The end of the wrapped range; compared with an iterator only.
  struct sentinel {
    InnerSentinel end_;
  };

  class iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using reference = decltype(*std::declval<InnerIterator&>());
    using value_type = std::remove_cv_t<std::remove_reference_t<reference>>;
    using difference_type = std::ptrdiff_t;
    using pointer = std::add_pointer_t<std::remove_reference_t<reference>>;

    iterator(detail::StepLoop* loop, InnerIterator it) : loop_(loop), it_(std::move(it)) {}

    // Not const: a torch::data iterator's operator* is not.
    reference operator*() {
      // The data phase ends once the batch is handed over, even if the
      // dereference throws.
      struct Done {
        detail::StepLoop* loop;
        ~Done() { loop->dereferenced(); }
      } done{loop_};
      return *it_;
    }
    iterator& operator++() {
      loop_->fetch_starts();
      ++it_;
      return *this;
    }
    friend bool operator!=(const iterator& it, const sentinel& s) {
      const bool more = it.it_ != s.end_;
      it.loop_->fetched(more);
      return more;
    }
    friend bool operator==(const iterator& it, const sentinel& s) { return !(it != s); }
    friend bool operator!=(const sentinel& s, const iterator& it) { return it != s; }
    friend bool operator==(const sentinel& s, const iterator& it) { return !(it != s); }

   private:
    detail::StepLoop* loop_;
    InnerIterator it_;
  };

  StepRange(Range&& range, const detail::StepCallSite* sites) : range_(std::forward<Range>(range)), loop_(sites) {}
  StepRange(const StepRange&) = delete;
  StepRange& operator=(const StepRange&) = delete;

  // The first fetch (a torch::data loader's begin() waits for the first batch).
  iterator begin() {
    using std::begin;
    if (detail::evaluates_from_start(false)) loop_.evaluation_loop();
    loop_.fetch_starts();
    return iterator(&loop_, begin(range_));
  }
  sentinel end() {
    using std::end;
    return sentinel{end(range_)};
  }

 private:
  Range range_;
  detail::StepLoop loop_;
};

// Iterates `range` (a container, a torch::data loader — `*loader` —, any
// range with begin()/end()), one step per element, each fetch timed as that
// step's `data` phase. The argument is referenced if it is an lvalue, moved
// into the adaptor if it is a temporary.
template <typename Range>
StepRange<Range> steps(Range&& range, const char* file = __builtin_FILE(), int line = __builtin_LINE()) noexcept(
    std::is_lvalue_reference_v<Range> || std::is_nothrow_move_constructible_v<std::remove_reference_t<Range>>) {
  return StepRange<Range>(std::forward<Range>(range), detail::step_call_site(file, line));
}

// Ends the step the previous call opened on this thread (if any) and opens
// the next. One clock read, one ring push. Inside a step that steps() or a
// step scope opened (and did not close) on this thread, that one marks the
// steps: a step of next_step() would overlap it rather than nest in it, so
// the call is counted (steps.next_step_ignored) and does nothing else.
STEPSCOPE_DETAIL_ALWAYS_INLINE void next_step(const char* file = __builtin_FILE(),
                                              int line = __builtin_LINE()) noexcept {
  detail::ThreadState& ts = detail::t_thread_state;
  if (STEPSCOPE_DETAIL_UNLIKELY(ts.step_depth != (ts.next_step.active ? 1 : 0))) {
    detail::next_step_in_other_step();
    return;
  }
  std::uint64_t now = 0;
  if (ts.next_step.active) {
    now = detail::read_ticks();
    detail::close_step(ts, ts.next_step, now);
  }
  if (!detail::scope_enabled()) return;
  if (STEPSCOPE_DETAIL_UNLIKELY(ts.ring == nullptr) && detail::register_thread(ts) == nullptr) return;
  const detail::StepCallSite* sites = detail::step_call_site(file, line);
  detail::open_step(ts, ts.next_step, &sites->step, now != 0 ? now : detail::read_ticks());
}

}  // namespace steps_on
#else   // STEPSCOPE_ENABLE
inline namespace steps_off {

// Disabled at compile time: the loop iterates the range itself.
template <typename Range>
std::conditional_t<std::is_lvalue_reference_v<Range>, Range, std::remove_cv_t<std::remove_reference_t<Range>>> steps(
    Range&& range, const char* = nullptr, int = 0) {
  return std::forward<Range>(range);
}
inline void next_step(const char* = nullptr, int = 0) noexcept {}

}  // namespace steps_off
#endif  // STEPSCOPE_ENABLE

}  // namespace v1
}  // namespace stepscope

// stepscope/ring.hpp — fixed-size phase records and the per-thread SPSC ring.
//
// Each instrumented thread owns one ThreadRing (its only producer); the
// collector thread is its only consumer. Pushing is wait-free: a full ring
// drops the record and counts it, so the training thread never blocks.
//
//   detail::PhaseRecord r{site, start, end, step, 0, depth, flags};
//   if (!ring.try_push(r)) { /* counted in ring.dropped() */ }
#pragma once

#include <stepscope/export.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace stepscope {
inline namespace v1 {
enum class PhaseKind : std::uint8_t;
}  // namespace v1
}  // namespace stepscope

namespace stepscope {
inline namespace v1 {
namespace detail {

// Typical cache line; aligning the producer and consumer indices to separate
// lines avoids false sharing between the training thread and the collector.
inline constexpr std::size_t kCacheLine = 64;

// One call site of STEPSCOPE_PHASE / STEPSCOPE_STEP. Constant-initialised in a
// function-local static, so the hot path only writes its address.
struct PhaseSite {
  const char* name;
  PhaseKind kind;
  bool is_step;
  const char* file;
  int line;
};

// Cold: wakes the collector now, once per drain, instead of at its next timed
// wake-up (a system call, made only then). Called when a ring is over half
// full between two drains (a burst after a quiet spell, when the collector's
// wait is long: records would be dropped) and when the first measured step
// opens (the OS counters' window starts there, however short the run).
STEPSCOPE_API STEPSCOPE_DETAIL_NOINLINE void request_drain() noexcept;

enum RecordFlags : std::uint8_t {
  kRecordInStep = 1u << 0,  // recorded inside a STEPSCOPE_STEP on the same thread
  kRecordIsStep = 1u << 1,  // the step scope itself (also carries kRecordInStep)
  // A step that held another step on the same thread (a steps() loop around
  // another, a steps() iteration around a step()): a loop of steps, not a
  // step (see enter_step in phase.hpp).
  kRecordOuterStep = 1u << 2,
  // A step that is not known to be one whole step, counted and left out of
  // the statistics: a next_step() step that no next call ended (closed by
  // finish() or by its thread's exit, so it holds whatever ran after the
  // loop: evaluation, saving, interpreter teardown), or a steps() step the
  // loop was left in (break/return/exception, with kRecordLoopEnd) before
  // its body recorded anything.
  kRecordUnendedStep = 1u << 3,
  // A steps() loop ended here: on the last step when the loop was left by
  // break/return/exception, else on the fetch that found the end. The time
  // until the thread's next step is between loops (an epoch boundary:
  // evaluation, checkpointing), not a gap inside one. Cold paths only.
  kRecordLoopEnd = 1u << 4,
  // Not a scope: a step (this record's site and step) opened inside the step
  // open on this thread, which holds steps from here on; what that one
  // recorded until now lies between steps. start == end. Cold.
  kRecordHoldsSteps = 1u << 5,
  // A steps() step that evaluated (its loop is an evaluation loop, see
  // StepLoop::evaluation), or the first fetch of a loop that evaluates from
  // its start and opens no step: an evaluation loop, counted; the step is
  // left out of the step statistics; the time until the thread's next step
  // is between loops. Cold.
  kRecordEvaluationStep = 1u << 6,
};

// What one finished scope leaves behind: exactly 32 bytes, half a cache line.
struct PhaseRecord {
  const PhaseSite* site;
  std::uint64_t start_ticks;  // read_ticks() when the scope opened
  std::uint64_t end_ticks;    // read_ticks() when it closed
  std::uint32_t step;         // steps started (process-wide) when the scope opened
  std::uint16_t device_slot;  // CUDA event pair in the device pool; 0 = none
  std::uint8_t depth;         // nesting depth on this thread, 0 = outermost
  std::uint8_t flags;         // RecordFlags
};
static_assert(sizeof(PhaseRecord) == 32, "records are fixed-size 32-byte slots");
static_assert(std::is_trivially_copyable_v<PhaseRecord>, "records are copied as raw bytes");

// ThreadRing::current_kind outside every phase: outside any step, or inside a
// step (the step's own time in none of its phases: the loop's code, a sleep).
inline constexpr std::uint8_t kNoPhase = 0xff;
inline constexpr std::uint8_t kInStepNoPhase = 0xfe;

class ThreadRing {
 public:
  // capacity must be a power of two; storage is owned by the caller (the
  // registry), which keeps the ring alive until the collector drained it.
  ThreadRing(PhaseRecord* storage, std::uint32_t capacity) noexcept
      : slots_(storage), capacity_(capacity), mask_(capacity - 1), half_(capacity / 2) {}
  ThreadRing(const ThreadRing&) = delete;
  ThreadRing& operator=(const ThreadRing&) = delete;

  // Producer only. False when the ring is full: the record is dropped and counted.
  // (The record's fields may come from an inlined scope whose fields GCC
  // thinks maybe-uninitialised; see ScopeBase in phase.hpp.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
  [[nodiscard]] STEPSCOPE_DETAIL_ALWAYS_INLINE bool try_push(const PhaseRecord& record) noexcept {
    const std::uint64_t head = head_.load(std::memory_order_relaxed);
    // The consumer's position is re-read only when the cached one says the
    // ring is half full: at most once per half ring of pushes.
    if (STEPSCOPE_DETAIL_UNLIKELY(head - cached_tail_ >= half_)) {
      cached_tail_ = tail_.load(std::memory_order_acquire);
      if (head - cached_tail_ >= capacity_) {
        // Only the producer writes dropped_, so load+store is enough (no RMW).
        dropped_.store(dropped_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        return false;
      }
      if (head - cached_tail_ >= half_) request_drain();
    }
    slots_[head & mask_] = record;
    head_.store(head + 1, std::memory_order_release);
    return true;
  }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

  // Consumer only: calls fn(const PhaseRecord&) for up to max_records records
  // in push order, then frees their slots. Returns how many were consumed.
  template <typename Fn>
  std::size_t drain(Fn&& fn, std::size_t max_records = ~std::size_t{
                                 0}) noexcept(noexcept(fn(std::declval<const PhaseRecord&>()))) {
    const std::uint64_t tail = tail_.load(std::memory_order_relaxed);
    const std::uint64_t available = readable(tail, max_records);
    for (std::uint64_t i = 0; i < available; ++i) fn(slots_[(tail + i) & mask_]);
    tail_.store(tail + available, std::memory_order_release);
    return static_cast<std::size_t>(available);
  }

  // Consumer only: the same records in the same order, as contiguous runs:
  // calls fn(const PhaseRecord* first, std::size_t count) once, or twice when
  // the records wrap around the end of the storage, then frees their slots.
  // A consumer that loops over a plain array keeps its state in registers.
  template <typename Fn>
  std::size_t drain_batches(Fn&& fn, std::size_t max_records = ~std::size_t{
                                         0}) noexcept(noexcept(fn(std::declval<const PhaseRecord*>(), std::size_t{}))) {
    const std::uint64_t tail = tail_.load(std::memory_order_relaxed);
    const std::uint64_t available = readable(tail, max_records);
    if (available > 0) {
      const std::uint64_t first = tail & mask_;
      const std::uint64_t until_end = capacity_ - first;
      if (available <= until_end) {
        fn(static_cast<const PhaseRecord*>(slots_ + first), static_cast<std::size_t>(available));
      } else {
        fn(static_cast<const PhaseRecord*>(slots_ + first), static_cast<std::size_t>(until_end));
        fn(static_cast<const PhaseRecord*>(slots_), static_cast<std::size_t>(available - until_end));
      }
    }
    tail_.store(tail + available, std::memory_order_release);
    return static_cast<std::size_t>(available);
  }

  std::uint64_t pushed() const noexcept {
    return head_.load(std::memory_order_acquire);
  }
  // Producer only: records offered so far, pushed or dropped.
  std::uint64_t offered() const noexcept {
    return head_.load(std::memory_order_relaxed) + dropped_.load(std::memory_order_relaxed);
  }
  std::uint64_t consumed() const noexcept {
    return tail_.load(std::memory_order_acquire);
  }
  std::uint64_t dropped() const noexcept {
    return dropped_.load(std::memory_order_relaxed);
  }
  std::uint32_t capacity() const noexcept {
    return capacity_;
  }

  // What the producer thread is inside right now (PhaseKind as a byte,
  // kNoPhase or kInStepNoPhase), published with a relaxed store so the
  // collector's sampler can attribute CPU time to phases (and to the step's
  // time outside them) without the hot path making a system call.
  std::atomic<std::uint8_t> current_kind{kNoPhase};

 private:
  // Consumer only: records published and not yet consumed, at most max_records.
  std::uint64_t readable(std::uint64_t tail, std::size_t max_records) noexcept {
    if (cached_head_ == tail) cached_head_ = head_.load(std::memory_order_acquire);
    std::uint64_t available = cached_head_ - tail;
    if (available == 0) {
      cached_head_ = head_.load(std::memory_order_acquire);
      available = cached_head_ - tail;
    }
    return available > max_records ? max_records : available;
  }

  // Producer line: written on every push.
  alignas(kCacheLine) std::atomic<std::uint64_t> head_{0};
  std::uint64_t cached_tail_ = 0;
  std::atomic<std::uint64_t> dropped_{0};
  // Consumer line: written on every drain.
  alignas(kCacheLine) std::atomic<std::uint64_t> tail_{0};
  std::uint64_t cached_head_ = 0;
  // Read-only after construction.
  alignas(kCacheLine) PhaseRecord* const slots_;
  const std::uint32_t capacity_;
  const std::uint32_t mask_;
  const std::uint32_t half_;
};

}  // namespace detail
}  // namespace v1
}  // namespace stepscope

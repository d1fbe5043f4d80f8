// stepscope/phase.hpp — RAII scopes for training steps and their phases.
//
// Use the macros from <stepscope/stepscope.hpp>; the classes here are what
// they expand to:
//
//   for (auto& batch : loader) {
//     STEPSCOPE_STEP();
//     { STEPSCOPE_PHASE("forward"); loss = model.forward(batch); }
//   }
//
// Hot path (everything inline here): one load and branch when disabled; when
// enabled, two clock reads, a few thread-local stores and one 32-byte store
// into this thread's ring. No lock, no allocation, no system call after the
// thread's first record, never throws.
#pragma once

#include <stepscope/clock.hpp>
#include <stepscope/export.hpp>
#include <stepscope/report.hpp>
#include <stepscope/ring.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace stepscope {
inline namespace v1 {
namespace detail {

// Run-time state of the library, read by every scope.
enum RunMode : std::uint8_t {
  kModeUninitialised = 0,  // first scope initialises (reads the environment)
  kModeEnabled = 1,
  kModeDisabled = 2,  // STEPSCOPE=0, after finish(), or in a forked child
};
STEPSCOPE_API extern std::atomic<std::uint8_t> g_mode;
// Steps started in this process. Every record carries its value when the
// scope opened (a step scope: its own 1-based number), so the collector can
// leave warm-up steps out without buffering.
STEPSCOPE_API extern std::atomic<std::uint32_t> g_steps_started;
// The step whose opening asks the collector for a drain (request_drain()):
// the first after warm-up, where the OS counters' window of the measured
// steps starts, even in a run shorter than the collector's wait. 0: none.
STEPSCOPE_API extern std::atomic<std::uint32_t> g_drain_at_step;

// Once per step: one load and a compare; the call happens once per run.
STEPSCOPE_DETAIL_ALWAYS_INLINE void on_step_opened(std::uint32_t step) noexcept {
  if (STEPSCOPE_DETAIL_UNLIKELY(step == g_drain_at_step.load(std::memory_order_relaxed))) request_drain();
}

// Deepest nesting tracked per thread; deeper scopes still record, with their
// depth clamped (self time is then approximate and the report says so).
inline constexpr int kMaxDepth = 63;

// A step opened and closed by calls rather than by a scope's lifetime
// (stepscope::steps() and next_step(), <stepscope/steps.hpp>). Trivial, so it
// can live in the thread_local ThreadState; `active` false: nothing open.
struct OpenStep {
  const PhaseSite* site;
  std::uint64_t start;  // read_ticks() when the step opened
  std::uint32_t step;   // its 1-based number (g_steps_started)
  std::uint8_t depth;   // nesting depth of the step record itself
  std::uint8_t level;   // steps open on this thread below it when it opened
  bool active;
};

// Per-thread hot-path state. Trivial, so the thread_local needs no guard or
// TLS wrapper call; registration fills it on the first record.
struct ThreadState {
  ThreadRing* ring;
  std::uint8_t depth;                      // open scopes on this thread
  std::uint8_t step_depth;                 // open step scopes on this thread
  std::uint8_t outer_steps;                // of those, the outermost ones that hold another step (see enter_step)
  std::uint32_t last_step;                 // the number of the step opened last on this thread
  bool exited;                             // thread is past its exit handler: records are counted, not kept
  std::uint8_t kind_stack[kMaxDepth + 1];  // kind of each open scope, for the sampler
  OpenStep next_step;                      // the step stepscope::next_step() opened last; closed by the next call,
                                           // finish() or the thread's exit (close_next_step below)
  OpenStep deferred;                       // a steps() loop's step that ended under another loop's open step
                                           // (zip of two steps() loops): closed when the steps above it are
};

// One per thread for the whole process (default visibility, so every module
// that includes this header shares it).
STEPSCOPE_API inline thread_local ThreadState t_thread_state{};

// Cold paths, out of line in the library.
STEPSCOPE_API STEPSCOPE_DETAIL_NOINLINE bool initialise_runtime() noexcept;  // true if enabled
STEPSCOPE_API STEPSCOPE_DETAIL_NOINLINE ThreadRing* register_thread(ThreadState& state) noexcept;

// True when this scope should record. Initialises the run time on first use.
STEPSCOPE_DETAIL_ALWAYS_INLINE bool scope_enabled() noexcept {
  const std::uint8_t mode = g_mode.load(std::memory_order_relaxed);
  if (STEPSCOPE_DETAIL_LIKELY(mode == kModeEnabled)) return true;
  if (mode == kModeUninitialised) return initialise_runtime();
  return false;
}

// Optional device-timing hooks (CUDA backend). Null when no backend is active:
// then they cost one load and a not-taken branch per scope.
using DeviceBeginHook = std::uint16_t (*)(const PhaseSite* site) noexcept;  // returns a slot, 0 = none
using DeviceEndHook = void (*)(std::uint16_t slot) noexcept;
// Called on the recording thread when a record that holds a device slot was
// dropped (ring full): the collector will never see it, so the backend takes
// the slot back here instead of losing it.
using DeviceAbandonHook = void (*)(std::uint16_t slot) noexcept;
STEPSCOPE_API extern std::atomic<DeviceBeginHook> g_device_begin;
STEPSCOPE_API extern std::atomic<DeviceEndHook> g_device_end;
STEPSCOPE_API extern std::atomic<DeviceAbandonHook> g_device_abandon;
// Cold: a dropped record held `slot`; hands it to g_device_abandon.
STEPSCOPE_API STEPSCOPE_DETAIL_NOINLINE void device_slot_dropped(std::uint16_t slot) noexcept;

// ---- steps opened and closed by calls (steps(), next_step()) ---------------
// The same bookkeeping as ScopeBase, split so that a step can open at a time
// read earlier (a fetch becomes part of the step it turned out to feed).

// Pushes one finished record; a dropped record's device slot is handed back.
STEPSCOPE_DETAIL_ALWAYS_INLINE void push_record(ThreadState& ts, const PhaseRecord& record) noexcept {
  if (STEPSCOPE_DETAIL_UNLIKELY(!ts.ring->try_push(record)) && record.device_slot != 0)
    device_slot_dropped(record.device_slot);
}

// Opens a step that started at `start` (ticks) on this thread. The caller
// checked scope_enabled() and that ts.ring is registered.
// Steps on one thread do not nest: a step opened inside another (a steps()
// loop inside another, a step() inside a steps() loop) is the step, and the
// one around it a loop of steps from then on (kRecordOuterStep): what it
// records outside the inner steps lies between steps. Cold: tells the
// collector where that began (a kRecordHoldsSteps mark) and returns the outer
// step's number for the first step inside it, so that every number is a
// step's (warm-up is counted in numbers).
STEPSCOPE_API STEPSCOPE_DETAIL_NOINLINE std::uint32_t mark_outer_step(ThreadState& ts, const PhaseSite* inner) noexcept;

// A step opens on this thread: its 1-based number.
STEPSCOPE_DETAIL_ALWAYS_INLINE std::uint32_t enter_step(ThreadState& ts, const PhaseSite* site) noexcept {
  std::uint32_t step;
  if (STEPSCOPE_DETAIL_LIKELY(ts.step_depth == ts.outer_steps)) {
    step = g_steps_started.fetch_add(1, std::memory_order_relaxed) + 1;
    on_step_opened(step);
    ts.last_step = step;
  } else {
    step = mark_outer_step(ts, site);
  }
  ++ts.step_depth;
  return step;
}

// The open step with `level` steps below it closes (the innermost, but for a
// deferred one): its record's flags.
STEPSCOPE_DETAIL_ALWAYS_INLINE std::uint8_t leave_step(ThreadState& ts, std::uint8_t level) noexcept {
  std::uint8_t flags = kRecordIsStep | kRecordInStep;
  if (ts.step_depth == 0) return flags;
  if (level < ts.outer_steps) {
    flags |= kRecordOuterStep;
    --ts.outer_steps;
  }
  --ts.step_depth;
  if (ts.outer_steps > ts.step_depth) ts.outer_steps = ts.step_depth;
  return flags;
}
STEPSCOPE_DETAIL_ALWAYS_INLINE std::uint8_t leave_step(ThreadState& ts) noexcept {
  return leave_step(ts, static_cast<std::uint8_t>(ts.step_depth - 1));
}

// Inside a step of this thread (not only in a loop of steps).
STEPSCOPE_DETAIL_ALWAYS_INLINE bool in_step(const ThreadState& ts) noexcept {
  return ts.step_depth > ts.outer_steps;
}

STEPSCOPE_DETAIL_ALWAYS_INLINE void open_step(ThreadState& ts, OpenStep& open, const PhaseSite* site,
                                              std::uint64_t start) noexcept {
  open.site = site;
  open.start = start;
  open.depth = ts.depth;
  open.level = ts.step_depth;
  open.active = true;
  open.step = enter_step(ts, site);
  if (open.depth < kMaxDepth) {
    ts.depth = static_cast<std::uint8_t>(open.depth + 1);
    ts.kind_stack[open.depth] = kInStepNoPhase;
  }
  ts.ring->current_kind.store(kInStepNoPhase, std::memory_order_relaxed);
}

// Cold: `open`, a steps() loop's step with steps still open above it, is
// closed when they are (ts.deferred; at once if one is deferred already).
STEPSCOPE_API STEPSCOPE_DETAIL_NOINLINE void defer_step(ThreadState& ts, OpenStep& open) noexcept;
// Cold: closes ts.deferred at `end`, now that the steps above it are closed.
STEPSCOPE_API STEPSCOPE_DETAIL_NOINLINE void close_deferred_step(ThreadState& ts, std::uint64_t end) noexcept;

// Closes it at `end` (ticks) and pushes its record (`extra_flags`:
// kRecordUnendedStep from close_next_step()).
STEPSCOPE_DETAIL_ALWAYS_INLINE void close_step(ThreadState& ts, OpenStep& open, std::uint64_t end,
                                               std::uint8_t extra_flags = 0) noexcept {
  open.active = false;
  const auto flags = static_cast<std::uint8_t>(leave_step(ts, open.level) | extra_flags);
  ts.depth = open.depth;
  ts.ring->current_kind.store(open.depth == 0 ? kNoPhase : ts.kind_stack[open.depth - 1], std::memory_order_relaxed);
  push_record(ts, PhaseRecord{open.site, open.start, end, open.step, 0, open.depth, flags});
  if (STEPSCOPE_DETAIL_UNLIKELY(ts.deferred.active) && ts.step_depth == ts.deferred.level + 1)
    close_deferred_step(ts, end);
}

// Cold: closes the step next_step() left open on this thread, now (finish(),
// thread exit), marked unended (no next_step() call ended it: its end is not
// the loop's), and a deferred step whose steps above were never closed.
// Does nothing when none is open.
STEPSCOPE_API STEPSCOPE_DETAIL_NOINLINE void close_next_step(ThreadState& ts) noexcept;

// The scope's fields are written only when it is active and read only then;
// after full inlining GCC cannot always see that and warns at -O2 in the
// user's code (-Wmaybe-uninitialized). Initialising them would put stores on
// the disabled path, so the warning is silenced for this class instead.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
class ScopeBase {
 public:
  ScopeBase(const ScopeBase&) = delete;
  ScopeBase& operator=(const ScopeBase&) = delete;
  ScopeBase(ScopeBase&&) = delete;
  ScopeBase& operator=(ScopeBase&&) = delete;
  // Scopes live on the stack only: a heap-allocated scope would outlive the
  // region it claims to time.
  static void* operator new(std::size_t) = delete;
  static void* operator new[](std::size_t) = delete;

 protected:
  // Only active_ is written before the enabled check: the disabled path is
  // one load, a compare and one store.
  STEPSCOPE_DETAIL_ALWAYS_INLINE explicit ScopeBase(const PhaseSite* site) noexcept : active_(false) {
    if (!scope_enabled()) return;
    site_ = site;
    device_slot_ = 0;
    ThreadState& ts = t_thread_state;
    if (STEPSCOPE_DETAIL_UNLIKELY(ts.ring == nullptr) && register_thread(ts) == nullptr) return;
    active_ = true;
    in_step_ = in_step(ts);  // a step's record carries kRecordInStep whatever this says
    if (site->is_step) {
      step_ = enter_step(ts, site);
    } else {
      step_ = g_steps_started.load(std::memory_order_relaxed);
    }
    depth_ = ts.depth;
    // What the sampler sees while this scope is the innermost (a step: its
    // own time in none of its phases).
    const std::uint8_t kind = site->is_step ? kInStepNoPhase : static_cast<std::uint8_t>(site->kind);
    if (depth_ < kMaxDepth) {
      ts.depth = static_cast<std::uint8_t>(depth_ + 1);
      ts.kind_stack[depth_] = kind;
    }
    ts.ring->current_kind.store(kind, std::memory_order_relaxed);
    if (DeviceBeginHook hook = g_device_begin.load(std::memory_order_relaxed)) device_slot_ = hook(site);
    start_ = read_ticks();
  }

  STEPSCOPE_DETAIL_ALWAYS_INLINE ~ScopeBase() {
    if (!active_) return;
    const std::uint64_t end = read_ticks();
    if (device_slot_ != 0) {
      if (DeviceEndHook hook = g_device_end.load(std::memory_order_relaxed)) hook(device_slot_);
    }
    ThreadState& ts = t_thread_state;
    const std::uint8_t flags = site_->is_step ? leave_step(ts) : in_step_ ? kRecordInStep : 0;
    ts.depth = depth_;
    ts.ring->current_kind.store(depth_ == 0 ? kNoPhase : ts.kind_stack[depth_ - 1], std::memory_order_relaxed);
    if (STEPSCOPE_DETAIL_UNLIKELY(
            !ts.ring->try_push(PhaseRecord{site_, start_, end, step_, device_slot_, depth_, flags})) &&
        device_slot_ != 0)
      device_slot_dropped(device_slot_);  // counted as dropped by the ring; the slot is not lost
  }

 private:
  // Set only when active_ (the disabled path leaves them unwritten).
  const PhaseSite* site_;
  std::uint64_t start_;
  std::uint32_t step_;
  std::uint16_t device_slot_;
  std::uint8_t depth_;
  bool in_step_;
  bool active_;
};
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace detail

// Times one phase of the step, from construction to destruction.
class ScopedPhase : public detail::ScopeBase {
 public:
  STEPSCOPE_DETAIL_ALWAYS_INLINE explicit ScopedPhase(const detail::PhaseSite* site) noexcept : ScopeBase(site) {}
  // Spelled out so the base's inline destructor is inlined at every scope:
  // an implicit one was left out of line by GCC at -O2 (a call per disabled scope).
  STEPSCOPE_DETAIL_ALWAYS_INLINE ~ScopedPhase() {}
};

// Times one training step; phases opened inside it on the same thread are its
// critical path, the rest of its time is "unattributed".
class ScopedStep : public detail::ScopeBase {
 public:
  STEPSCOPE_DETAIL_ALWAYS_INLINE explicit ScopedStep(const detail::PhaseSite* site) noexcept : ScopeBase(site) {}
  STEPSCOPE_DETAIL_ALWAYS_INLINE ~ScopedStep() {}
};

// Kind of a phase from the words of its name, for live scopes and a trace's
// annotations alike (users name phases freely: "data_loading",
// "forward_pass", "optimizer_step", "## forward ##", "DataLoader",
// "record_param_comms"): input, communication, memory, compute, in that
// order of precedence; anything else is other. A marker matches where a word
// starts (the name's start, after a character that is not a letter, or at a
// lower-to-upper case change), case-insensitive, its '_' standing for any
// separator ("data loading", "all-reduce"): "recommend" and "deepcopy" are
// other. "data" alone is input only as the whole name ("data", "## data ##"):
// "sparse_data_dist" and "DistributedDataParallel.forward" are not.
namespace detail {
constexpr bool phase_name_letter(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
constexpr bool phase_name_upper(char c) noexcept {
  return c >= 'A' && c <= 'Z';
}
constexpr bool phase_name_separator(char c) noexcept {
  return c != '\0' && !phase_name_letter(c) && !(c >= '0' && c <= '9');
}
// One character of a name against one of a marker (lower case, '_' any separator).
constexpr bool phase_name_char(char c, char m) noexcept {
  return m == '_' ? phase_name_separator(c) : (phase_name_upper(c) ? static_cast<char>(c - 'A' + 'a') : c) == m;
}
// The length of `marker` matched at name[i], or 0.
constexpr std::size_t phase_name_match(const char* name, std::size_t i, const char* marker) noexcept {
  std::size_t k = 0;
  while (marker[k] != '\0' && phase_name_char(name[i + k], marker[k])) ++k;
  return marker[k] == '\0' ? k : 0;
}
// Whether a word of `name` starts with `marker`.
constexpr bool phase_name_has(const char* name, const char* marker) noexcept {
  for (std::size_t i = 0; name[i] != '\0'; ++i) {
    const bool word_start =
        i == 0 || !phase_name_letter(name[i - 1]) || (phase_name_upper(name[i]) && !phase_name_upper(name[i - 1]));
    if (word_start && phase_name_match(name, i, marker) > 0) return true;
  }
  return false;
}
template <std::size_t N>
constexpr bool phase_name_has_any(const char* name, const char* const (&markers)[N]) noexcept {
  for (const char* m : markers)
    if (phase_name_has(name, m)) return true;
  return false;
}
// Whether the letters of `name` are `marker`'s and nothing more ("## data ##").
constexpr bool phase_name_is(const char* name, const char* marker) noexcept {
  std::size_t i = 0;
  while (name[i] != '\0' && !phase_name_letter(name[i])) ++i;
  const std::size_t k = phase_name_match(name, i, marker);
  if (k == 0) return false;
  for (i += k; name[i] != '\0'; ++i)
    if (phase_name_letter(name[i])) return false;
  return true;
}
}  // namespace detail

constexpr PhaseKind default_phase_kind(const char* name) noexcept {
  constexpr const char* kInput[] = {"dataloader", "data_load", "data_fetch", "load_data", "fetch_data",
                                    "next_batch", "get_batch", "load_batch", "prefetch",  "input"};
  constexpr const char* kCommunication[] = {"allreduce", "all_reduce", "allgather",  "all_gather", "reduce_scatter",
                                            "all2all",   "alltoall",   "all_to_all", "broadcast",  "nccl",
                                            "comm",      "rpc",        "barrier"};
  constexpr const char* kMemory[] = {"h2d", "d2h", "memcpy", "copy", "to_device", "to("};
  constexpr const char* kCompute[] = {"forward", "fwd", "backward", "bwd", "optim", "loss", "zero_grad"};
  if (detail::phase_name_is(name, "data") || detail::phase_name_has_any(name, kInput)) return PhaseKind::input;
  if (detail::phase_name_has_any(name, kCommunication)) return PhaseKind::communication;
  if (detail::phase_name_has_any(name, kMemory)) return PhaseKind::memory;
  if (detail::phase_name_has_any(name, kCompute)) return PhaseKind::compute;
  return PhaseKind::other;
}

}  // namespace v1
}  // namespace stepscope

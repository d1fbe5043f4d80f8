// The rings of the threads that record, registered on each thread's first
// record. Registration never calls malloc: a thread's entry and its ring
// storage share one block obtained from mmap, and entries are linked into an
// intrusive list. So a thread's first record leaves the application's heap
// exactly as it was (see docs/benchmarks-libtorch.md: with glibc, a few
// hundred bytes allocated at the wrong moment can decide whether a training
// loop's tensors are trimmed and re-faulted every step).
//
//   ThreadRegistry registry(16384);
//   ThreadRing* ring = registry.add(os_tid, own_sched_times());  // any thread, once
//   registry.retire(ring);                        // that thread, at exit
//   registry.for_each([](RingEntry& e) { ... });  // the collector
//   registry.remove(&entry);                      // the collector, once drained
#pragma once

#include <stepscope/ring.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace stepscope {
inline namespace v1 {
namespace detail {

// A thread's scheduler times (/proc/thread-self/schedstat): on a CPU, and
// runnable but waiting for one, since the thread began.
struct ThreadSchedTimes {
  std::uint64_t run_ns = 0, wait_ns = 0;
  bool known = false;
};
// The calling thread's, read now (three system calls, no malloc); unknown
// where /proc is not mounted. For a thread's registration: cold.
ThreadSchedTimes own_sched_times() noexcept;
// A schedstat file's text ("RUN_NS WAIT_NS SLICES"): its first two numbers.
ThreadSchedTimes parse_sched_times(const char* text, std::size_t size) noexcept;

// One registered thread. Lives at the start of its mmap block, its ring's
// records right after it.
struct RingEntry {
  static constexpr std::uint32_t kUnassigned = ~std::uint32_t{0};

  RingEntry(PhaseRecord* storage, std::uint32_t capacity, std::int64_t tid, std::size_t block_bytes,
            ThreadSchedTimes at_start) noexcept
      : ring(storage, capacity), os_tid(tid), sched_at_start(at_start), bytes(block_bytes) {}

  ThreadRing ring;
  const std::int64_t os_tid;
  // When it registered (its first record): the system sampler counts its
  // CPU wait from here when no tick saw it sooner (a run shorter than a tick).
  const ThreadSchedTimes sched_at_start;
  std::atomic<bool> retiring{false};  // set by the thread at exit; then no more pushes come
  // Collector only (under its state lock).
  std::uint32_t thread = kUnassigned;  // aggregator thread id, given on the first drain
  bool ran_steps = false;
  // Registry only (under its lock).
  RingEntry* prev = nullptr;
  RingEntry* next = nullptr;
  const std::size_t bytes;  // of the whole block
};

// Start-up burst: a program may record many scopes before the collector
// thread has started (it reads the settings, probes the device, then waits
// one interval before its first drain). Rings registered before that first
// drain are made large enough to hold such a burst, so nothing recorded at
// start-up is dropped while it fits: kStartupRingRecords records (4 MiB of
// address space, resident only as records fill it), for at most
// kStartupRings threads (bounded memory). Later threads get the configured
// capacity. Nothing on the hot path changes: a ring's size is fixed when its
// thread registers (cold path).
inline constexpr std::uint32_t kStartupRingRecords = 1u << 17;
inline constexpr std::size_t kStartupRings = 4;

class ThreadRegistry {
 public:
  // ring_capacity: records per ring, a power of two.
  // startup_burst: give the first threads large rings until end_startup()
  // (the run time's registry; see kStartupRingRecords).
  explicit ThreadRegistry(std::uint32_t ring_capacity, bool startup_burst = false) noexcept
      : capacity_(ring_capacity), startup_(startup_burst) {}
  ~ThreadRegistry();  // unmaps every block
  ThreadRegistry(const ThreadRegistry&) = delete;
  ThreadRegistry& operator=(const ThreadRegistry&) = delete;

  // Any thread, its first record. Null when mmap fails. No malloc.
  // at_start: that thread's own_sched_times() (unknown for another thread).
  ThreadRing* add(std::int64_t os_tid, ThreadSchedTimes at_start = {}) noexcept;
  // The ring's thread is exiting: marks the entry; the collector frees it
  // after its next drain.
  void retire(ThreadRing* ring) noexcept;
  // fn(RingEntry&) for every entry, in registration order, under the lock.
  // fn must not call back into the registry.
  template <typename Fn>
  void for_each(Fn&& fn) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (RingEntry* e = head_; e != nullptr; e = e->next) fn(*e);
  }
  // Unlinks and unmaps an entry whose ring is drained and whose thread has
  // retired it; its drops are remembered.
  void remove(RingEntry* entry) noexcept;
  // Records dropped by full rings, retired ones included.
  std::uint64_t dropped() const noexcept;
  std::size_t size() const noexcept;
  std::uint32_t ring_capacity() const noexcept { return capacity_; }
  // The collector's first drain has happened: rings registered from now on
  // get the configured capacity (see kStartupRingRecords).
  void end_startup() noexcept { startup_.store(false, std::memory_order_relaxed); }
  // Fork: the child must find the lock free (a parent thread may have held
  // it at fork time). lock before fork(), unlock in both processes after.
  void lock_for_fork() noexcept { mutex_.lock(); }
  void unlock_after_fork() noexcept { mutex_.unlock(); }

 private:
  const std::uint32_t capacity_;
  mutable std::mutex mutex_;  // never taken on the hot path
  RingEntry* head_ = nullptr;
  RingEntry* tail_ = nullptr;
  std::size_t size_ = 0;
  std::uint64_t removed_dropped_ = 0;
  std::atomic<bool> startup_;      // until the collector's first drain
  std::size_t startup_rings_ = 0;  // large start-up rings given (under mutex_)
};

// The other locks of core a thread may hold at fork(): the run-time site
// table's (site(), and a snapshot counting its sites) and the steps() call
// sites'. As with ThreadRegistry's: taken before fork(), released in both
// processes after, so a child never inherits one held (a DataLoader worker
// forked while the collector counted sites hung at its first phase).
void lock_sites_for_fork() noexcept;  // site.cpp
void unlock_sites_after_fork() noexcept;
void lock_step_sites_for_fork() noexcept;  // steps.cpp
void unlock_step_sites_after_fork() noexcept;

}  // namespace detail
}  // namespace v1
}  // namespace stepscope

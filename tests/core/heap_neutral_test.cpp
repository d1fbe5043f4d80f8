// Turning stepscope on must not move the application's heap: the first scope
// of a process (run-time start, clock choice, thread registration) and a new
// thread's first scope allocate nothing with malloc on the recording thread,
// beyond the one small block glibc itself allocates when any thread is
// created (the new thread's TLS vector, allocated by its creator). Why: with
// glibc, a few hundred bytes allocated at the wrong moment can decide whether
// a training loop's tensors are trimmed and re-faulted every step
// (docs/benchmarks-libtorch.md).
//
// malloc and friends are interposed here (forwarding to glibc's own entry
// points) and counted per thread while a flag is set, so allocations made by
// libc internals (fopen buffers, thread-local destructor lists) count too,
// not only operator new. Not built with sanitizers, which interpose malloc
// themselves.
#include <stepscope/stepscope.hpp>

#include "core/env.hpp"
#include "stats/clock.hpp"

#include <catch2/catch.hpp>

#include <pthread.h>

#include <cstddef>
#include <cstdlib>

extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
void __libc_free(void*);
}

namespace {
// Initial-exec TLS of the executable: reading it never allocates.
thread_local bool t_counting = false;
thread_local std::size_t t_calls = 0;
inline void note() {
  if (t_counting) ++t_calls;
}
}  // namespace

extern "C" {
void* malloc(std::size_t n) {
  note();
  return __libc_malloc(n);
}
void* calloc(std::size_t a, std::size_t b) {
  note();
  return __libc_calloc(a, b);
}
void* realloc(void* p, std::size_t n) {
  note();
  return __libc_realloc(p, n);
}
void* memalign(std::size_t alignment, std::size_t n) {
  note();
  return __libc_memalign(alignment, n);
}
void* aligned_alloc(std::size_t alignment, std::size_t n) {
  note();
  return __libc_memalign(alignment, n);
}
int posix_memalign(void** out, std::size_t alignment, std::size_t n) {
  note();
  void* p = __libc_memalign(alignment, n);
  if (p == nullptr) return 12;  // ENOMEM
  *out = p;
  return 0;
}
void free(void* p) {
  __libc_free(p);
}
}

namespace {

// Allocations this thread makes while running fn.
template <typename Fn>
std::size_t allocations_during(Fn&& fn) {
  t_calls = 0;
  t_counting = true;
  fn();
  t_counting = false;
  return t_calls;
}

void* idle(void*) {
  return nullptr;
}

// What creating (not running) one thread costs its creator in this libc.
std::size_t thread_creation_allocations() {
  pthread_t t{};
  const std::size_t n = allocations_during([&] { REQUIRE(pthread_create(&t, nullptr, idle, nullptr) == 0); });
  pthread_join(t, nullptr);
  return n;
}

std::size_t g_worker_first_scope = ~std::size_t{0};
std::size_t g_worker_steady = ~std::size_t{0};

void* worker(void*) {
  g_worker_first_scope = allocations_during([] { STEPSCOPE_PHASE_KIND("decode", stepscope::PhaseKind::input); });
  g_worker_steady = allocations_during([] {
    for (int i = 0; i < 1000; ++i) {
      STEPSCOPE_PHASE_KIND("decode", stepscope::PhaseKind::input);
    }
  });
  return nullptr;
}

}  // namespace

TEST_CASE("the counting interposer sees libc's own allocations", "[runtime][heap]") {
  // Guards the test itself: if malloc were not interposed, every count
  // below would be 0 and prove nothing.
  const std::size_t n = allocations_during([] {
    void* p = std::malloc(40);
    std::free(p);
    std::FILE* f = std::fopen("/proc/self/stat", "r");
    if (f != nullptr) {
      (void)std::fgetc(f);  // a FILE allocates its buffer on first read
      std::fclose(f);
    }
  });
  REQUIRE(n >= 2);
}

TEST_CASE("start-up, registration and recording leave the application's heap alone", "[runtime][heap]") {
  setenv("STEPSCOPE_QUIET", "1", 1);
  setenv("STEPSCOPE_OUT", "heap_neutral_test-report.json", 1);
  setenv("STEPSCOPE_CUDA", "0", 1);

  SECTION("the start-up settings and the clock choice allocate nothing") {
    CHECK(allocations_during([] { (void)stepscope::detail::read_early_settings(); }) == 0);
    CHECK(allocations_during([] { (void)stepscope::detail::choose_clock(nullptr); }) == 0);
    CHECK(allocations_during([] { (void)stepscope::detail::choose_clock("no-such-clock"); }) == 0);
  }

  (void)thread_creation_allocations();  // the first thread of a process may pay one-off costs
  const std::size_t per_thread = thread_creation_allocations();
  INFO("allocations libc makes on the creating thread for one new thread: " << per_thread);

  REQUIRE(stepscope::detail::g_mode.load() == stepscope::detail::kModeUninitialised);
  // The process's first scope: starts the run time and the collector
  // thread, registers this thread, records.
  const std::size_t first = allocations_during([] {
    STEPSCOPE_STEP();
    { STEPSCOPE_PHASE("forward"); }
  });
  REQUIRE(stepscope::detail::g_mode.load() == stepscope::detail::kModeEnabled);
  CHECK(first == per_thread);

  // Steady state: nothing at all.
  const std::size_t steady = allocations_during([] {
    for (int i = 0; i < 2000; ++i) {
      STEPSCOPE_STEP();
      { STEPSCOPE_PHASE("data"); }
      { STEPSCOPE_PHASE("forward"); }
    }
  });
  CHECK(steady == 0);

  // Another thread's first scope (registration) and its steady state.
  pthread_t t{};
  REQUIRE(pthread_create(&t, nullptr, worker, nullptr) == 0);
  pthread_join(t, nullptr);
  CHECK(g_worker_first_scope == 0);
  CHECK(g_worker_steady == 0);

  // And the records all arrived.
  const stepscope::Report r = stepscope::snapshot();
  CHECK(r.total_records == 2 + 2000 * 3 + 1 + 1000);
  CHECK(r.dropped_records == 0);
}

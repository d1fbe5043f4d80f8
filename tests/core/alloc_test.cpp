// Zero heap allocations on the hot path after a thread's first record.
#include <stepscope/stepscope.hpp>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <new>

namespace {
thread_local std::size_t t_allocations = 0;
}

// Every replaceable form that pairs new with free(), so the counting is
// complete and consistent (also under AddressSanitizer).
void* operator new(std::size_t size) {
  ++t_allocations;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) {
  return operator new(size);
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  ++t_allocations;
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new[](std::size_t size, const std::nothrow_t& tag) noexcept {
  return operator new(size, tag);
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}

TEST_CASE("no allocation on the hot path after the first record", "[runtime][alloc]") {
  setenv("STEPSCOPE_QUIET", "1", 1);
  setenv("STEPSCOPE_OUT", "alloc_test-report.json", 1);
  REQUIRE(stepscope::enabled());
  {
    STEPSCOPE_STEP();
    STEPSCOPE_PHASE("first");  // registers this thread: allowed to allocate
  }
  const std::size_t before = t_allocations;
  for (int i = 0; i < 100000; ++i) {
    STEPSCOPE_STEP();
    { STEPSCOPE_PHASE("data"); }
    {
      STEPSCOPE_PHASE("forward");
      { STEPSCOPE_PHASE_KIND("inner", stepscope::PhaseKind::memory); }
    }
  }
  REQUIRE(t_allocations == before);
  // The records did arrive (so the loop really recorded).
  const stepscope::Report r = stepscope::snapshot();
  REQUIRE(r.total_records >= 100000);
}

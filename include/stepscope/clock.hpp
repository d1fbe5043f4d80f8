// stepscope/clock.hpp — the hot-path clock.
//
// On x86-64 with an invariant TSC that the kernel itself uses as its clock
// source, a timestamp is one RDTSC (~7 ns, no system call). The collector
// converts ticks to nanoseconds off the hot path with a calibration against
// CLOCK_MONOTONIC (src/core/clock.cpp). Everywhere else, ticks are
// CLOCK_MONOTONIC nanoseconds read through the vDSO.
//
//   std::uint64_t t0 = stepscope::detail::read_ticks();
//   ...
//   std::uint64_t elapsed_ticks = stepscope::detail::read_ticks() - t0;
#pragma once

#include <stepscope/export.hpp>

#include <cstdint>
#include <ctime>

#if defined(__x86_64__) || defined(_M_X64)
#include <x86intrin.h>
#define STEPSCOPE_DETAIL_HAVE_TSC 1
#else
#define STEPSCOPE_DETAIL_HAVE_TSC 0
#endif

namespace stepscope {
inline namespace v1 {
namespace detail {

// Set once, before the first record, by the run-time initialisation: true
// when ticks are TSC cycles, false when they are CLOCK_MONOTONIC ns.
STEPSCOPE_API extern bool g_use_tsc;

inline std::uint64_t monotonic_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

STEPSCOPE_DETAIL_ALWAYS_INLINE std::uint64_t read_ticks() noexcept {
#if STEPSCOPE_DETAIL_HAVE_TSC
  // RDTSC is not serialising: neighbouring instructions may be reordered
  // around it by a few cycles, which is far below what a phase lasts.
  if (STEPSCOPE_DETAIL_LIKELY(g_use_tsc)) return __rdtsc();
#endif
  return monotonic_ns();
}

}  // namespace detail
}  // namespace v1
}  // namespace stepscope

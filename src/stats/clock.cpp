#include "stats/clock.hpp"

#include <stepscope/clock.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstring>

#if STEPSCOPE_DETAIL_HAVE_TSC
#include <cpuid.h>
#endif

namespace stepscope {
inline namespace v1 {
namespace detail {

bool g_use_tsc = false;

bool cpu_has_invariant_tsc() noexcept {
#if STEPSCOPE_DETAIL_HAVE_TSC
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_max(0x80000000u, nullptr) < 0x80000007u) return false;
  __cpuid(0x80000007u, eax, ebx, ecx, edx);
  return (edx & (1u << 8)) != 0;
#else
  return false;
#endif
}

// Plain open/read: this runs on the thread of the first record, which must
// not allocate (a FILE or a stream would put 8 KiB buffers in the user's heap).
bool kernel_clocksource_is_tsc() noexcept {
  const int fd = ::open("/sys/devices/system/clocksource/clocksource0/current_clocksource", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[32] = {0};
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  return n >= 3 && std::strncmp(buf, "tsc", 3) == 0 && (n == 3 || buf[3] == '\n' || buf[3] == ' ');
}

ClockChoice choose_clock(const char* env_override) noexcept {
  ClockChoice choice;
  bool want_tsc = true;
  if (env_override != nullptr && *env_override != '\0') {
    if (std::strcmp(env_override, "monotonic") == 0)
      want_tsc = false;
    else if (std::strcmp(env_override, "tsc") != 0)
      choice.override_invalid = true;
  }
  g_use_tsc = want_tsc && STEPSCOPE_DETAIL_HAVE_TSC && cpu_has_invariant_tsc() && kernel_clocksource_is_tsc();
  choice.source = g_use_tsc ? "tsc" : "clock_monotonic";
  return choice;
}

TickConverter::Pair TickConverter::take_pair() noexcept {
  Pair best{read_ticks(), static_cast<std::int64_t>(monotonic_ns())};
  std::int64_t best_width = -1;
  for (int i = 0; i < 7; ++i) {
    const std::int64_t before = static_cast<std::int64_t>(monotonic_ns());
    const std::uint64_t ticks = read_ticks();
    const std::int64_t after = static_cast<std::int64_t>(monotonic_ns());
    if (best_width < 0 || after - before < best_width) {
      best_width = after - before;
      best = Pair{ticks, before + (after - before) / 2};
    }
  }
  return best;
}

void TickConverter::start() noexcept {
  tsc_ = g_use_tsc;
  const Pair p = take_pair();
  base_ticks_ = p.ticks;
  base_ns_ = p.ns;
  ns_per_tick_ = 1.0;
  scale_ = TickScale{};
  error_ppm_ = 0;
  if (tsc_) {
    // Provisional slope from a 2 ms calibration (off the hot path: this runs
    // on the collector thread before its first drain).
    const std::int64_t until = p.ns + 2000000;
    while (static_cast<std::int64_t>(monotonic_ns()) < until) {
    }
    recalibrate();
    error_ppm_ = 0;
  }
}

void TickConverter::recalibrate() noexcept {
  if (!tsc_) return;
  const Pair p = take_pair();
  const double dt_ticks = static_cast<double>(static_cast<std::int64_t>(p.ticks - base_ticks_));
  const double dt_ns = static_cast<double>(p.ns - base_ns_);
  if (dt_ticks <= 0 || dt_ns <= 0) return;
  const double slope = dt_ns / dt_ticks;
  if (dt_ns > 1e8) {  // after 100 ms the pair error is below 1 ppm
    error_ppm_ = std::max(error_ppm_, std::fabs(slope - ns_per_tick_) / slope * 1e6);
  }
  ns_per_tick_ = slope;
  scale_ = TickScale::from_ns_per_tick(slope);
}

}  // namespace detail
}  // namespace v1
}  // namespace stepscope

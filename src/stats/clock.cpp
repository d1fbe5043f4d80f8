#include "stats/clock.hpp"

#include <stepscope/clock.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>

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

namespace {

constexpr const char* kClockDir = "/sys/devices/system/clocksource/clocksource0/";

// Plain open/read: this runs on the thread of the first record, which must
// not allocate (a FILE or a stream would put 8 KiB buffers in the user's heap).
// The file's text without its trailing newline; "" when unreadable.
void read_text(const char* path, char* buf, std::size_t size) noexcept {
  buf[0] = '\0';
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  const ssize_t n = ::read(fd, buf, size - 1);
  ::close(fd);
  std::size_t len = n > 0 ? static_cast<std::size_t>(n) : 0;
  while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == ' ')) --len;
  buf[len] = '\0';
}

// True when `word` is one of the whitespace-separated words of `list`.
bool has_word(const char* list, const char* word) noexcept {
  const std::size_t n = std::strlen(word);
  for (const char* p = list; *p != '\0';) {
    while (*p == ' ' || *p == '\n' || *p == '\t') ++p;
    const char* end = p;
    while (*end != '\0' && *end != ' ' && *end != '\n' && *end != '\t') ++end;
    if (static_cast<std::size_t>(end - p) == n && std::strncmp(p, word, n) == 0) return true;
    p = end;
  }
  return false;
}

// The value of the last "tsc=" parameter on the kernel command line (the one
// the kernel acts on), copied into `out`; "" when there is none.
void last_tsc_parameter(const char* cmdline, char* out, std::size_t size) noexcept {
  out[0] = '\0';
  for (const char* p = cmdline; (p = std::strstr(p, "tsc=")) != nullptr; p += 4) {
    if (p != cmdline && p[-1] != ' ') continue;
    std::size_t n = 0;
    while (p[4 + n] != '\0' && p[4 + n] != ' ' && p[4 + n] != '\n' && n + 1 < size) {
      out[n] = p[4 + n];
      ++n;
    }
    out[n] = '\0';
  }
}

char g_clock_reason[320];

}  // namespace

bool kernel_clocksource_is_tsc() noexcept {
  char buf[64];
  read_text("/sys/devices/system/clocksource/clocksource0/current_clocksource", buf, sizeof buf);
  return std::strcmp(buf, "tsc") == 0;
}

void explain_clock(bool forced_monotonic, bool have_tsc, bool invariant_tsc, const char* current, const char* available,
                   const char* cmdline, char* out, std::size_t size) noexcept {
  constexpr const char* kNoInvariant = "the CPU reports no invariant TSC (CPUID 0x80000007 EDX bit 8)";
  if (forced_monotonic) {
    std::snprintf(out, size, "STEPSCOPE_CLOCK=monotonic");
  } else if (!have_tsc) {
    std::snprintf(out, size, "no TSC on this CPU architecture");
  } else if (*current == '\0') {
    std::snprintf(out, size, "the kernel's clocksource could not be read (%s): a TSC it may distrust is not used",
                  kClockDir);
  } else if (std::strcmp(current, "tsc") == 0) {
    if (invariant_tsc)
      std::snprintf(out, size, "invariant TSC, kernel clocksource tsc");
    else
      std::snprintf(out, size, "%s, although the kernel's clocksource is tsc", kNoInvariant);
  } else if (!has_word(available, "tsc")) {
    char param[32];
    last_tsc_parameter(cmdline, param, sizeof param);
    std::snprintf(
        out, size,
        "the kernel marked the TSC unstable%s (clocksource %s; tsc is not among its available clocksources: %s)",
        std::strcmp(param, "unstable") == 0 ? " (boot parameter tsc=unstable)" : "", current, available);
  } else {
    std::snprintf(out, size, "the kernel's clocksource is %s, not tsc (the TSC is available to it but not chosen)%s%s",
                  current, invariant_tsc ? "" : "; ", invariant_tsc ? "" : kNoInvariant);
  }
}

const char* clock_reason() noexcept {
  return g_clock_reason;
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
  char current[64], available[256], cmdline[2048];
  read_text("/sys/devices/system/clocksource/clocksource0/current_clocksource", current, sizeof current);
  read_text("/sys/devices/system/clocksource/clocksource0/available_clocksource", available, sizeof available);
  read_text("/proc/cmdline", cmdline, sizeof cmdline);
  const bool invariant = cpu_has_invariant_tsc();
  g_use_tsc = want_tsc && STEPSCOPE_DETAIL_HAVE_TSC && invariant && std::strcmp(current, "tsc") == 0;
  explain_clock(!want_tsc, STEPSCOPE_DETAIL_HAVE_TSC != 0, invariant, current, available, cmdline, g_clock_reason,
                sizeof g_clock_reason);
  choice.source = g_use_tsc ? "tsc" : "clock_monotonic";
  return choice;
}

double scope_floor_ns(bool use_tsc) noexcept {
  if (use_tsc && !STEPSCOPE_DETAIL_HAVE_TSC) return 0;
  struct alignas(32) Record {  // the ring's 32-byte record
    const void* site;
    std::uint64_t start, end;
    std::uint32_t step;
    std::uint32_t rest;
  };
  static Record ring[256];
  auto read = [use_tsc]() noexcept -> std::uint64_t {
#if STEPSCOPE_DETAIL_HAVE_TSC
    if (use_tsc) return __rdtsc();
#endif
    return monotonic_ns();
  };
  constexpr int kBatch = 400;  // x 5 rounds: ~0.1 ms with CLOCK_MONOTONIC in a VM
  double best = 0;
  for (int round = 0; round < 5; ++round) {
    const std::uint64_t t0 = monotonic_ns();
    for (int i = 0; i < kBatch; ++i) {
      const std::uint64_t start = read();
      const std::uint64_t end = read();
      ring[i & 255] = Record{ring, start, end, static_cast<std::uint32_t>(i), 0};
      asm volatile("" ::: "memory");  // the store happens, every time
    }
    const double ns = static_cast<double>(monotonic_ns() - t0) / kBatch;
    if (round == 0 || ns < best) best = ns;
  }
  return best;
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
    // Provisional slope from a calibration of at least 2 ms (off the hot
    // path: this runs on the collector thread before its first drain). The
    // thread sleeps through it: the pairs at both ends carry the precision,
    // a later wake-up only lengthens the baseline. (It used to spin: 2 ms of
    // CPU, most of the collector's cost in a run of under a second.)
    const std::int64_t until = p.ns + 2000000;
    for (std::int64_t now = p.ns; now < until; now = static_cast<std::int64_t>(monotonic_ns()))
      std::this_thread::sleep_for(std::chrono::nanoseconds(until - now));
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

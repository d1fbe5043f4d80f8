// Cold paths of <stepscope/steps.hpp>: the sites of each steps() /
// next_step() call site, closing the step next_step() left open, the mark of
// a step that turned out to hold steps, and next_step() calls inside another
// step.
//
// Call sites live in a fixed pool in static storage: records point at their
// sites for as long as the collector may read them (after the loop, after the
// thread), and building one must not touch the application's heap (see
// registry.hpp for why a stray malloc matters).
#include "core/registry.hpp"

#include <stepscope/steps.hpp>

#include <atomic>
#include <cstring>
#include <mutex>

namespace stepscope {
inline namespace v1 {
namespace detail {
namespace {

// Distinct steps()/next_step() call sites kept apart; more share one site.
constexpr std::uint32_t kMaxStepCallSites = 256;

struct StepCallSitePool {
  StepCallSite sites[kMaxStepCallSites];
  std::atomic<std::uint32_t> published{0};  // sites[0, published) are complete and never change
  std::mutex insert_mutex;                  // serialises additions; lookups take no lock
};

StepCallSitePool& pool() {
  static StepCallSitePool p;  // constant-initialisable members: no allocation
  return p;
}

constexpr StepCallSite kOtherCallSites{{"step", PhaseKind::other, true, "(other call sites)", 0},
                                       {"data", PhaseKind::input, false, "(other call sites)", 0}};

bool same_place(const PhaseSite& site, const char* file, int line) {
  if (site.line != line) return false;
  return site.file == file || (site.file != nullptr && file != nullptr && std::strcmp(site.file, file) == 0);
}

const StepCallSite* find(const StepCallSitePool& p, std::uint32_t count, const char* file, int line) {
  for (std::uint32_t i = 0; i < count; ++i)
    if (same_place(p.sites[i].step, file, line)) return &p.sites[i];
  return nullptr;
}

}  // namespace

const StepCallSite* step_call_site_slow(const char* file, int line) noexcept {
  if (file == nullptr) file = "(unknown)";
  StepCallSitePool& p = pool();
  if (const StepCallSite* s = find(p, p.published.load(std::memory_order_acquire), file, line)) return s;
  try {
    std::lock_guard<std::mutex> lock(p.insert_mutex);
    const std::uint32_t count = p.published.load(std::memory_order_relaxed);
    if (const StepCallSite* s = find(p, count, file, line)) return s;
    if (count >= kMaxStepCallSites) return &kOtherCallSites;
    p.sites[count] =
        StepCallSite{{"step", PhaseKind::other, true, file, line}, {"data", PhaseKind::input, false, file, line}};
    p.published.store(count + 1, std::memory_order_release);
    return &p.sites[count];
  } catch (...) {  // std::mutex::lock may throw std::system_error
    return &kOtherCallSites;
  }
}

void lock_step_sites_for_fork() noexcept {
  pool().insert_mutex.lock();
}
void unlock_step_sites_after_fork() noexcept {
  pool().insert_mutex.unlock();
}

std::uint32_t mark_outer_step(ThreadState& ts, const PhaseSite* inner) noexcept {
  // The innermost open step (the one opened last: no step opened since is
  // still open) holds steps now; those around it held it already.
  ts.outer_steps = ts.step_depth;
  const std::uint64_t now = read_ticks();
  push_record(ts, PhaseRecord{inner, now, now, ts.last_step, 0, ts.depth, kRecordHoldsSteps});
  return ts.last_step;
}

namespace {
std::atomic<std::uint64_t> g_next_steps_ignored{0};
}  // namespace

void next_step_in_other_step() noexcept {
  g_next_steps_ignored.fetch_add(1, std::memory_order_relaxed);
}

std::uint64_t next_steps_ignored() noexcept {
  return g_next_steps_ignored.load(std::memory_order_relaxed);
}

void defer_step(ThreadState& ts, OpenStep& open) noexcept {
  if (ts.deferred.active) {
    close_step(ts, open, read_ticks());
    return;
  }
  ts.deferred = open;
  open.active = false;
}

void close_deferred_step(ThreadState& ts, std::uint64_t end) noexcept {
  close_step(ts, ts.deferred, end);
}

void close_next_step(ThreadState& ts) noexcept {
  if (ts.ring == nullptr) return;
  if (ts.next_step.active) close_step(ts, ts.next_step, read_ticks(), kRecordUnendedStep);
  if (ts.deferred.active) close_step(ts, ts.deferred, read_ticks());  // the steps above it were never closed
}

}  // namespace detail
}  // namespace v1
}  // namespace stepscope

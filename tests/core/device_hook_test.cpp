// Device-slot hooks on the hot path, with a fake backend (no GPU needed):
// every scope's slot is closed by the end hook, and a record dropped because
// the ring was full hands its slot to the abandon hook — exactly once, so a
// backend never loses event slots to dropped records.
#include <stepscope/stepscope.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>

namespace {
std::atomic<std::uint64_t> g_begun{0}, g_ended{0}, g_abandoned{0};
std::atomic<bool> g_give_slots{true};

std::uint16_t fake_begin(const stepscope::detail::PhaseSite*) noexcept {
  if (!g_give_slots.load(std::memory_order_relaxed)) return 0;
  g_begun.fetch_add(1, std::memory_order_relaxed);
  return 7;
}
void fake_end(std::uint16_t slot) noexcept {
  if (slot == 7) g_ended.fetch_add(1, std::memory_order_relaxed);
}
void fake_abandon(std::uint16_t slot) noexcept {
  if (slot == 7) g_abandoned.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

TEST_CASE("a dropped record gives its device slot back through the abandon hook", "[runtime][device]") {
  setenv("STEPSCOPE_QUIET", "1", 1);
  setenv("STEPSCOPE_CUDA", "0", 1);
  setenv("STEPSCOPE_OUT", "device_hook_test-report.json", 1);
  setenv("STEPSCOPE_RING_RECORDS", "64", 1);   // smallest ring: drops are certain
  setenv("STEPSCOPE_INTERVAL_MS", "1000", 1);  // the collector drains rarely
  REQUIRE(stepscope::enabled());
  using namespace stepscope::detail;
  g_device_begin.store(&fake_begin);
  g_device_end.store(&fake_end);
  g_device_abandon.store(&fake_abandon);

  const stepscope::Report before = stepscope::snapshot();  // empties the ring
  constexpr int kSteps = 5000;                             // 15,000 records into a 64-record ring
  for (int i = 0; i < kSteps; ++i) {
    STEPSCOPE_STEP();
    { STEPSCOPE_PHASE("data"); }
    { STEPSCOPE_PHASE("forward"); }
  }
  const stepscope::Report after = stepscope::snapshot();
  const std::uint64_t dropped = after.dropped_records - before.dropped_records;
  CHECK(g_begun.load() == 3u * kSteps);
  CHECK(g_ended.load() == g_begun.load());
  REQUIRE(dropped > 0);
  CHECK(g_abandoned.load() == dropped);

  // Scopes that got no slot hand nothing back, even when dropped.
  g_give_slots.store(false);
  const std::uint64_t abandoned_so_far = g_abandoned.load();
  const stepscope::Report start = stepscope::snapshot();
  for (int i = 0; i < kSteps; ++i) {
    STEPSCOPE_STEP();
    { STEPSCOPE_PHASE("data"); }
  }
  const stepscope::Report end = stepscope::snapshot();
  CHECK(end.dropped_records > start.dropped_records);
  CHECK(g_abandoned.load() == abandoned_so_far);

  g_device_begin.store(nullptr);
  g_device_end.store(nullptr);
  g_device_abandon.store(nullptr);
}

// ThreadRing: order, drops when full, and conservation across threads.
#include <stepscope/ring.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <thread>
#include <vector>

using stepscope::detail::PhaseRecord;
using stepscope::detail::ThreadRing;

namespace {
PhaseRecord make(std::uint64_t seq) {
  return PhaseRecord{nullptr, seq, seq + 1, 0, 0, 0, 0};
}
}  // namespace

TEST_CASE("ring keeps push order and frees slots on drain", "[ring]") {
  std::vector<PhaseRecord> storage(8);
  ThreadRing ring(storage.data(), 8);
  for (std::uint64_t i = 0; i < 5; ++i) REQUIRE(ring.try_push(make(i)));
  std::vector<std::uint64_t> seen;
  REQUIRE(ring.drain([&](const PhaseRecord& r) { seen.push_back(r.start_ticks); }, 3) == 3);
  REQUIRE(ring.drain([&](const PhaseRecord& r) { seen.push_back(r.start_ticks); }) == 2);
  REQUIRE(seen == std::vector<std::uint64_t>{0, 1, 2, 3, 4});
  REQUIRE(ring.pushed() == 5);
  REQUIRE(ring.consumed() == 5);
}

TEST_CASE("a full ring drops the record and counts it", "[ring]") {
  std::vector<PhaseRecord> storage(4);
  ThreadRing ring(storage.data(), 4);
  for (std::uint64_t i = 0; i < 4; ++i) REQUIRE(ring.try_push(make(i)));
  REQUIRE_FALSE(ring.try_push(make(99)));
  REQUIRE_FALSE(ring.try_push(make(100)));
  REQUIRE(ring.dropped() == 2);
  std::vector<std::uint64_t> seen;
  ring.drain([&](const PhaseRecord& r) { seen.push_back(r.start_ticks); });
  REQUIRE(seen == std::vector<std::uint64_t>{0, 1, 2, 3});  // the dropped ones never appear
  REQUIRE(ring.try_push(make(5)));                          // space again after the drain
}

namespace {
// One producer pushes 2M records into a 1024-slot ring while the consumer
// drains it; `drain(ring, visit)` drains once, calling visit per record, and
// returns how many it took. Every accepted record must arrive exactly once, in
// order, untorn, and accepted + dropped must equal what was pushed.
template <typename Drain>
void check_concurrent_conservation(Drain drain) {
  constexpr std::uint64_t kRecords = 2'000'000;
  std::vector<PhaseRecord> storage(1024);
  ThreadRing ring(storage.data(), 1024);
  std::atomic<bool> done{false};
  std::uint64_t accepted = 0;
  std::thread producer([&] {
    for (std::uint64_t i = 0; i < kRecords; ++i)
      if (ring.try_push(make(i))) ++accepted;
    done.store(true, std::memory_order_release);
  });
  std::uint64_t received = 0, last = 0;
  bool ordered = true, first = true;
  auto visit = [&](const PhaseRecord& r) {
    if (!first && r.start_ticks <= last) ordered = false;
    if (r.end_ticks != r.start_ticks + 1) ordered = false;  // no torn records
    first = false;
    last = r.start_ticks;
    ++received;
  };
  while (!done.load(std::memory_order_acquire)) drain(ring, visit);
  producer.join();
  while (drain(ring, visit) > 0) {
  }
  REQUIRE(ordered);
  REQUIRE(received == accepted);
  REQUIRE(accepted + ring.dropped() == kRecords);  // conservation
}
}  // namespace

TEST_CASE("concurrent producer and consumer: every record arrives exactly once, in order", "[ring][concurrency]") {
  check_concurrent_conservation([](ThreadRing& ring, auto& visit) { return ring.drain(visit); });
}

TEST_CASE("drain_batches hands out contiguous runs in push order, split once at the wrap", "[ring]") {
  std::vector<PhaseRecord> storage(8);
  ThreadRing ring(storage.data(), 8);
  std::vector<std::uint64_t> seen;
  std::vector<std::size_t> runs;
  auto take = [&](const PhaseRecord* first, std::size_t count) {
    REQUIRE(count > 0);
    runs.push_back(count);
    for (std::size_t i = 0; i < count; ++i) seen.push_back(first[i].start_ticks);
  };
  for (std::uint64_t i = 0; i < 6; ++i) REQUIRE(ring.try_push(make(i)));
  REQUIRE(ring.drain_batches(take, 4) == 4);  // slots 0..3
  REQUIRE(ring.drain_batches(take) == 2);     // slots 4, 5
  REQUIRE(runs == std::vector<std::size_t>{4, 2});
  for (std::uint64_t i = 6; i < 12; ++i) REQUIRE(ring.try_push(make(i)));  // slots 6, 7, 0..3
  runs.clear();
  REQUIRE(ring.drain_batches(take) == 6);  // 6, 7, then 0..3
  REQUIRE(runs == std::vector<std::size_t>{2, 4});
  REQUIRE(seen == std::vector<std::uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  runs.clear();
  REQUIRE(ring.drain_batches(take) == 0);  // nothing: fn is not called
  REQUIRE(runs.empty());
  REQUIRE(ring.consumed() == 12);
  REQUIRE(ring.try_push(make(12)));  // all slots free again
}

TEST_CASE("concurrent producer and batch consumer: every record exactly once, in order", "[ring][concurrency]") {
  check_concurrent_conservation([](ThreadRing& ring, auto& visit) {
    return ring.drain_batches(
        [&](const PhaseRecord* records, std::size_t count) {
          for (std::size_t i = 0; i < count; ++i) visit(records[i]);
        },
        300);
  });
}

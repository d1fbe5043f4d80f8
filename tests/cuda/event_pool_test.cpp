// Event-slot pool (src/cuda/event_pool.hpp) without a GPU: fake event
// handles, slot ids, exhaustion, block reuse after thread exit, and a
// two-thread run proving every slot taken is given back exactly once.
#include "cuda/event_pool.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <set>
#include <thread>
#include <vector>

using namespace stepscope::detail::cuda;

namespace {

struct FakeEvents {
  std::atomic<int> created{0}, destroyed{0};
  int fail_after = -1;  // create fails once this many pairs exist
};

bool fake_create(void* context, int, void** begin, void** end) noexcept {
  auto* f = static_cast<FakeEvents*>(context);
  if (f->fail_after >= 0 && f->created.load() >= f->fail_after) return false;
  const int n = f->created.fetch_add(1) + 1;
  *begin = reinterpret_cast<void*>(static_cast<std::uintptr_t>(2 * n));
  *end = reinterpret_cast<void*>(static_cast<std::uintptr_t>(2 * n + 1));
  return true;
}
void fake_destroy(void* context, void*, void*) noexcept {
  static_cast<FakeEvents*>(context)->destroyed.fetch_add(1);
}

}  // namespace

TEST_CASE("a block hands out distinct 1-based slot ids and counts exhaustion", "[cuda][pool]") {
  FakeEvents fake;
  EventPool pool(fake_create, fake_destroy, &fake);
  SlotBlock* block = pool.acquire_block(0);
  REQUIRE(block != nullptr);
  CHECK(fake.created == static_cast<int>(kBlockSlots));
  std::set<std::uint16_t> ids;
  for (std::uint32_t i = 0; i < kBlockSlots; ++i) {
    const std::uint16_t id = block->take();
    REQUIRE(id != 0);
    CHECK(id != kSlotNvtxOnly);
    CHECK(pool.slot(id) == &block->slots[(id - 1u) % kBlockSlots]);
    ids.insert(id);
  }
  CHECK(ids.size() == kBlockSlots);
  CHECK(block->take() == 0);  // exhausted: the phase gets no device time
  CHECK(block->take() == 0);
  CHECK(pool.exhausted() == 2);
  pool.give_back(*ids.begin());
  CHECK(block->take() == *ids.begin());
  CHECK(pool.slot(0) == nullptr);
  CHECK(pool.slot(kSlotNvtxOnly) == nullptr);
}

TEST_CASE("each thread gets its own block; an orphaned block is reused once all its slots are back", "[cuda][pool]") {
  FakeEvents fake;
  EventPool pool(fake_create, fake_destroy, &fake);
  SlotBlock* a = pool.acquire_block(0);
  SlotBlock* b = pool.acquire_block(0);
  REQUIRE((a != nullptr && b != nullptr && a != b));
  const std::uint16_t from_b = b->take();
  CHECK(pool.block_of(from_b) == b);
  CHECK((from_b - 1u) / kBlockSlots == 1u);

  pool.release_block(b);  // b's thread exited with one slot outstanding
  pool.reclaim();
  SlotBlock* c = pool.acquire_block(0);
  CHECK(c != b);  // not reusable yet: a slot is still pending
  pool.give_back(from_b);
  pool.reclaim();
  CHECK(pool.acquire_block(1) != b);  // other device: not reused
  CHECK(pool.acquire_block(0) == b);  // same device, all slots back
  CHECK(pool.blocks() == 4);
}

TEST_CASE("event creation failure gives no block and leaks no events", "[cuda][pool]") {
  FakeEvents fake;
  fake.fail_after = 10;
  EventPool pool(fake_create, fake_destroy, &fake);
  CHECK(pool.acquire_block(0) == nullptr);
  CHECK(fake.destroyed == 10);
  CHECK(pool.blocks() == 0);
}

TEST_CASE("the pool stops at its block limit", "[cuda][pool]") {
  FakeEvents fake;
  EventPool pool(fake_create, fake_destroy, &fake);
  for (std::uint32_t i = 0; i < kMaxBlocks; ++i) REQUIRE(pool.acquire_block(0) != nullptr);
  CHECK(pool.acquire_block(0) == nullptr);
  const std::uint16_t last = pool.block_of(static_cast<std::uint16_t>(kMaxBlocks * kBlockSlots))->take();
  CHECK(last != 0);
  CHECK(last < kSlotNvtxOnly);
}

TEST_CASE("training thread takes (and drops some), collector gives back: every slot returns exactly once",
          "[cuda][pool][concurrency]") {
  FakeEvents fake;
  EventPool pool(fake_create, fake_destroy, &fake);
  SlotBlock* block = pool.acquire_block(0);
  REQUIRE(block != nullptr);
  constexpr int kTakes = 200000;
  // Training thread -> collector: a simple SPSC hand-off of taken ids (stands
  // in for the PhaseRecord ring).
  std::vector<std::atomic<std::uint16_t>> channel(1024);
  for (auto& c : channel) c.store(0);
  std::atomic<bool> done{false};
  std::uint64_t taken = 0, exhausted = 0, dropped = 0;
  bool abandon_failed = false;
  std::thread producer([&] {
    std::size_t w = 0;
    for (int i = 0; i < kTakes; ++i) {
      const std::uint16_t id = block->take();
      if (id == 0) {
        ++exhausted;
        continue;
      }
      ++taken;
      Slot* s = pool.slot(id);
      s->state = kSlotBeginRecorded | kSlotEndRecorded;
      if (i % 3 == 0) {  // the record was dropped (ring full): the owner takes the slot back
        if (!pool.abandon(id, block)) abandon_failed = true;
        ++dropped;
        continue;
      }
      while (channel[w % channel.size()].load(std::memory_order_acquire) != 0) std::this_thread::yield();
      channel[w % channel.size()].store(id, std::memory_order_release);
      ++w;
    }
    done.store(true, std::memory_order_release);
  });
  std::uint64_t given = 0;
  std::vector<int> outstanding(kMaxBlocks * kBlockSlots + 1, 0);
  std::size_t r = 0;
  bool duplicate = false, bad_state = false;
  for (;;) {
    const std::uint16_t id = channel[r % channel.size()].load(std::memory_order_acquire);
    if (id == 0) {
      if (done.load(std::memory_order_acquire) && channel[r % channel.size()].load(std::memory_order_acquire) == 0)
        break;
      std::this_thread::yield();
      continue;
    }
    channel[r % channel.size()].store(0, std::memory_order_release);
    ++r;
    if (++outstanding[id] != 1) duplicate = true;
    if (pool.slot(id)->state != (kSlotBeginRecorded | kSlotEndRecorded)) bad_state = true;
    --outstanding[id];
    pool.give_back(id);
    ++given;
  }
  producer.join();
  CHECK_FALSE(duplicate);
  CHECK_FALSE(bad_state);
  CHECK_FALSE(abandon_failed);
  CHECK(dropped > 0);
  CHECK(pool.abandoned() == dropped);
  CHECK(taken == given + dropped);     // conservation
  CHECK(taken + exhausted == kTakes);  // every phase either timed or counted
  CHECK(pool.exhausted() == exhausted);
  CHECK(block->free_slots() == kBlockSlots);  // all back
}

TEST_CASE("a slot whose record was dropped goes back to its own thread, never leaks", "[cuda][pool]") {
  FakeEvents fake;
  EventPool pool(fake_create, fake_destroy, &fake);
  SlotBlock* a = pool.acquire_block(0);
  SlotBlock* b = pool.acquire_block(0);
  REQUIRE((a != nullptr && b != nullptr));
  const std::uint16_t id = a->take();
  REQUIRE(id != 0);
  CHECK(a->free_slots() == kBlockSlots - 1);
  CHECK_FALSE(pool.abandon(id, b));  // not b's slot: nothing changes
  CHECK(a->free_slots() == kBlockSlots - 1);
  CHECK_FALSE(pool.abandon(kSlotNvtxOnly, a));
  pool.slot(id)->state = kSlotBeginRecorded | kSlotEndRecorded;
  REQUIRE(pool.abandon(id, a));
  CHECK(pool.slot(id)->state == 0);
  CHECK(a->free_slots() == kBlockSlots);
  CHECK(pool.abandoned() == 1);
  CHECK(a->take() == id);  // the stashed slot is reused first

  // Every slot taken and dropped, again and again: the block never runs dry.
  std::vector<std::uint16_t> taken{id};
  for (std::uint32_t i = 1; i < kBlockSlots; ++i) taken.push_back(a->take());
  CHECK(a->take() == 0);
  for (std::uint16_t t : taken) REQUIRE(pool.abandon(t, a));
  std::set<std::uint16_t> again;
  for (std::uint32_t i = 0; i < kBlockSlots; ++i) again.insert(a->take());
  CHECK(again.size() == kBlockSlots);
  CHECK(again.count(0) == 0);
  CHECK(pool.exhausted() == 1);

  // An orphaned block with stashed slots is reusable once all are free.
  for (std::uint16_t t : again) REQUIRE(pool.abandon(t, a));
  pool.release_block(a);
  pool.reclaim();
  CHECK(pool.acquire_block(0) == a);
}

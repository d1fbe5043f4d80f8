// Pool of device-event slots for phase timing, without any CUDA call, so its
// logic is unit-tested on machines without a GPU (tests/cuda/event_pool_test.cpp).
//
//   EventPool pool(create_pair, destroy_pair, ctx);
//   SlotBlock* block = pool.acquire_block(device);   // training thread, once (cold)
//   std::uint16_t slot = block->take();              // hot: 0 when exhausted
//   ... record events into pool.slot(slot) ..., push the PhaseRecord
//   pool.give_back(slot);                            // collector, once resolved
//   pool.abandon(slot, block);                       // owner, when the record was dropped
//
// Each training thread owns one SlotBlock of kBlockSlots slots (an event pair
// each). The block's free list is a single-producer single-consumer ring of
// slot indices: the owning thread is the only consumer (take), the collector
// the only producer (give_back). A block holds exactly kBlockSlots slots and
// the ring has room for all of them, so give_back can never fail and the
// training thread never waits or locks.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace stepscope {
inline namespace v1 {
namespace detail::cuda {

// Slots per thread. A thread that runs ahead of the device by more than this
// many open or unresolved phases gets no device time for the extra phases
// (counted as pool exhaustion). 256 covers several steps of a typical
// training loop queued ahead of the GPU.
inline constexpr std::uint32_t kBlockSlots = 256;
// Blocks (threads with device timing at once). Slot ids are 1-based uint16
// values: block * kBlockSlots + index + 1 stays below kSlotNvtxOnly.
inline constexpr std::uint32_t kMaxBlocks = 255;
// A slot value the begin hook returns when the scope has no event pair but
// still needs its end hook (an NVTX range to close). Never a pool slot.
inline constexpr std::uint16_t kSlotNvtxOnly = 0xffff;
static_assert(kMaxBlocks * kBlockSlots < kSlotNvtxOnly, "slot ids fit in uint16 below the NVTX-only value");
static_assert((kBlockSlots & (kBlockSlots - 1)) == 0, "the free ring uses a mask");

enum SlotState : std::uint8_t {
  kSlotBeginRecorded = 1u << 0,
  kSlotEndRecorded = 1u << 1,
  kSlotCaptured = 1u << 2,      // the stream was capturing a CUDA graph: no events recorded
  kSlotRecordFailed = 1u << 3,  // cudaEventRecord failed (other device's stream, bad handle)
  kSlotNvtxOpen = 1u << 4,      // an NVTX range was pushed for this scope
};

// One phase occurrence's event pair. Written by the owning thread before it
// pushes the PhaseRecord, read by the collector after draining it: the ring's
// release/acquire orders the plain fields.
struct Slot {
  void* begin_event = nullptr;  // cudaEvent_t
  void* end_event = nullptr;
  void* stream = nullptr;  // cudaStream_t the pair was recorded on
  std::uint8_t state = 0;  // SlotState bits
};

struct SlotBlock {
  std::uint32_t index = 0;  // position in the pool; slot ids start at index*kBlockSlots+1
  int device = -1;          // CUDA device the events were created on
  std::array<Slot, kBlockSlots> slots{};

  // Owning thread only. A 1-based pool slot id, or 0 when every slot is in use.
  std::uint16_t take() noexcept {
    const std::uint32_t stashed = stash_count_.load(std::memory_order_relaxed);
    if (stashed != 0) {  // a slot whose record was dropped: reuse it first
      stash_count_.store(stashed - 1, std::memory_order_release);
      return static_cast<std::uint16_t>(index * kBlockSlots + stash_[stashed - 1] + 1);
    }
    const std::uint32_t head = free_head_.load(std::memory_order_relaxed);
    if (head == cached_tail_) {
      cached_tail_ = free_tail_.load(std::memory_order_acquire);
      if (head == cached_tail_) {
        // Single writer: load + store, no read-modify-write on the hot path.
        exhausted_.store(exhausted_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        return 0;
      }
    }
    const std::uint16_t local = free_[head & (kBlockSlots - 1)];
    free_head_.store(head + 1, std::memory_order_release);
    return static_cast<std::uint16_t>(index * kBlockSlots + local + 1);
  }

  // Collector only: a slot taken from this block is resolved and free again.
  void give_back_local(std::uint16_t local) noexcept {
    const std::uint32_t tail = free_tail_.load(std::memory_order_relaxed);
    free_[tail & (kBlockSlots - 1)] = local;
    free_tail_.store(tail + 1, std::memory_order_release);
  }

  // Owning thread only: a slot it took whose record was dropped (ring full).
  // The collector never sees that record, so the owner keeps the slot for its
  // next take(); its events may still be pending on the device, which is fine:
  // recording an event again supersedes the earlier record.
  void abandon_local(std::uint16_t local) noexcept {
    const std::uint32_t n = stash_count_.load(std::memory_order_relaxed);
    if (n >= kBlockSlots) return;  // cannot happen: each slot is taken at most once
    stash_[n] = local;
    stash_count_.store(n + 1, std::memory_order_release);
    abandoned_.store(abandoned_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

  // Slots currently free, in the ring or stashed (exact when neither side is running).
  std::uint32_t free_slots() const noexcept {
    return free_tail_.load(std::memory_order_acquire) - free_head_.load(std::memory_order_acquire) +
           stash_count_.load(std::memory_order_acquire);
  }
  std::uint64_t exhausted() const noexcept { return exhausted_.load(std::memory_order_relaxed); }
  std::uint64_t abandoned() const noexcept { return abandoned_.load(std::memory_order_relaxed); }

  // The owning thread exited: once every slot is back the block is reused.
  std::atomic<bool> orphaned{false};

  // Fills the free ring with every slot (construction, reuse).
  void reset_free_list() noexcept {
    for (std::uint32_t i = 0; i < kBlockSlots; ++i) free_[i] = static_cast<std::uint16_t>(i);
    free_head_.store(0, std::memory_order_relaxed);
    stash_count_.store(0, std::memory_order_relaxed);
    cached_tail_ = kBlockSlots;
    free_tail_.store(kBlockSlots, std::memory_order_release);
  }

 private:
  std::array<std::uint16_t, kBlockSlots> free_{};
  // Consumer (owning thread) line.
  alignas(64) std::atomic<std::uint32_t> free_head_{0};
  std::uint32_t cached_tail_ = 0;
  std::atomic<std::uint64_t> exhausted_{0};
  // Owner-only stash of slots of dropped records (atomic so the collector's
  // free_slots() may read the count).
  std::atomic<std::uint32_t> stash_count_{0};
  std::atomic<std::uint64_t> abandoned_{0};
  std::array<std::uint16_t, kBlockSlots> stash_{};
  // Producer (collector) line.
  alignas(64) std::atomic<std::uint32_t> free_tail_{0};
};

// Creates/destroys one event pair; the CUDA backend passes cudaEventCreate
// wrappers, tests pass fakes. create returns false when it cannot.
using CreatePairFn = bool (*)(void* context, int device, void** begin, void** end) noexcept;
using DestroyPairFn = void (*)(void* context, void* begin, void* end) noexcept;

class EventPool {
 public:
  EventPool(CreatePairFn create, DestroyPairFn destroy, void* context) noexcept
      : create_(create), destroy_(destroy), context_(context) {}
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  // Cold (a thread's first timed phase): a block of slots with their events
  // created on `device`, reusing a released block of the same device when
  // there is one. Null when the pool is full or event creation fails.
  SlotBlock* acquire_block(int device) noexcept {
    try {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = reusable_.begin(); it != reusable_.end(); ++it) {
        SlotBlock* b = *it;
        if (b->device != device) continue;
        reusable_.erase(it);
        b->orphaned.store(false, std::memory_order_relaxed);
        return b;
      }
      if (count_ >= kMaxBlocks) return nullptr;
      auto block = std::make_unique<SlotBlock>();
      block->index = count_;
      block->device = device;
      for (std::uint32_t i = 0; i < kBlockSlots; ++i) {
        Slot& s = block->slots[i];
        if (!create_(context_, device, &s.begin_event, &s.end_event)) {
          for (std::uint32_t j = 0; j < i; ++j)
            destroy_(context_, block->slots[j].begin_event, block->slots[j].end_event);
          return nullptr;
        }
      }
      block->reset_free_list();
      SlotBlock* raw = block.get();
      owned_.push_back(std::move(block));
      blocks_[count_].store(raw, std::memory_order_release);
      ++count_;
      return raw;
    } catch (...) {
      return nullptr;
    }
  }

  // Thread exit: the block goes back to the pool once its slots are resolved.
  void release_block(SlotBlock* block) noexcept {
    if (block != nullptr) block->orphaned.store(true, std::memory_order_release);
  }

  // Collector: the slot for an id taken by some thread (null for ids that are
  // not pool slots).
  Slot* slot(std::uint16_t id) noexcept {
    SlotBlock* b = block_of(id);
    return b != nullptr ? &b->slots[(id - 1u) % kBlockSlots] : nullptr;
  }
  SlotBlock* block_of(std::uint16_t id) noexcept {
    if (id == 0 || id == kSlotNvtxOnly) return nullptr;
    const std::uint32_t b = (id - 1u) / kBlockSlots;
    return b < kMaxBlocks ? blocks_[b].load(std::memory_order_acquire) : nullptr;
  }

  // Collector: the slot is resolved (or abandoned); its events are reusable.
  void give_back(std::uint16_t id) noexcept {
    SlotBlock* b = block_of(id);
    if (b == nullptr) return;
    b->slots[(id - 1u) % kBlockSlots].state = 0;
    b->give_back_local(static_cast<std::uint16_t>((id - 1u) % kBlockSlots));
  }

  // Owning thread: `id` (taken from `owner`) belongs to a dropped record. False
  // when the id is not from `owner` (then nothing changes).
  bool abandon(std::uint16_t id, SlotBlock* owner) noexcept {
    SlotBlock* b = block_of(id);
    if (b == nullptr || b != owner) return false;
    b->slots[(id - 1u) % kBlockSlots].state = 0;
    b->abandon_local(static_cast<std::uint16_t>((id - 1u) % kBlockSlots));
    return true;
  }

  // Collector, every tick: orphaned blocks whose slots are all back become
  // reusable by new threads, so thread churn does not exhaust the pool.
  void reclaim() noexcept {
    try {
      std::lock_guard<std::mutex> lock(mutex_);
      for (std::uint32_t i = 0; i < count_; ++i) {
        SlotBlock* b = blocks_[i].load(std::memory_order_relaxed);
        if (!b->orphaned.load(std::memory_order_acquire) || b->free_slots() != kBlockSlots) continue;
        bool listed = false;
        for (SlotBlock* r : reusable_) listed = listed || r == b;
        if (!listed) reusable_.push_back(b);
      }
    } catch (...) {
    }
  }

  // Sum of exhaustion counts over every block (phases with no device time
  // because their thread had no free slot).
  std::uint64_t exhausted() const noexcept {
    std::uint64_t total = 0;
    for (std::uint32_t i = 0; i < kMaxBlocks; ++i)
      if (const SlotBlock* b = blocks_[i].load(std::memory_order_acquire)) total += b->exhausted();
    return total;
  }
  std::uint64_t abandoned() const noexcept {
    std::uint64_t total = 0;
    for (std::uint32_t i = 0; i < kMaxBlocks; ++i)
      if (const SlotBlock* b = blocks_[i].load(std::memory_order_acquire)) total += b->abandoned();
    return total;
  }
  std::uint32_t blocks() const noexcept {
    std::uint32_t n = 0;
    for (std::uint32_t i = 0; i < kMaxBlocks; ++i) n += blocks_[i].load(std::memory_order_acquire) != nullptr;
    return n;
  }

 private:
  CreatePairFn create_;
  DestroyPairFn destroy_;
  void* context_;
  std::mutex mutex_;  // block creation and reuse only (cold)
  std::uint32_t count_ = 0;
  std::array<std::atomic<SlotBlock*>, kMaxBlocks> blocks_{};
  std::vector<std::unique_ptr<SlotBlock>> owned_;
  std::vector<SlotBlock*> reusable_;
};

}  // namespace detail::cuda
}  // namespace v1
}  // namespace stepscope

#include "core/registry.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <new>

namespace stepscope {
inline namespace v1 {
namespace detail {

namespace {

constexpr std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}
// Records start on their own cache line after the entry.
constexpr std::size_t kRecordsOffset = round_up(sizeof(RingEntry), kCacheLine);

}  // namespace

ThreadSchedTimes own_sched_times() noexcept {
  // open, read and close only, digits parsed by hand: also called in a
  // child right after fork(), where only async-signal-safe calls belong.
  const int fd = ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  char buf[128];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  return parse_sched_times(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
}

ThreadSchedTimes parse_sched_times(const char* text, std::size_t size) noexcept {
  ThreadSchedTimes t;
  const char* p = text;
  const char* const end = text + size;
  const auto number = [&p, end](std::uint64_t& out) {
    while (p < end && *p == ' ') ++p;
    const char* const first = p;
    out = 0;
    for (; p < end && *p >= '0' && *p <= '9'; ++p) out = out * 10 + static_cast<std::uint64_t>(*p - '0');
    return p > first;
  };
  t.known = number(t.run_ns) && number(t.wait_ns);
  return t;
}

ThreadRegistry::~ThreadRegistry() {
  RingEntry* e = head_;
  while (e != nullptr) {
    RingEntry* next = e->next;
    const std::size_t bytes = e->bytes;
    e->~RingEntry();
    ::munmap(e, bytes);
    e = next;
  }
}

ThreadRing* ThreadRegistry::add(std::int64_t os_tid, ThreadSchedTimes at_start) noexcept {
  std::uint32_t capacity = capacity_;
  bool startup_ring = false;
  if (startup_.load(std::memory_order_relaxed) && capacity_ < kStartupRingRecords) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (startup_rings_ < kStartupRings) {
      ++startup_rings_;
      startup_ring = true;
      capacity = kStartupRingRecords;
    }
  }
  const std::size_t bytes = kRecordsOffset + sizeof(PhaseRecord) * std::size_t{capacity};
  void* block = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (block == MAP_FAILED) {
    if (startup_ring) {
      std::lock_guard<std::mutex> lock(mutex_);
      --startup_rings_;
    }
    return nullptr;
  }
  auto* records = reinterpret_cast<PhaseRecord*>(static_cast<char*>(block) + kRecordsOffset);
  auto* entry = new (block) RingEntry(records, capacity, os_tid, bytes, at_start);
  std::lock_guard<std::mutex> lock(mutex_);
  entry->prev = tail_;
  (tail_ != nullptr ? tail_->next : head_) = entry;
  tail_ = entry;
  ++size_;
  return &entry->ring;
}

void ThreadRegistry::retire(ThreadRing* ring) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  for (RingEntry* e = head_; e != nullptr; e = e->next)
    if (&e->ring == ring) e->retiring.store(true, std::memory_order_release);
}

void ThreadRegistry::remove(RingEntry* entry) noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    (entry->prev != nullptr ? entry->prev->next : head_) = entry->next;
    (entry->next != nullptr ? entry->next->prev : tail_) = entry->prev;
    --size_;
    removed_dropped_ += entry->ring.dropped();
  }
  const std::size_t bytes = entry->bytes;
  entry->~RingEntry();
  ::munmap(entry, bytes);
}

std::uint64_t ThreadRegistry::dropped() const noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  std::uint64_t dropped = removed_dropped_;
  for (const RingEntry* e = head_; e != nullptr; e = e->next) dropped += e->ring.dropped();
  return dropped;
}

std::size_t ThreadRegistry::size() const noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  return size_;
}

}  // namespace detail
}  // namespace v1
}  // namespace stepscope

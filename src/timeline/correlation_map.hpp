// A map from correlation id (or any int64 key) to a small value, for the
// joins the importer and the analyses do between host and device events.
// Open addressing with linear probing in flat arrays sized up front: no
// allocation per entry, which makes it several times cheaper than
// std::unordered_map on the tens of thousands of events of a trace.
// Internal to the library.
//
//   CorrelationMap<std::int64_t> start_of(host_ops.size());  // expected keys
//   start_of[h.correlation] = h.start_ns;                     // inserts or overwrites
//   if (const std::int64_t* start = start_of.find(d.correlation)) ...
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace stepscope {
inline namespace v1 {
namespace detail {

template <typename Value>
class CorrelationMap {
 public:
  // Sized for `expected_keys` without growing; it grows past that.
  explicit CorrelationMap(std::size_t expected_keys) { reset(expected_keys); }

  // The value for `key`, value-initialised when the key is new.
  Value& operator[](std::int64_t key) {
    std::size_t slot = slot_of(key);
    while (used_[slot] != 0) {
      if (keys_[slot] == key) return values_[slot];
      slot = (slot + 1) & mask_;
    }
    // At most half full, so that probes stay short and always end.
    if (2 * (size_ + 1) > used_.size()) {
      grow();
      return (*this)[key];
    }
    used_[slot] = 1;
    keys_[slot] = key;
    ++size_;
    return values_[slot];
  }

  const Value* find(std::int64_t key) const {
    std::size_t slot = slot_of(key);
    while (used_[slot] != 0) {
      if (keys_[slot] == key) return &values_[slot];
      slot = (slot + 1) & mask_;
    }
    return nullptr;
  }
  Value* find(std::int64_t key) { return const_cast<Value*>(static_cast<const CorrelationMap&>(*this).find(key)); }
  bool contains(std::int64_t key) const { return find(key) != nullptr; }
  std::size_t size() const { return size_; }

 private:
  // Fibonacci hashing: correlation ids are mostly consecutive integers, which
  // the multiply spreads over the table's high bits.
  std::size_t slot_of(std::int64_t key) const {
    return static_cast<std::size_t>((static_cast<std::uint64_t>(key) * 0x9E3779B97F4A7C15ull) >> 32) & mask_;
  }

  void reset(std::size_t expected_keys) {
    std::size_t capacity = 16;
    while (capacity < 2 * expected_keys) capacity *= 2;
    mask_ = capacity - 1;
    size_ = 0;
    keys_.assign(capacity, 0);
    values_.assign(capacity, Value());
    used_.assign(capacity, 0);
  }

  void grow() {
    std::vector<std::int64_t> keys = std::move(keys_);
    std::vector<Value> values = std::move(values_);
    std::vector<unsigned char> used = std::move(used_);
    reset(used.size());  // twice the keys it holds now
    for (std::size_t i = 0; i < used.size(); ++i)
      if (used[i] != 0) (*this)[keys[i]] = std::move(values[i]);
  }

  std::vector<std::int64_t> keys_;
  std::vector<Value> values_;
  std::vector<unsigned char> used_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

}  // namespace detail
}  // namespace v1
}  // namespace stepscope

// Run-time-named sites (<stepscope/site.hpp>): interning of names and of
// (name, kind, is_step) sites into fixed tables in static storage.
//
// Static storage, not the heap: records point at sites for as long as the
// collector may read them (after the caller's string is gone, after its
// thread), and interning must not touch the application's allocator (see
// registry.hpp). The tables are zero-initialised BSS; pages become resident
// only as names fill them. Everything here is cold: one mutex, a hash probe.
#include "core/registry.hpp"

#include <stepscope/phase.hpp>
#include <stepscope/site.hpp>

#include <array>
#include <atomic>
#include <cstring>
#include <mutex>

namespace stepscope {
inline namespace v1 {
namespace detail {
namespace {

constexpr std::size_t kKinds = 5;  // PhaseKind: input, compute, memory, communication, other
// Open-addressing tables, at least twice the entries they hold, so a probe
// ends quickly; a power of two.
constexpr std::size_t kTextSlots = 2 * kMaxRuntimeSites;
constexpr std::size_t kSiteSlots = 2 * kMaxRuntimeSites;

constexpr const char* kOverflowName = "(other run-time names)";
constexpr std::array<PhaseSite, 2 * kKinds> kOverflowSites{{
    {kOverflowName, PhaseKind::input, false, kRuntimeSiteFile, 0},
    {kOverflowName, PhaseKind::compute, false, kRuntimeSiteFile, 0},
    {kOverflowName, PhaseKind::memory, false, kRuntimeSiteFile, 0},
    {kOverflowName, PhaseKind::communication, false, kRuntimeSiteFile, 0},
    {kOverflowName, PhaseKind::other, false, kRuntimeSiteFile, 0},
    {kOverflowName, PhaseKind::input, true, kRuntimeSiteFile, 0},
    {kOverflowName, PhaseKind::compute, true, kRuntimeSiteFile, 0},
    {kOverflowName, PhaseKind::memory, true, kRuntimeSiteFile, 0},
    {kOverflowName, PhaseKind::communication, true, kRuntimeSiteFile, 0},
    {kOverflowName, PhaseKind::other, true, kRuntimeSiteFile, 0},
}};

struct SiteStore {
  std::mutex mutex;  // guards everything below but the atomics
  char text[kMaxRuntimeSiteNameBytes];
  std::size_t text_used;
  std::size_t text_count;                // distinct texts held
  std::uint32_t text_slots[kTextSlots];  // offset + 1 into text; 0: empty
  PhaseSite sites[kMaxRuntimeSites];
  std::uint32_t site_count;
  std::uint32_t site_slots[kSiteSlots];  // index + 1 into sites; 0: empty
  std::atomic<std::uint64_t> overflow;
  std::atomic<std::uint64_t> truncated;
};

SiteStore& store() {
  static SiteStore s;  // every member zero- or constant-initialised: no allocation, no constructor work
  return s;
}

// FNV-1a, 64 bit: names are short, any decent spread will do.
std::uint64_t hash_bytes(std::string_view text, std::uint64_t seed = 14695981039346656037ull) {
  std::uint64_t h = seed;
  for (const char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

// Under the store's lock. Null when the text store or its table is full.
const char* intern_text_locked(SiteStore& s, std::string_view text) {
  std::size_t slot = hash_bytes(text) & (kTextSlots - 1);
  for (std::size_t probes = 0; probes < kTextSlots; ++probes, slot = (slot + 1) & (kTextSlots - 1)) {
    const std::uint32_t entry = s.text_slots[slot];
    if (entry == 0) break;
    const char* existing = s.text + (entry - 1);
    if (std::strlen(existing) == text.size() && std::memcmp(existing, text.data(), text.size()) == 0) return existing;
  }
  // Half full is as full as the table may get (probes stay short), and the
  // text needs room for its terminating NUL.
  if (s.text_count >= kTextSlots / 2 || s.text_slots[slot] != 0) return nullptr;
  if (s.text_used + text.size() + 1 > kMaxRuntimeSiteNameBytes) return nullptr;
  char* copy = s.text + s.text_used;
  std::memcpy(copy, text.data(), text.size());
  copy[text.size()] = '\0';
  s.text_slots[slot] = static_cast<std::uint32_t>(s.text_used + 1);
  s.text_used += text.size() + 1;
  ++s.text_count;
  return copy;
}

std::string_view clamp_length(std::string_view name) {
  if (name.size() <= kMaxRuntimeSiteNameLength) return name;
  store().truncated.fetch_add(1, std::memory_order_relaxed);
  return name.substr(0, kMaxRuntimeSiteNameLength);
}

const PhaseSite* overflow_site(PhaseKind kind, bool is_step) {
  store().overflow.fetch_add(1, std::memory_order_relaxed);
  std::size_t k = static_cast<std::size_t>(kind);
  if (k >= kKinds) k = kKinds - 1;
  return &kOverflowSites[(is_step ? kKinds : 0) + k];
}

}  // namespace

const PhaseSite* intern_site(std::string_view name, PhaseKind kind, bool is_step) noexcept {
  if (static_cast<std::size_t>(kind) >= kKinds) kind = PhaseKind::other;
  name = clamp_length(name);
  SiteStore& s = store();
  try {
    std::lock_guard<std::mutex> lock(s.mutex);
    // Names are interned first, so a site is found by the name's address.
    const char* interned = intern_text_locked(s, name);
    if (interned == nullptr) return overflow_site(kind, is_step);
    const std::uint64_t key =
        reinterpret_cast<std::uintptr_t>(interned) * 31u + static_cast<unsigned>(kind) * 2u + (is_step ? 1u : 0u);
    std::size_t slot = hash_bytes(std::string_view(reinterpret_cast<const char*>(&key), sizeof key)) & (kSiteSlots - 1);
    for (std::size_t probes = 0; probes < kSiteSlots; ++probes, slot = (slot + 1) & (kSiteSlots - 1)) {
      const std::uint32_t entry = s.site_slots[slot];
      if (entry == 0) break;
      const PhaseSite& site = s.sites[entry - 1];
      if (site.name == interned && site.kind == kind && site.is_step == is_step) return &site;
    }
    if (s.site_count >= kMaxRuntimeSites || s.site_slots[slot] != 0) return overflow_site(kind, is_step);
    PhaseSite& site = s.sites[s.site_count];
    site = PhaseSite{interned, kind, is_step, kRuntimeSiteFile, 0};
    s.site_slots[slot] = ++s.site_count;
    return &site;
  } catch (...) {
    return overflow_site(kind, is_step);
  }
}

void lock_sites_for_fork() noexcept {
  store().mutex.lock();
}
void unlock_sites_after_fork() noexcept {
  store().mutex.unlock();
}

RuntimeSiteCounts runtime_site_counts() noexcept {
  SiteStore& s = store();
  RuntimeSiteCounts counts;
  try {
    std::lock_guard<std::mutex> lock(s.mutex);
    counts.sites = s.site_count;
  } catch (...) {
  }
  counts.overflow = s.overflow.load(std::memory_order_relaxed);
  counts.truncated = s.truncated.load(std::memory_order_relaxed);
  return counts;
}

}  // namespace detail

Site site(std::string_view name) noexcept {
  // default_phase_kind reads a NUL-terminated name; names longer than a site
  // name may be are cut anyway.
  char buffer[detail::kMaxRuntimeSiteNameLength + 1];
  const std::size_t n =
      name.size() < detail::kMaxRuntimeSiteNameLength ? name.size() : detail::kMaxRuntimeSiteNameLength;
  std::memcpy(buffer, name.data(), n);
  buffer[n] = '\0';
  return Site(detail::intern_site(name, default_phase_kind(buffer), false));
}

}  // namespace v1
}  // namespace stepscope

// stepscope/site.hpp — phases whose names are known only at run time.
//
//   // once, cold (a lock and a hash lookup; the name is copied):
//   const stepscope::Site layer = stepscope::site("layer." + std::to_string(i));
//   // then on the hot path, exactly as STEPSCOPE_PHASE does:
//   { stepscope::ScopedPhase p{layer}; run_layer(i); }
//
// STEPSCOPE_PHASE needs a string literal: its call site is a static constexpr
// PhaseSite. Per-module hooks ("layer.17.attention"), the Python module and
// C++ code that names phases from data need a site built at run time. site()
// interns (name, kind): the same pair always returns the same site, so the
// report has one row per name however often it is asked for. The scope itself
// is unchanged: ScopedPhase / ScopedStep take the site's address, and the hot
// path writes only that pointer.
//
// Memory is bounded: at most kMaxRuntimeSites distinct sites and
// kMaxRuntimeSiteNameBytes of name text per process, in static storage (no
// heap, so interning leaves the application's allocator as it was — see
// src/core/registry.hpp for why that matters). Past the bound, site() returns
// the shared site "(other run-time names)" of that kind and counts the call;
// the report's runtime_sites.overflow says how many (and a warning says so).
// Names longer than kMaxRuntimeSiteNameLength bytes are cut to that length.
#pragma once

#include <stepscope/export.hpp>
#include <stepscope/report.hpp>
#include <stepscope/ring.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace stepscope {
inline namespace v1 {
namespace detail {

inline constexpr std::size_t kMaxRuntimeSites = 4096;
inline constexpr std::size_t kMaxRuntimeSiteNameBytes = 256 * 1024;
inline constexpr std::size_t kMaxRuntimeSiteNameLength = 255;

// Where a run-time site says it was defined: it has no single file:line.
inline constexpr const char* kRuntimeSiteFile = "(run time)";

// What a default-constructed Site times: never null on the hot path.
inline constexpr PhaseSite kUnnamedRuntimeSite{"(unnamed)", PhaseKind::other, false, kRuntimeSiteFile, 0};

// Cold: the interned site of (name, kind, is_step). Thread-safe, never
// throws, never allocates; past the bound, the kind's overflow site.
STEPSCOPE_API STEPSCOPE_DETAIL_NOINLINE const PhaseSite* intern_site(std::string_view name, PhaseKind kind,
                                                                     bool is_step) noexcept;

// Counts for the report (runtime_sites).
struct RuntimeSiteCounts {
  std::uint64_t sites = 0;      // distinct sites interned
  std::uint64_t overflow = 0;   // site() calls answered with an overflow site
  std::uint64_t truncated = 0;  // names cut to kMaxRuntimeSiteNameLength
};
STEPSCOPE_API RuntimeSiteCounts runtime_site_counts() noexcept;

}  // namespace detail

// A phase site named at run time. Cheap to copy (one pointer); converts to
// the site pointer ScopedPhase and ScopedStep take, so `ScopedPhase p{site}`
// is the same hot path as STEPSCOPE_PHASE.
class Site {
 public:
  constexpr Site() noexcept = default;
  constexpr explicit Site(const detail::PhaseSite* site) noexcept
      : site_(site != nullptr ? site : &detail::kUnnamedRuntimeSite) {}
  constexpr operator const detail::PhaseSite*() const noexcept { return site_; }
  constexpr const detail::PhaseSite* get() const noexcept { return site_; }
  const char* name() const noexcept { return site_->name; }
  PhaseKind kind() const noexcept { return site_->kind; }
  bool is_step() const noexcept { return site_->is_step; }
  friend constexpr bool operator==(Site a, Site b) noexcept { return a.site_ == b.site_; }
  friend constexpr bool operator!=(Site a, Site b) noexcept { return a.site_ != b.site_; }

 private:
  const detail::PhaseSite* site_ = &detail::kUnnamedRuntimeSite;
};

// The site of a phase called `name` of `kind` (cold; see the top of the file).
inline Site site(std::string_view name, PhaseKind kind) noexcept {
  return Site(detail::intern_site(name, kind, false));
}
// The kind from the name, as STEPSCOPE_PHASE does (data → input, forward → compute, ...).
STEPSCOPE_API Site site(std::string_view name) noexcept;
// A step site (for ScopedStep) named at run time; "step" is the usual name.
inline Site step_site(std::string_view name = "step") noexcept {
  return Site(detail::intern_site(name, PhaseKind::other, true));
}

}  // namespace v1
}  // namespace stepscope

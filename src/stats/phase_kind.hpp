// The phase kinds as one table: their order, their names, and a container
// indexed by kind. The analyzer, the JSON report and the HTML page all list,
// name and index kinds through this header, so the names exist once
// (docs/report-schema.md: phases[].kind, the steps.breakdown parts).
//
//   KindArray<double> ms = kind_parts(report.steps.breakdown);
//   for (PhaseKind k : kPhaseKinds) line(phase_kind_name(k), ms[k]);
#pragma once

#include <stepscope/report.hpp>

#include <array>
#include <cstddef>
#include <vector>

namespace stepscope {
inline namespace v1 {
namespace detail {

inline constexpr std::size_t kPhaseKindCount = 5;

// Report order: the breakdown's parts, and the charts' stacking order (bottom to top).
inline constexpr std::array<PhaseKind, kPhaseKindCount> kPhaseKinds = {
    PhaseKind::input, PhaseKind::compute, PhaseKind::memory, PhaseKind::communication, PhaseKind::other};

// The names the report uses, indexed by kind.
inline constexpr std::array<const char*, kPhaseKindCount> kPhaseKindNames = {"input", "compute", "memory",
                                                                             "communication", "other"};

// A kind's index in the tables above; a value outside the enum (a corrupt
// record) counts as `other`, as everywhere else in the report.
constexpr std::size_t kind_index(PhaseKind kind) noexcept {
  const auto i = static_cast<std::size_t>(kind);
  return i < kPhaseKindCount ? i : kPhaseKindCount - 1;
}
static_assert(kind_index(PhaseKind::input) == 0 && kind_index(PhaseKind::other) == kPhaseKindCount - 1,
              "kPhaseKinds follows the enum's order");

constexpr const char* phase_kind_name(PhaseKind kind) noexcept {
  return kPhaseKindNames[kind_index(kind)];
}

// One value per kind, indexed by PhaseKind.
template <class T>
struct KindArray {
  std::array<T, kPhaseKindCount> values{};

  constexpr T& operator[](PhaseKind kind) noexcept { return values[kind_index(kind)]; }
  constexpr const T& operator[](PhaseKind kind) const noexcept { return values[kind_index(kind)]; }
  constexpr auto begin() noexcept { return values.begin(); }
  constexpr auto end() noexcept { return values.end(); }
  constexpr auto begin() const noexcept { return values.begin(); }
  constexpr auto end() const noexcept { return values.end(); }
};

// The breakdown's per-kind parts (ms per step), and the fields themselves.
inline KindArray<double> kind_parts(const StepBreakdown& b) {
  return {{b.input_ms, b.compute_ms, b.memory_ms, b.communication_ms, b.other_ms}};
}
inline KindArray<double*> kind_fields(StepBreakdown& b) {
  return {{&b.input_ms, &b.compute_ms, &b.memory_ms, &b.communication_ms, &b.other_ms}};
}
// The per-step series of one kind (StepSeries: ms per step, one value per point).
inline const std::vector<double>& kind_series(const StepSeries& s, PhaseKind kind) {
  switch (kind) {
    case PhaseKind::input:
      return s.input_ms;
    case PhaseKind::compute:
      return s.compute_ms;
    case PhaseKind::memory:
      return s.memory_ms;
    case PhaseKind::communication:
      return s.communication_ms;
    case PhaseKind::other:
      break;
  }
  return s.other_ms;
}

}  // namespace detail
}  // namespace v1
}  // namespace stepscope

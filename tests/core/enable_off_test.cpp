// STEPSCOPE_ENABLE=0: the macros vanish, the API still compiles and links,
// and nothing starts.
#undef STEPSCOPE_ENABLE
#define STEPSCOPE_ENABLE 0
#include <stepscope/stepscope.hpp>

#include <catch2/catch.hpp>

#include <type_traits>
#include <vector>

TEST_CASE("with STEPSCOPE_ENABLE=0 the macros expand to nothing", "[enable]") {
  for (int i = 0; i < 100; ++i) {
    STEPSCOPE_STEP();
    STEPSCOPE_PHASE("data");
    STEPSCOPE_PHASE_KIND("x", stepscope::PhaseKind::memory);
  }
  // steps() is the range itself (a temporary: moved out), next_step() nothing.
  std::vector<int> v{1, 2, 3};
  static_assert(std::is_same_v<decltype(stepscope::steps(v)), std::vector<int>&>);
  static_assert(std::is_same_v<decltype(stepscope::steps(std::vector<int>{})), std::vector<int>>);
  REQUIRE(&stepscope::steps(v) == &v);
  int sum = 0;
  for (auto& x : stepscope::steps(v)) {
    stepscope::next_step();
    sum += x;
  }
  REQUIRE(sum == 6);
  stepscope::set_config("batch_size", 1);  // the API still links
  // Nothing initialised the run time: no collector thread, no report.
  REQUIRE(stepscope::detail::g_mode.load() == stepscope::detail::kModeUninitialised);
  REQUIRE(stepscope::detail::t_thread_state.ring == nullptr);
}

// A program that uses stepscope the way a user's training loop does; built
// by the package tests through find_package, add_subdirectory and pkg-config.
// Exit 0 when it wrote a report that loads back with measured steps.
#include <stepscope/stepscope.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

int main() {
  stepscope::set_config("consumer", "package-test");
  for (int i = 0; i < 30; ++i) {
    STEPSCOPE_STEP();
    {
      STEPSCOPE_PHASE("data");
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    {
      STEPSCOPE_PHASE_KIND("forward", stepscope::PhaseKind::compute);
      std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
  }
  const std::string path = stepscope::finish();
  stepscope::Report report;
  std::string error;
  if (path.empty() || !stepscope::load_report(path, report, error)) {
    std::fprintf(stderr, "consumer: no report (%s)\n", error.c_str());
    return 1;
  }
  std::printf("consumer: report %s, %llu measured steps, verdict %s, stepscope %s\n", path.c_str(),
              static_cast<unsigned long long>(report.steps.count), report.bottleneck.category.c_str(),
              STEPSCOPE_VERSION_STRING);
  return report.steps.count == 25 && report.run.config.count("consumer") == 1 ? 0 : 1;
}

// The README's example: a dozen lines, compiled in every build so the README
// cannot drift from working code.
#include <stepscope/stepscope.hpp>

#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

int main() {
  stepscope::set_config("batch_size", 64);
  std::vector<float> w(1 << 16, 0.5f), batch(1 << 16);
  for (int step = 0; step < 200; ++step) {
    STEPSCOPE_STEP();
    { STEPSCOPE_PHASE("data"); std::this_thread::sleep_for(std::chrono::milliseconds(2)); }  // waits on input
    { STEPSCOPE_PHASE("forward"); for (std::size_t i = 0; i < w.size(); ++i) batch[i] = std::tanh(w[i] * static_cast<float>(i % 7)); }
    { STEPSCOPE_PHASE("optimizer"); for (std::size_t i = 0; i < w.size(); ++i) w[i] -= 1e-3f * batch[i]; }
  }
}  // at exit: stepscope-report.json + the summary below on stderr

// The README's example: a dozen lines, compiled in every build so the README
// cannot drift from working code.
#include <stepscope/stepscope.hpp>

#include <cmath>
#include <vector>

#include "slow_loader.hpp"  // stands in for *torch::data::make_data_loader(...): 2 ms per batch

int main() {
  stepscope::set_config("batch_size", 64);
  std::vector<float> w(1 << 16, 0.5f), out(1 << 16);
  SlowLoader loader(200, std::chrono::milliseconds(2));
  for (auto& batch : stepscope::steps(loader)) {  // one step per batch; fetching it is the step's "data" phase
    {
      STEPSCOPE_PHASE("forward");
      for (std::size_t i = 0; i < w.size(); ++i) out[i] = std::tanh(w[i] * batch[i % 64] + static_cast<float>(i % 7));
    }
    {
      STEPSCOPE_PHASE("optimizer");
      for (std::size_t i = 0; i < w.size(); ++i) w[i] -= 1e-3f * out[i];
    }
  }
}  // at exit: stepscope-report.json + the summary below on stderr

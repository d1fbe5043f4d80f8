// libtorch training loops on a CUDA device, instrumented as a user first
// writes them (plain STEPSCOPE_PHASEs, no stream binding), for scripts/gpu-check
// (issue 27 item 7). Built only when Torch with CUDA is found.
//
//   stepscope_torch_gpu_loop conv STEPS   a small conv net, SGD: device-bound;
//                                         loss.item() every 10 steps
//   stepscope_torch_gpu_loop mlp STEPS    40 Linear(32, 32)+ReLU layers at batch
//                                         8, SGD: launch-bound (the host's launch
//                                         rate is the step)
// Prints ms_per_step=<wall ms per step over the last STEPS-10 steps, one
// synchronize at the end>: the loop's own clock, for the overhead ratio
// against STEPSCOPE=0 runs of the same binary.
#include <stepscope/stepscope.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

torch::nn::Sequential conv_net() {
  return torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 64, 3).padding(1)), torch::nn::ReLU(),
                               torch::nn::Conv2d(torch::nn::Conv2dOptions(64, 64, 3).padding(1)), torch::nn::ReLU(),
                               torch::nn::AdaptiveAvgPool2d(1), torch::nn::Flatten(), torch::nn::Linear(64, 10));
}

torch::nn::Sequential mlp() {
  torch::nn::Sequential net;
  for (int i = 0; i < 40; ++i) {
    net->push_back(torch::nn::Linear(32, 32));
    net->push_back(torch::nn::ReLU());
  }
  net->push_back(torch::nn::Linear(32, 10));
  return net;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || (std::string(argv[1]) != "conv" && std::string(argv[1]) != "mlp")) {
    std::fprintf(stderr, "usage: %s conv|mlp STEPS\n", argv[0]);
    return 2;
  }
  if (!torch::cuda::is_available()) {
    std::printf("no CUDA device\n");
    return 3;
  }
  const bool conv = std::string(argv[1]) == "conv";
  const int steps = std::max(20, std::atoi(argv[2]));
  const torch::Device device(torch::kCUDA);
  torch::manual_seed(0);
  auto net = conv ? conv_net() : mlp();
  net->to(device);
  torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  const auto input = conv ? torch::randn({64, 3, 64, 64}, device) : torch::randn({8, 32}, device);
  const auto target = torch::randint(0, 10, {conv ? 64 : 8}, torch::TensorOptions().device(device).dtype(torch::kLong));
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) {
    if (i == 10) {
      torch::cuda::synchronize();
      t0 = std::chrono::steady_clock::now();
    }
    STEPSCOPE_STEP();
    torch::Tensor x, loss;
    {
      STEPSCOPE_PHASE("data");
      x = input + 0.0f;  // a fresh batch on the device
    }
    {
      STEPSCOPE_PHASE("forward");
      loss = torch::nn::functional::cross_entropy(net->forward(x), target);
    }
    {
      STEPSCOPE_PHASE("backward");
      optimizer.zero_grad();
      loss.backward();
    }
    {
      STEPSCOPE_PHASE("optimizer");
      optimizer.step();
      if (i % 10 == 9) (void)loss.item<float>();  // the usual logging read-back
    }
  }
  torch::cuda::synchronize();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("ms_per_step=%.4f\n", ms / (steps - 10));
  return 0;
}

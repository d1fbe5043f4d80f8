// stepscope_torch_mnist_loop — PyTorch's C++ MNIST example loop
// (pytorch/examples, cpp/mnist/mnist.cpp: the same Net and the same train()
// loop, `for (auto& batch : data_loader)` over a loader with 0 workers), on a
// synthetic MNIST-shaped dataset whose get() sleeps as a slow decode would.
//
//   stepscope_torch_mnist_loop                    # for (auto& batch : stepscope::steps(*loader))
//   stepscope_torch_mnist_loop --naive            # for (auto& batch : *loader) { STEPSCOPE_STEP(); ... }
//   stepscope_torch_mnist_loop --sample-us 400 --batches 200
//   stepscope_torch_mnist_loop --self-test        # checks steps() over a torch::data loader; exit status
//   stepscope_torch_mnist_loop --fail-at 40       # batch 40 has the wrong shape: the c10::Error escapes main
//
// --naive is how a user first instruments the example: the fetch runs in the
// loop header, between steps. The report's steps.coverage and the
// steps_coverage finding show it; with stepscope::steps the fetch is each
// step's data phase and the verdict is io.
#include <torch/torch.h>
#include <stepscope/stepscope.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace {

constexpr std::int64_t kTrainBatchSize = 64;
constexpr std::size_t kLogInterval = 10;

// MNIST-shaped samples (1x28x28, label 0-9) that take `sample_us` each to
// "decode" (a sleep: the loader waits on storage or a decoder).
class SlowMnist : public torch::data::datasets::Dataset<SlowMnist> {
 public:
  SlowMnist(std::size_t size, int sample_us) : size_(size), sample_us_(sample_us) {}
  torch::data::Example<> get(std::size_t index) override {
    if (sample_us_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(sample_us_));
    const auto label = static_cast<std::int64_t>(index % 10);
    torch::Tensor image = torch::full({1, 28, 28}, static_cast<double>(label) / 10.0);
    return {image, torch::tensor(label)};
  }
  torch::optional<std::size_t> size() const override { return size_; }

 private:
  std::size_t size_;
  int sample_us_;
};

// As in the example.
struct Net : torch::nn::Module {
  Net()
      : conv1(torch::nn::Conv2dOptions(1, 10, /*kernel_size=*/5)),
        conv2(torch::nn::Conv2dOptions(10, 20, /*kernel_size=*/5)),
        fc1(320, 50),
        fc2(50, 10) {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("conv2_drop", conv2_drop);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(torch::max_pool2d(conv1->forward(x), 2));
    x = torch::relu(torch::max_pool2d(conv2_drop->forward(conv2->forward(x)), 2));
    x = x.view({-1, 320});
    x = torch::relu(fc1->forward(x));
    x = torch::dropout(x, /*p=*/0.5, /*training=*/is_training());
    x = fc2->forward(x);
    return torch::log_softmax(x, /*dim=*/1);
  }
  torch::nn::Conv2d conv1;
  torch::nn::Conv2d conv2;
  torch::nn::Dropout2d conv2_drop;
  torch::nn::Linear fc1;
  torch::nn::Linear fc2;
};

// The example's train() body for one batch, with the phases a user adds.
template <typename Batch>
float train_batch(Net& model, Batch& batch, torch::optim::Optimizer& optimizer) {
  torch::Tensor output, loss;
  {
    STEPSCOPE_PHASE("forward");
    auto data = batch.data, targets = batch.target;
    optimizer.zero_grad();
    output = model.forward(data);
    loss = torch::nll_loss(output, targets);
  }
  {
    STEPSCOPE_PHASE("backward");
    loss.backward();
  }
  {
    STEPSCOPE_PHASE("optimizer");
    optimizer.step();
  }
  return loss.template item<float>();
}

// --fail-at N: batch N comes out of a broken transform 27 pixels wide; the
// model folds it into fewer rows than targets and nll_loss throws c10::Error
// ("size mismatch"), which nothing catches (as in the original example):
// std::terminate, then abort. The report is still
// written, with ended_by "terminate" and the exception.
template <typename Batch>
void break_batch_if(Batch& batch, std::size_t index, long fail_at) {
  if (fail_at >= 0 && index == static_cast<std::size_t>(fail_at)) batch.data = batch.data.narrow(3, 0, 27);
}

template <typename DataLoader>
void train(Net& model, DataLoader& data_loader, torch::optim::Optimizer& optimizer, bool naive, long fail_at) {
  model.train();
  std::size_t batch_idx = 0;
  auto log = [&](float loss) {
    if (batch_idx++ % kLogInterval == 0) std::printf("\rTrain [%5zu] Loss: %.4f", batch_idx, loss);
  };
  if (naive) {
    for (auto& batch : data_loader) {
      STEPSCOPE_STEP();
      break_batch_if(batch, batch_idx, fail_at);
      log(train_batch(model, batch, optimizer));
    }
  } else {
    for (auto& batch : stepscope::steps(data_loader)) {
      break_batch_if(batch, batch_idx, fail_at);
      log(train_batch(model, batch, optimizer));
    }
  }
  std::printf("\n");
}

std::uint64_t data_in_steps(const stepscope::Report& r) {
  for (const auto& p : r.phases)
    if (p.name == "data" && p.thread_role == stepscope::ThreadRole::step) return p.count;
  return 0;
}

// steps() over a real torch::data loader: one step and one data phase per
// batch, including the first (fetched lazily in the first comparison).
int self_test() {
  auto dataset = SlowMnist(10 * kTrainBatchSize, 0).map(torch::data::transforms::Stack<>());
  auto loader =
      torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(std::move(dataset), kTrainBatchSize);
  const stepscope::Report before = stepscope::snapshot();
  std::int64_t seen = 0, batches = 0;
  for (auto& batch : stepscope::steps(*loader)) {
    seen += batch.data.size(0);
    ++batches;
  }
  int broke_after = 0;
  for (const auto& batch : stepscope::steps(*loader)) {  // a second epoch, left early
    if (batch.data.size(0) != kTrainBatchSize) return 1;
    if (++broke_after == 3) break;
  }
  {
    // The test pass as pytorch/examples' cpp/mnist writes it: under
    // torch::NoGradGuard, after a loop with gradients on. An evaluation
    // loop, not steps (include/stepscope/steps.hpp, evaluates_from_start).
    torch::NoGradGuard no_grad;
    for (const auto& batch : stepscope::steps(*loader))
      if (batch.data.size(0) != kTrainBatchSize) return 1;
  }
  const stepscope::Report after = stepscope::snapshot();
  const auto evaluation_loops = after.steps.evaluation_loops - before.steps.evaluation_loops;
  const auto steps =
      (after.steps.count + after.steps.warmup_excluded) - (before.steps.count + before.steps.warmup_excluded);
  // The step the break left recorded nothing after its fetch: counted, left out.
  const auto left_out = after.steps.unended_excluded - before.steps.unended_excluded;
  const auto data = data_in_steps(after) - data_in_steps(before);
  std::printf(
      "self-test: %lld samples in %lld batches; %llu steps (+%llu left by the break), %llu data phases in "
      "steps, %llu evaluation loop(s)\n",
      static_cast<long long>(seen), static_cast<long long>(batches), static_cast<unsigned long long>(steps),
      static_cast<unsigned long long>(left_out), static_cast<unsigned long long>(data),
      static_cast<unsigned long long>(evaluation_loops));
  const bool ok = stepscope::enabled() && seen == 10 * kTrainBatchSize && batches == 10 && steps == 12 &&
                  left_out == 1 && data == 13 && evaluation_loops == 1;
  std::printf("self-test: %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  bool naive = false, check = false;
  int sample_us = 400, batches = 120;
  long fail_at = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--naive") {
      naive = true;
    } else if (a == "--self-test") {
      check = true;
    } else if (a == "--sample-us" && i + 1 < argc) {
      sample_us = std::atoi(argv[++i]);
    } else if (a == "--batches" && i + 1 < argc) {
      batches = std::atoi(argv[++i]);
    } else if (a == "--fail-at" && i + 1 < argc) {
      fail_at = std::atol(argv[++i]);
    } else {
      std::fprintf(
          stderr,
          "usage: stepscope_torch_mnist_loop [--naive] [--sample-us N] [--batches N] [--fail-at N] [--self-test]\n");
      return 2;
    }
  }
  torch::manual_seed(1);
  torch::set_num_threads(1);
  if (check) return self_test();
  stepscope::set_config("loop", naive ? "naive" : "steps");
  stepscope::set_config("sample_us", sample_us);
  auto dataset = SlowMnist(static_cast<std::size_t>(batches) * kTrainBatchSize, sample_us)
                     .map(torch::data::transforms::Normalize<>(0.1307, 0.3081))
                     .map(torch::data::transforms::Stack<>());
  auto train_loader =
      torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(std::move(dataset), kTrainBatchSize);
  Net model;
  torch::optim::SGD optimizer(model.parameters(), torch::optim::SGDOptions(0.01).momentum(0.5));
  train(model, *train_loader, optimizer, naive, fail_at);
  return 0;
}

// stepscope_torch_demo — a real libtorch training loop, instrumented.
//
// A small CNN learns to classify synthetic 28x28 "images" (ten noisy class
// templates). Samples are produced ("decoded") by a torch::data dataset whose
// get() runs on the data loader's worker threads; the step is split into the
// phases stepscope knows: data, forward, backward, optimizer. At the end the
// summary table with the verdict is printed.
//
//   stepscope_torch_demo                      # healthy run (compute-bound on CPU)
//   stepscope_torch_demo --slow-input         # expensive decode on the step thread -> io
//   stepscope_torch_demo --tiny-batches       # batch 2: per-step overhead dominates
//   stepscope_torch_demo --steps 300 --workers 4 --batch 128 --threads 2
//   stepscope_torch_demo --heap-offset 40     # keep one 40-byte block: shifts the heap layout
//
// STEPSCOPE=0 turns the instrumentation off at run time (used for the overhead
// measurement in docs/benchmarks-libtorch.md).
#include <stepscope/stepscope.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int kClasses = 10;
constexpr int kSide = 28;
constexpr int kPixels = kSide * kSide;

struct Options {
  int steps = 200;
  int batch = 64;
  int workers = 2;
  int threads = 1;
  int decode_rounds = 0;  // extra per-sample decode work (filter passes over the image)
  int log_every = 20;
  double lr = 0.05;
  bool slow_input = false;
  bool tiny_batches = false;
  int heap_offset = 0;  // bytes of one block kept allocated before training (0: none)
};

void usage() {
  std::fprintf(stderr,
               "usage: stepscope_torch_demo [--steps N] [--batch N] [--workers N] [--threads N]\n"
               "                            [--decode-rounds N] [--lr X] [--log-every N]\n"
               "                            [--slow-input] [--tiny-batches] [--heap-offset BYTES]\n"
               "  --slow-input    expensive per-sample decode with 0 loader workers (input-bound)\n"
               "  --tiny-batches  batch size 2 (per-step overhead dominates)\n"
               "  --heap-offset   keep one block of BYTES allocated before training: shifts glibc's\n"
               "                  heap layout (the overhead measurement randomises layouts with it)\n");
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next_int = [&](int& out) {
      if (i + 1 >= argc) return false;
      out = std::atoi(argv[++i]);
      return true;
    };
    if (a == "--steps") {
      if (!next_int(o.steps)) return false;
    } else if (a == "--batch") {
      if (!next_int(o.batch)) return false;
    } else if (a == "--workers") {
      if (!next_int(o.workers)) return false;
    } else if (a == "--threads") {
      if (!next_int(o.threads)) return false;
    } else if (a == "--decode-rounds") {
      if (!next_int(o.decode_rounds)) return false;
    } else if (a == "--log-every") {
      if (!next_int(o.log_every)) return false;
    } else if (a == "--heap-offset") {
      if (!next_int(o.heap_offset)) return false;
    } else if (a == "--lr") {
      if (i + 1 >= argc) return false;
      o.lr = std::atof(argv[++i]);
    } else if (a == "--slow-input")
      o.slow_input = true;
    else if (a == "--tiny-batches")
      o.tiny_batches = true;
    else
      return false;
  }
  if (o.slow_input) {
    o.workers = 0;                                    // decode on the step thread: the step waits for every sample
    if (o.decode_rounds == 0) o.decode_rounds = 600;  // ~2 ms per sample
  }
  if (o.tiny_batches) o.batch = 2;
  return o.steps > 0 && o.batch > 0 && o.workers >= 0 && o.threads > 0 && o.decode_rounds >= 0 && o.log_every > 0 &&
         o.heap_offset >= 0;
}

// Synthetic image dataset: sample i is the template of class label(i) plus
// noise seeded by i, so every epoch sees the same data and the task is
// learnable. get() is what a real pipeline's decode + augment would be.
class SyntheticImages : public torch::data::datasets::Dataset<SyntheticImages> {
 public:
  SyntheticImages(std::size_t size, int decode_rounds) : size_(size), decode_rounds_(decode_rounds) {
    std::mt19937 rng(1234);
    std::normal_distribution<float> pixel(0.0f, 1.0f);
    templates_.resize(static_cast<std::size_t>(kClasses) * kPixels);
    for (float& v : templates_) v = pixel(rng);
  }

  torch::data::Example<> get(std::size_t index) override {
    // On loader worker threads this is background work (the step does not
    // wait for it unless the queue runs dry); with 0 workers it runs inside
    // the step's "data" phase.
    STEPSCOPE_PHASE_KIND("decode", stepscope::PhaseKind::input);
    const int label = static_cast<int>((index * 7919u) % kClasses);
    std::mt19937 rng(static_cast<std::uint32_t>(index) * 2654435761u);
    std::normal_distribution<float> noise(0.0f, 1.0f);
    std::vector<float> pixels(kPixels);
    const float* tmpl = &templates_[static_cast<std::size_t>(label) * kPixels];
    for (int p = 0; p < kPixels; ++p) pixels[p] = tmpl[p] + noise(rng);
    // "Decoding": separable smoothing passes, the cost of a real image decode
    // and augmentation (~4 us per pass per 28x28 image).
    for (int round = 0; round < decode_rounds_; ++round) {
      for (int y = 0; y < kSide; ++y)
        for (int x = 1; x < kSide - 1; ++x) {
          float& c = pixels[y * kSide + x];
          c = 0.25f * pixels[y * kSide + x - 1] + 0.5f * c + 0.25f * pixels[y * kSide + x + 1];
        }
    }
    torch::Tensor image = torch::from_blob(pixels.data(), {1, kSide, kSide}, torch::kFloat32).clone();
    return {image, torch::tensor(static_cast<std::int64_t>(label), torch::kInt64)};
  }

  torch::optional<std::size_t> size() const override { return size_; }

 private:
  std::size_t size_;
  int decode_rounds_;
  std::vector<float> templates_;
};

struct NetImpl : torch::nn::Module {
  NetImpl()
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 8, 3).padding(1)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(8, 16, 3).padding(1)))),
        fc1(register_module("fc1", torch::nn::Linear(16 * 7 * 7, 64))),
        fc2(register_module("fc2", torch::nn::Linear(64, kClasses))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1->forward(x)), 2);  // 8x14x14
    x = torch::max_pool2d(torch::relu(conv2->forward(x)), 2);  // 16x7x7
    x = torch::relu(fc1->forward(x.flatten(1)));
    return fc2->forward(x);
  }

  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Net);

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) {
    usage();
    return 2;
  }
  torch::manual_seed(42);
  torch::set_num_threads(o.threads);

  // Recorded in the report so two runs can be compared one change at a time.
  stepscope::set_config("model", "cnn-2conv-2fc");
  stepscope::set_config("batch_size", o.batch);
  stepscope::set_config("loader_workers", o.workers);
  stepscope::set_config("intra_op_threads", o.threads);
  stepscope::set_config("decode_rounds", o.decode_rounds);
  stepscope::set_config("learning_rate", o.lr);

  const std::size_t dataset_size = 8192;
  auto dataset = SyntheticImages(dataset_size, o.decode_rounds).map(torch::data::transforms::Stack<>());
  auto loader = torch::data::make_data_loader(std::move(dataset), torch::data::DataLoaderOptions()
                                                                      .batch_size(static_cast<std::size_t>(o.batch))
                                                                      .workers(static_cast<std::size_t>(o.workers))
                                                                      .drop_last(true));

  Net model;
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(o.lr).momentum(0.9));

  std::printf("stepscope_torch_demo: %d steps, batch %d, %d loader workers, %d intra-op threads%s%s\n", o.steps,
              o.batch, o.workers, o.threads, o.slow_input ? ", slow input" : "",
              o.tiny_batches ? ", tiny batches" : "");
  std::fflush(stdout);

  // One long-lived block, as any unrelated change to a program would add.
  // glibc places libtorch's per-step tensors around it differently, which
  // decides whether the heap top is trimmed and re-faulted every step; see
  // docs/benchmarks-libtorch.md ("heap layout").
  void* heap_offset_block = o.heap_offset > 0 ? std::malloc(static_cast<std::size_t>(o.heap_offset)) : nullptr;

  auto it = loader->begin();
  bool started = false;
  double loss_sum = 0;
  int loss_n = 0;
  // Own timing of the steady part (after 10 steps), for the overhead A/B.
  const int timed_from = std::min(10, o.steps - 1);
  std::chrono::steady_clock::time_point timed_start;
  for (int step = 0; step < o.steps; ++step) {
    if (step == timed_from) timed_start = std::chrono::steady_clock::now();
    STEPSCOPE_STEP();
    torch::Tensor images, labels;
    {
      STEPSCOPE_PHASE("data");
      if (started) ++it;
      started = true;
      if (it == loader->end()) it = loader->begin();  // next epoch
      images = it->data;
      labels = it->target;
    }
    torch::Tensor loss;
    {
      STEPSCOPE_PHASE("forward");
      loss = torch::nn::functional::cross_entropy(model->forward(images), labels);
    }
    {
      STEPSCOPE_PHASE("backward");
      optimizer.zero_grad();
      loss.backward();
    }
    {
      STEPSCOPE_PHASE("optimizer");
      optimizer.step();
    }
    loss_sum += loss.item<double>();
    ++loss_n;
    if ((step + 1) % o.log_every == 0 || step + 1 == o.steps) {
      std::printf("step %5d  loss %.4f\n", step + 1, loss_sum / loss_n);
      std::fflush(stdout);
      loss_sum = 0;
      loss_n = 0;
    }
  }
  const double timed_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - timed_start).count();
  std::printf("timed: %.3f ms/step over %d steps (stepscope %s)\n", timed_ms / (o.steps - timed_from),
              o.steps - timed_from, stepscope::enabled() ? "on" : "off");
  std::fflush(stdout);
  stepscope::finish();  // report + summary now, after the training output
  std::free(heap_offset_block);
  return 0;
}

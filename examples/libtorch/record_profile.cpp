// stepscope_torch_record_profile — a libtorch training loop profiled the way
// a C++ user can without Python: libtorch's legacy profiler
// (torch::autograd::profiler::RecordProfile) writes a Chrome trace, with each
// iteration in a "ProfilerStep#N" range and its batch fetch in an
// "enumerate(DataLoader)#..." range, the names torch.profiler gives them.
// stepscope then imports the trace (`stepscope analyze TRACE`).
//
//   stepscope_torch_record_profile compute TRACE.json   # MLP 256-1024-1024-10, instant batches
//   stepscope_torch_record_profile io TRACE.json        # a small MLP whose batches take 50 ms to "load"
//   stepscope_torch_record_profile --self-test compute  # records, imports, checks verdict and steps; exit status
//
// Debian's libtorch 1.13 has no Kineto, so this is also how the importer's
// legacy-format path (a top-level JSON array, "pid": "CPU functions") is
// exercised with a trace libtorch itself wrote (ctest torch_record_profile_*).
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>

#include <stepscope/import.hpp>

#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace {

constexpr int kSteps = 12;

struct Mlp : torch::nn::Module {
  Mlp(std::int64_t in, std::int64_t hidden) {
    fc1 = register_module("fc1", torch::nn::Linear(in, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, hidden));
    fc3 = register_module("fc3", torch::nn::Linear(hidden, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(fc1->forward(x));
    x = torch::relu(fc2->forward(x));
    return torch::log_softmax(fc3->forward(x), 1);
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

// Trains kSteps steps under RecordProfile; the trace is written when it goes out of scope.
void record(const std::string& mode, const std::string& path) {
  torch::manual_seed(0);
  // io: compute of well under a millisecond a step against a 50 ms fetch, so
  // the verdict holds on a loaded machine; compute: the reverse.
  const bool slow_input = mode == "io";
  const std::int64_t in = slow_input ? 32 : 256, hidden = slow_input ? 32 : 1024, batch = slow_input ? 8 : 64;
  Mlp model(in, hidden);
  torch::optim::SGD optimizer(model.parameters(), torch::optim::SGDOptions(0.01));
  torch::autograd::profiler::RecordProfile profile(path);
  for (int step = 0; step < kSteps; ++step) {
    RECORD_USER_SCOPE("ProfilerStep#" + std::to_string(step));
    torch::Tensor data, target;
    {
      RECORD_USER_SCOPE("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__");
      if (slow_input) std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a slow decode
      data = torch::randn({batch, in});
      target = torch::randint(0, 10, {batch});
    }
    optimizer.zero_grad();
    torch::Tensor loss = torch::nll_loss(model.forward(data), target);
    loss.backward();
    optimizer.step();
  }
}

// Imports the trace as `stepscope analyze` does; 0 when the verdict and the
// step count are what the loop makes them.
int check(const std::string& mode, const std::string& path) {
  stepscope::Report report;
  std::string error;
  if (!stepscope::analyze_trace_file(path, report, error)) {
    std::fprintf(stderr, "record_profile: %s\n", error.c_str());
    return 1;
  }
  const std::string expected = mode == "io" ? "io" : "compute";
  // HTA's rule, which the importer follows: the last ProfilerStep is dropped.
  const std::uint64_t expected_steps = kSteps - 1;
  std::printf("record_profile %s: %llu steps, verdict %s (%s)\n", mode.c_str(),
              static_cast<unsigned long long>(report.steps.count), report.bottleneck.category.c_str(),
              report.bottleneck.summary.c_str());
  if (report.steps.count != expected_steps || report.bottleneck.category != expected) {
    std::fprintf(stderr, "record_profile: expected %llu steps and verdict %s\n",
                 static_cast<unsigned long long>(expected_steps), expected.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 3 && std::string(argv[1]) == "--self-test") {
      const std::string mode = argv[2];
      const std::string path = "stepscope_record_profile_" + mode + "_" + std::to_string(getpid()) + ".json";
      record(mode, path);
      const int status = check(mode, path);
      std::remove(path.c_str());
      return status;
    }
    if (argc == 3 && (std::string(argv[1]) == "compute" || std::string(argv[1]) == "io")) {
      record(argv[1], argv[2]);
      return 0;
    }
    std::fprintf(stderr, "usage: %s compute|io TRACE.json | --self-test compute|io\n", argv[0]);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "record_profile: %s\n", e.what());
    return 1;
  }
}

// stepscope_mlp_demo — a real, dependency-free training loop, instrumented.
//
// A small MLP (ReLU hidden layers, softmax cross-entropy, SGD with momentum)
// learns a synthetic classification task. The data is written to shard files
// in a scratch directory first; a loader thread reads the shards back, decodes
// the quantised records into normalised floats and hands batches to the step
// through a bounded queue — the shape of a PyTorch DataLoader with one worker.
//
//   stepscope_mlp_demo                      # ~1-2 s; compute-bound: the loader keeps up
//   stepscope_mlp_demo --slow-loader        # cold, throttled reads: the step waits on input (io)
//   stepscope_mlp_demo --steps 500 --batch 128 --hidden 256 --out /tmp/run1
//
// Phases: "data" (the step thread waiting on the queue), "forward",
// "backward", "optimizer"; on the loader thread "read" and "decode"
// (background: the step does not wait for them unless the queue runs dry).
// --out DIR writes DIR/stepscope-report.json (unless STEPSCOPE_OUT is set) and
// DIR/loss.csv (step,loss,accuracy). The summary with the verdict is printed
// by stepscope at exit.
#include "mlp.hpp"
#include "pipeline.hpp"

#include <stepscope/stepscope.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using stepscope_example::BoundedQueue;
using stepscope_example::Mlp;
using stepscope_example::ReadPolicy;
using stepscope_example::ShardReader;
using stepscope_example::TempDir;

struct Options {
  int steps = 300;
  int batch = 64;
  int hidden = 128;
  int log_every = 25;
  bool slow_loader = false;
  std::string out;  // "" = no loss file; report at the default path
  float learning_rate = 0.05f;
};

// The synthetic task: `classes` Gaussian clusters in `features` dimensions,
// stored like image bytes (one label byte, then one quantised byte per feature).
struct DatasetSpec {
  int samples = 4096;
  int features = 32;
  int classes = 8;
  int shards = 8;
  float value_range = 6.0f;  // features are quantised from [-range, range]
  int record_bytes() const { return 1 + features; }
  int samples_per_shard() const { return samples / shards; }
};

struct Batch {
  std::vector<float> inputs;  // batch x features, row-major
  std::vector<int> labels;
};

void usage() {
  std::fprintf(stderr,
               "usage: stepscope_mlp_demo [--steps N] [--batch B] [--hidden H] [--slow-loader]\n"
               "                          [--log-every N] [--lr RATE] [--out DIR]\n");
}

bool parse_int(const char* text, int min, int max, int& out) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < min || v > max) return false;
  out = static_cast<int>(v);
  return true;
}

bool parse_options(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--slow-loader") {
      o.slow_loader = true;
    } else if (arg == "--steps" && has_value) {
      if (!parse_int(argv[++i], 1, 10000000, o.steps)) return false;
    } else if (arg == "--batch" && has_value) {
      if (!parse_int(argv[++i], 1, 65536, o.batch)) return false;
    } else if (arg == "--hidden" && has_value) {
      if (!parse_int(argv[++i], 1, 8192, o.hidden)) return false;
    } else if (arg == "--log-every" && has_value) {
      if (!parse_int(argv[++i], 1, 10000000, o.log_every)) return false;
    } else if (arg == "--lr" && has_value) {
      o.learning_rate = std::strtof(argv[++i], nullptr);
      if (!(o.learning_rate > 0)) return false;
    } else if (arg == "--out" && has_value) {
      o.out = argv[++i];
    } else {
      return false;
    }
  }
  return true;
}

// Writes the dataset's shards; returns their paths.
std::vector<std::string> write_dataset(const std::string& dir, const DatasetSpec& spec, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> centers(static_cast<std::size_t>(spec.classes) * static_cast<std::size_t>(spec.features));
  for (float& c : centers) c = normal(rng);
  std::uniform_int_distribution<int> pick_class(0, spec.classes - 1);
  const float noise = 2.5f;  // clusters overlap: the loss falls over hundreds of steps
  std::vector<std::string> paths;
  std::vector<unsigned char> shard;
  for (int s = 0; s < spec.shards; ++s) {
    shard.clear();
    for (int i = 0; i < spec.samples_per_shard(); ++i) {
      const int label = pick_class(rng);
      shard.push_back(static_cast<unsigned char>(label));
      for (int f = 0; f < spec.features; ++f) {
        const float v = centers[static_cast<std::size_t>(label * spec.features + f)] + noise * normal(rng);
        const float unit =
            (std::clamp(v, -spec.value_range, spec.value_range) + spec.value_range) / (2 * spec.value_range);
        shard.push_back(static_cast<unsigned char>(std::lround(unit * 255.0f)));
      }
    }
    paths.push_back(dir + "/shard-" + std::to_string(s) + ".bin");
    stepscope_example::write_file_synced(paths.back(), shard.data(), shard.size());
  }
  return paths;
}

// The loader thread: reads batches of records from the shards in shuffled
// order, epoch after epoch, decodes them and pushes them into the queue
// until the queue is closed.
void load_batches(const std::vector<std::string>& paths, const DatasetSpec& spec, int batch, ReadPolicy policy,
                  BoundedQueue<Batch>& queue) {
  std::vector<std::unique_ptr<ShardReader>> readers;
  for (const std::string& p : paths) readers.push_back(std::make_unique<ShardReader>(p, policy));
  const int chunks_per_shard = std::max(1, spec.samples_per_shard() / batch);
  const int per_chunk = std::min(batch, spec.samples_per_shard());
  std::vector<std::pair<int, int>> order;  // (shard, chunk)
  for (int s = 0; s < spec.shards; ++s)
    for (int c = 0; c < chunks_per_shard; ++c) order.emplace_back(s, c);
  std::mt19937 rng(7);
  std::vector<unsigned char> raw(static_cast<std::size_t>(per_chunk) * static_cast<std::size_t>(spec.record_bytes()));
  const float scale = 2 * spec.value_range / 255.0f;
  for (;;) {
    std::shuffle(order.begin(), order.end(), rng);
    for (const auto& [shard, chunk] : order) {
      {
        STEPSCOPE_PHASE_KIND("read", stepscope::PhaseKind::input);
        readers[static_cast<std::size_t>(shard)]->read_at(static_cast<std::uint64_t>(chunk) * raw.size(), raw.data(),
                                                          raw.size());
      }
      Batch b;
      {
        STEPSCOPE_PHASE_KIND("decode", stepscope::PhaseKind::input);
        // A short shard fills the batch by repeating records.
        b.inputs.resize(static_cast<std::size_t>(batch) * static_cast<std::size_t>(spec.features));
        b.labels.resize(static_cast<std::size_t>(batch));
        for (int r = 0; r < batch; ++r) {
          const unsigned char* rec =
              raw.data() + static_cast<std::size_t>(r % per_chunk) * static_cast<std::size_t>(spec.record_bytes());
          b.labels[static_cast<std::size_t>(r)] = std::min<int>(rec[0], spec.classes - 1);
          float* row = b.inputs.data() + static_cast<std::size_t>(r) * static_cast<std::size_t>(spec.features);
          // Dequantise back to [-range, range], then scale to unit variance-ish.
          for (int f = 0; f < spec.features; ++f)
            row[f] = (static_cast<float>(rec[1 + f]) * scale - spec.value_range) / 2.0f;
        }
      }
      if (!queue.push(std::move(b))) return;
    }
  }
}

int run(const Options& o) {
  const DatasetSpec spec;
  if (!o.out.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.out, ec);
    if (ec) {
      std::fprintf(stderr, "cannot create %s: %s\n", o.out.c_str(), ec.message().c_str());
      return 1;
    }
    // Before the first scope: the run time reads the environment once.
    ::setenv("STEPSCOPE_OUT", (o.out + "/stepscope-report.json").c_str(), /*overwrite=*/0);
  }
  TempDir data_dir("stepscope-mlp-data");
  const std::vector<std::string> shards = write_dataset(data_dir.path(), spec, 1);

  ReadPolicy policy;
  if (o.slow_loader) {
    // A slow network volume read record-batch by record-batch, cold: every
    // read goes to storage in 512-byte requests, paced to 256 KiB/s.
    policy.cold = true;
    policy.bytes_per_second = 256.0 * 1024.0;
    policy.request_bytes = 512;
  }
  stepscope::set_config("model", "mlp");
  stepscope::set_config("batch_size", o.batch);
  stepscope::set_config("hidden", o.hidden);
  stepscope::set_config("hidden_layers", 2);
  stepscope::set_config("learning_rate", static_cast<double>(o.learning_rate));
  stepscope::set_config("loader_workers", 1);
  stepscope::set_config("queue_depth", 4);
  stepscope::set_config("slow_loader", o.slow_loader ? "true" : "false");
  stepscope::set_config("dataset_samples", spec.samples);

  Mlp model({spec.features, o.hidden, o.hidden, spec.classes}, 1);
  std::printf("mlp %d-%d-%d-%d (%zu parameters), batch %d, %d steps, %s loader, data in %s\n", spec.features, o.hidden,
              o.hidden, spec.classes, model.parameter_count(), o.batch, o.steps,
              o.slow_loader ? "slow (cold, 256 KiB/s)" : "fast", data_dir.path().c_str());

  BoundedQueue<Batch> queue(4);
  std::exception_ptr loader_error;
  std::thread loader([&] {
    try {
      load_batches(shards, spec, o.batch, policy, queue);
    } catch (...) {
      loader_error = std::current_exception();
      queue.close();
    }
  });

  std::vector<float> losses, accuracies;
  losses.reserve(static_cast<std::size_t>(o.steps));
  accuracies.reserve(static_cast<std::size_t>(o.steps));
  for (int step = 0; step < o.steps; ++step) {
    STEPSCOPE_STEP();
    Batch batch;
    bool got = false;
    {
      STEPSCOPE_PHASE("data");
      got = queue.pop(batch);
    }
    if (!got) break;
    float loss = 0;
    {
      STEPSCOPE_PHASE("forward");
      loss = model.forward(batch.inputs.data(), batch.labels.data(), o.batch);
    }
    {
      STEPSCOPE_PHASE("backward");
      model.backward();
    }
    {
      STEPSCOPE_PHASE("optimizer");
      model.sgd_step(o.learning_rate, 0.9f);
    }
    losses.push_back(loss);
    accuracies.push_back(model.accuracy());
    if ((step + 1) % o.log_every == 0 || step + 1 == o.steps) {
      const std::size_t n = std::min<std::size_t>(static_cast<std::size_t>(o.log_every), losses.size());
      const float mean_loss =
          std::accumulate(losses.end() - static_cast<long>(n), losses.end(), 0.0f) / static_cast<float>(n);
      const float mean_acc =
          std::accumulate(accuracies.end() - static_cast<long>(n), accuracies.end(), 0.0f) / static_cast<float>(n);
      std::printf("step %5d  loss %.4f  accuracy %.3f\n", step + 1, mean_loss, mean_acc);
      std::fflush(stdout);
    }
  }
  queue.close();
  loader.join();
  if (loader_error) {
    try {
      std::rethrow_exception(loader_error);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "loader failed: %s\n", e.what());
      return 1;
    }
  }
  if (!o.out.empty()) {
    const std::string path = o.out + "/loss.csv";
    if (std::FILE* f = std::fopen(path.c_str(), "w")) {
      std::fprintf(f, "step,loss,accuracy\n");
      for (std::size_t i = 0; i < losses.size(); ++i)
        std::fprintf(f, "%zu,%.6f,%.4f\n", i + 1, losses[i], accuracies[i]);
      std::fclose(f);
    }
  }
  if (losses.size() >= 20) {
    const float first = std::accumulate(losses.begin(), losses.begin() + 10, 0.0f) / 10;
    const float last = std::accumulate(losses.end() - 10, losses.end(), 0.0f) / 10;
    std::printf("loss %.4f -> %.4f over %zu steps\n", first, last, losses.size());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!parse_options(argc, argv, options)) {
    usage();
    return 2;
  }
  try {
    return run(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stepscope_mlp_demo: %s\n", e.what());
    return 1;
  }
}

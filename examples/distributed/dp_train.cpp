// stepscope_dp_train — synchronous data-parallel training over MPI.
//
// Each rank trains the same two-layer MLP (plain C++, no framework) on its own
// shard of a synthetic classification task and averages the gradients with
// MPI_Allreduce every step, as DistributedDataParallel does. Phases: data,
// forward, backward, allreduce (communication), optimizer.
//
//   mpirun -np 4 --oversubscribe stepscope_dp_train --steps 200
//   mpirun -np 4 --oversubscribe stepscope_dp_train --slow-rank 2 --slow-ms 6
//   mpirun -np 4 --oversubscribe stepscope_dp_train --gather   # + merged job report on rank 0
//
// --slow-rank R --slow-ms X makes rank R do X ms of extra real compute in its
// forward pass (repeated first-layer matrix products, not a sleep);
// --slow-factor K instead adds K more first-layer products (a slowdown that
// scales with the machine, used by the tests). The other ranks then wait for
// it inside the allreduce. Each rank writes
// stepscope-report.rank{R}.json; with --gather rank 0 also writes the merged
// stepscope-report.merged.json (stepscope::mpi::finish_and_gather).
#include <stepscope/mpi.hpp>
#include <stepscope/stepscope.hpp>

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Options {
  int steps = 200;
  int batch = 64;
  int inputs = 128;
  int hidden = 256;
  int classes = 10;
  int slow_rank = -1;
  double slow_ms = 0;
  int slow_factor = 0;  // extra forward passes' worth of compute on the slow rank
  double lr = 0.1;
  int log_every = 50;
  int poll_us = 50;  // sleep between polls of the allreduce
  bool gather = false;
};

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--steps" && has_value)
      o.steps = std::atoi(argv[++i]);
    else if (a == "--batch" && has_value)
      o.batch = std::atoi(argv[++i]);
    else if (a == "--hidden" && has_value)
      o.hidden = std::atoi(argv[++i]);
    else if (a == "--slow-rank" && has_value)
      o.slow_rank = std::atoi(argv[++i]);
    else if (a == "--slow-ms" && has_value)
      o.slow_ms = std::atof(argv[++i]);
    else if (a == "--slow-factor" && has_value)
      o.slow_factor = std::atoi(argv[++i]);
    else if (a == "--lr" && has_value)
      o.lr = std::atof(argv[++i]);
    else if (a == "--log-every" && has_value)
      o.log_every = std::atoi(argv[++i]);
    else if (a == "--poll-us" && has_value)
      o.poll_us = std::atoi(argv[++i]);
    else if (a == "--gather")
      o.gather = true;
    else
      return false;
  }
  return o.steps > 0 && o.batch > 0 && o.hidden > 0 && o.slow_ms >= 0 && o.slow_factor >= 0 && o.log_every > 0 &&
         o.poll_us >= 0;
}

// out[rows x cols] = a[rows x inner] * b[inner x cols] (+= when accumulate).
void matmul(const float* a, const float* b, float* out, int rows, int inner, int cols, bool accumulate = false) {
  if (!accumulate) std::fill(out, out + static_cast<std::size_t>(rows) * cols, 0.0f);
  for (int i = 0; i < rows; ++i)
    for (int k = 0; k < inner; ++k) {
      const float aik = a[static_cast<std::size_t>(i) * inner + k];
      const float* brow = b + static_cast<std::size_t>(k) * cols;
      float* orow = out + static_cast<std::size_t>(i) * cols;
      for (int j = 0; j < cols; ++j) orow[j] += aik * brow[j];
    }
}

// out[inner x cols] = a^T * b with a[rows x inner], b[rows x cols].
void matmul_at_b(const float* a, const float* b, float* out, int rows, int inner, int cols) {
  std::fill(out, out + static_cast<std::size_t>(inner) * cols, 0.0f);
  for (int r = 0; r < rows; ++r)
    for (int k = 0; k < inner; ++k) {
      const float ark = a[static_cast<std::size_t>(r) * inner + k];
      const float* brow = b + static_cast<std::size_t>(r) * cols;
      float* orow = out + static_cast<std::size_t>(k) * cols;
      for (int j = 0; j < cols; ++j) orow[j] += ark * brow[j];
    }
}

// out[rows x inner] = a[rows x cols] * b^T with b[inner x cols].
void matmul_a_bt(const float* a, const float* b, float* out, int rows, int cols, int inner) {
  for (int i = 0; i < rows; ++i)
    for (int k = 0; k < inner; ++k) {
      float sum = 0;
      const float* arow = a + static_cast<std::size_t>(i) * cols;
      const float* brow = b + static_cast<std::size_t>(k) * cols;
      for (int j = 0; j < cols; ++j) sum += arow[j] * brow[j];
      out[static_cast<std::size_t>(i) * inner + k] = sum;
    }
}

struct Model {
  int d, h, c;
  // One flat buffer so the gradients go out in a single allreduce:
  // [W1 (d x h) | b1 (h) | W2 (h x c) | b2 (c)].
  std::vector<float> params, grads;
  float* w1() { return params.data(); }
  float* b1() { return w1() + static_cast<std::size_t>(d) * h; }
  float* w2() { return b1() + h; }
  float* b2() { return w2() + static_cast<std::size_t>(h) * c; }
  float* gw1() { return grads.data(); }
  float* gb1() { return gw1() + static_cast<std::size_t>(d) * h; }
  float* gw2() { return gb1() + h; }
  float* gb2() { return gw2() + static_cast<std::size_t>(h) * c; }

  Model(int inputs, int hidden, int classes) : d(inputs), h(hidden), c(classes) {
    const std::size_t n = static_cast<std::size_t>(d) * h + h + static_cast<std::size_t>(h) * c + c;
    params.assign(n, 0.0f);
    grads.assign(n, 0.0f);
    std::mt19937 rng(99);  // same initial weights on every rank
    std::normal_distribution<float> w(0.0f, 1.0f);
    for (std::size_t i = 0; i < static_cast<std::size_t>(d) * h; ++i)
      w1()[i] = w(rng) / std::sqrt(static_cast<float>(d));
    for (std::size_t i = 0; i < static_cast<std::size_t>(h) * c; ++i)
      w2()[i] = w(rng) / std::sqrt(static_cast<float>(h));
  }
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  stepscope::set_rank(rank, world);

  Options o;
  if (!parse(argc, argv, o)) {
    if (rank == 0)
      std::fprintf(
          stderr,
          "usage: stepscope_dp_train [--steps N] [--batch N] [--hidden N] [--lr X] [--log-every N]\n"
          "                          [--slow-rank R (--slow-ms X | --slow-factor K)] [--poll-us N] [--gather]\n");
    MPI_Finalize();
    return 2;
  }
  stepscope::set_config("model", "mlp");
  stepscope::set_config("batch_size_per_rank", o.batch);
  stepscope::set_config("hidden", o.hidden);
  stepscope::set_config("world_size", world);
  stepscope::set_config("learning_rate", o.lr);

  const int B = o.batch, D = o.inputs, H = o.hidden, C = o.classes;
  Model model(D, H, C);
  // The task: label = argmax(x * teacher), the same teacher on every rank.
  std::vector<float> teacher(static_cast<std::size_t>(D) * C);
  {
    std::mt19937 rng(7);
    std::normal_distribution<float> w(0.0f, 1.0f);
    for (float& v : teacher) v = w(rng);
  }
  std::mt19937 shard_rng(1000u + static_cast<unsigned>(rank));  // this rank's shard
  std::normal_distribution<float> feature(0.0f, 1.0f);

  std::vector<float> x(static_cast<std::size_t>(B) * D), hidden(static_cast<std::size_t>(B) * H),
      logits(static_cast<std::size_t>(B) * C), dlogits(logits.size()), dhidden(hidden.size()), scratch(hidden.size()),
      teacher_logits(logits.size());
  std::vector<int> labels(static_cast<std::size_t>(B));
  const float inv_world = 1.0f / static_cast<float>(world);
  const bool slow_here = rank == o.slow_rank && o.slow_ms > 0;
  volatile float sink = 0;

  for (int step = 0; step < o.steps; ++step) {
    STEPSCOPE_STEP();
    {
      STEPSCOPE_PHASE("data");
      for (float& v : x) v = feature(shard_rng);
      matmul(x.data(), teacher.data(), teacher_logits.data(), B, D, C);
      for (int i = 0; i < B; ++i) {
        const float* row = &teacher_logits[static_cast<std::size_t>(i) * C];
        labels[static_cast<std::size_t>(i)] = static_cast<int>(std::max_element(row, row + C) - row);
      }
    }
    double loss = 0;
    {
      STEPSCOPE_PHASE("forward");
      matmul(x.data(), model.w1(), hidden.data(), B, D, H);
      for (int i = 0; i < B; ++i)
        for (int j = 0; j < H; ++j) {
          float& v = hidden[static_cast<std::size_t>(i) * H + j];
          v = std::tanh(v + model.b1()[j]);
        }
      matmul(hidden.data(), model.w2(), logits.data(), B, H, C);
      for (int i = 0; i < B; ++i) {
        float* row = &logits[static_cast<std::size_t>(i) * C];
        float top = -1e30f;
        for (int j = 0; j < C; ++j) top = std::max(top, row[j] += model.b2()[j]);
        float sum = 0;
        for (int j = 0; j < C; ++j) sum += std::exp(row[j] - top);
        const int y = labels[static_cast<std::size_t>(i)];
        loss += std::log(sum) - (row[y] - top);
        for (int j = 0; j < C; ++j)
          dlogits[static_cast<std::size_t>(i) * C + j] =
              (std::exp(row[j] - top) / sum - (j == y ? 1.0f : 0.0f)) / static_cast<float>(B);
      }
      loss /= B;
      if (rank == o.slow_rank) {
        // Proportional straggler: the first-layer product K more times.
        for (int k = 0; k < o.slow_factor; ++k) {
          matmul(x.data(), model.w1(), scratch.data(), B, D, H);
          sink = sink + scratch[0];
        }
      }
      if (slow_here) {
        // The injected straggler: extra first-layer products (real FLOPs)
        // until slow_ms has passed.
        const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(o.slow_ms);
        while (std::chrono::steady_clock::now() < until) {
          matmul(x.data(), model.w1(), scratch.data(), B, D, H);
          sink = sink + scratch[0];
        }
      }
    }
    {
      STEPSCOPE_PHASE("backward");
      matmul_at_b(hidden.data(), dlogits.data(), model.gw2(), B, H, C);
      std::fill(model.gb2(), model.gb2() + C, 0.0f);
      for (int i = 0; i < B; ++i)
        for (int j = 0; j < C; ++j) model.gb2()[j] += dlogits[static_cast<std::size_t>(i) * C + j];
      matmul_a_bt(dlogits.data(), model.w2(), dhidden.data(), B, C, H);
      for (std::size_t i = 0; i < dhidden.size(); ++i) dhidden[i] *= 1.0f - hidden[i] * hidden[i];
      matmul_at_b(x.data(), dhidden.data(), model.gw1(), B, D, H);
      std::fill(model.gb1(), model.gb1() + H, 0.0f);
      for (int i = 0; i < B; ++i)
        for (int j = 0; j < H; ++j) model.gb1()[j] += dhidden[static_cast<std::size_t>(i) * H + j];
    }
    {
      STEPSCOPE_PHASE("allreduce");  // communication: waits for the slowest rank, then sums
      // Non-blocking allreduce, polled with short sleeps: a rank that waits
      // gives its core to the ranks still computing (an oversubscribed
      // localhost run would otherwise spin and starve the straggler).
      MPI_Request request;
      MPI_Iallreduce(MPI_IN_PLACE, model.grads.data(), static_cast<int>(model.grads.size()), MPI_FLOAT, MPI_SUM,
                     MPI_COMM_WORLD, &request);
      stepscope::note_collectives(1, model.grads.size() * sizeof(float));  // tells latency from volume
      int done = 0;
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      while (!done) {
        std::this_thread::sleep_for(std::chrono::microseconds(o.poll_us));
        MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      }
    }
    {
      STEPSCOPE_PHASE("optimizer");
      const float step_size = static_cast<float>(o.lr) * inv_world;  // mean of the ranks' gradients
      for (std::size_t i = 0; i < model.params.size(); ++i) model.params[i] -= step_size * model.grads[i];
    }
    if (rank == 0 && ((step + 1) % o.log_every == 0 || step + 1 == o.steps)) {
      std::printf("step %5d  loss %.4f (rank 0)\n", step + 1, loss);
      std::fflush(stdout);
    }
  }

  if (o.gather) {
    stepscope::mpi::finish_and_gather(MPI_COMM_WORLD);
  } else {
    stepscope::finish();
  }
  MPI_Finalize();
  return 0;
}

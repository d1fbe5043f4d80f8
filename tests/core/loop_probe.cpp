// Training loops written the way people write them, run as a separate
// process by steps_scenario_test.cpp (one report per process). The loader's
// fetch and the "GPU" work sleep, so the verdicts hold on a busy machine:
// sleeping is wall time whatever the load, and a sleeping thread is not
// runnable, so it accrues no run-queue wait.
//   loop_probe naive STEPS      — range-for, STEPSCOPE_STEP() in the body (the MNIST
//                                 example's instrumentation): the slow fetch runs between steps
//   loop_probe steps STEPS      — the same loop over stepscope::steps(loader)
//   loop_probe healthy STEPS    — stepscope::steps over a fast loader; compute dominates
//   loop_probe next-step STEPS  — a while loop marked with stepscope::next_step()
//   loop_probe sites STEPS      — two `backward` call sites (generator, discriminator);
//                                 prints their lines on stdout
//   loop_probe steps-and-step STEPS — stepscope::steps(loader) and STEPSCOPE_STEP() in the body:
//                                 each step marked twice
//   loop_probe epochs STEPS     — stepscope::steps over 3 epochs around stepscope::steps(loader),
//                                 an `evaluate` phase after each epoch's batches
#include <stepscope/stepscope.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

void sleep_us(int us) {
  std::this_thread::sleep_for(std::chrono::microseconds(us));
}

struct Batch {
  std::vector<float> pixels;
};

// A data loader like torch::data's: the batch is produced in begin() and
// operator++ (here: a sleep standing for decoding 64 images on this thread).
class SlowLoader {
 public:
  SlowLoader(int batches, int fetch_us) : batches_(batches), fetch_us_(fetch_us) {}
  class iterator {
   public:
    iterator(const SlowLoader* loader, int index) : loader_(loader), index_(index) {
      if (index_ < loader_->batches_) fetch();
    }
    Batch& operator*() { return batch_; }
    iterator& operator++() {
      if (++index_ < loader_->batches_) fetch();
      return *this;
    }
    bool operator!=(const iterator& other) const { return index_ != other.index_; }

   private:
    void fetch() {
      sleep_us(loader_->fetch_us_);
      batch_.pixels.assign(64, static_cast<float>(index_));
    }
    const SlowLoader* loader_;
    int index_;
    Batch batch_;
  };
  iterator begin() const { return iterator(this, 0); }
  iterator end() const { return iterator(this, batches_); }

 private:
  int batches_;
  int fetch_us_;
};

// Work on the CPU for `us` (a spin: compute phases that slept would be a
// wait, which the analyzer does not call compute without a GPU to wait for).
void spin_us(int us) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  volatile unsigned sink = 0;
  while (std::chrono::steady_clock::now() < until) sink = sink + 1;
}

// The model's work.
void train_step(const Batch& batch, int forward_us, int backward_us) {
  if (batch.pixels.empty()) std::abort();
  {
    STEPSCOPE_PHASE("forward");
    spin_us(forward_us);
  }
  {
    STEPSCOPE_PHASE("backward");
    spin_us(backward_us);
  }
}

constexpr int kSlowFetchUs = 6000;  // 82% of the iteration, as in issue 12's MNIST run
constexpr int kForwardUs = 900, kBackwardUs = 400;

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: loop_probe naive|steps|healthy|next-step|sites|steps-and-step|epochs STEPS\n");
    return 2;
  }
  const std::string mode = argv[1];
  const int steps = std::atoi(argv[2]);
  stepscope::set_config("mode", mode);
  if (mode == "naive") {
    SlowLoader loader(steps, kSlowFetchUs);
    for (auto& batch : loader) {
      STEPSCOPE_STEP();
      train_step(batch, kForwardUs, kBackwardUs);
    }
  } else if (mode == "steps") {
    SlowLoader loader(steps, kSlowFetchUs);
    for (auto& batch : stepscope::steps(loader)) train_step(batch, kForwardUs, kBackwardUs);
  } else if (mode == "healthy") {
    SlowLoader loader(steps, 0);
    for (const auto& batch : stepscope::steps(loader)) train_step(batch, 2500, 1000);
  } else if (mode == "next-step") {
    SlowLoader loader(steps, kSlowFetchUs);
    auto it = loader.begin();
    const auto end = loader.end();
    while (it != end) {
      stepscope::next_step();  // the last step closes at finish()
      train_step(*it, kForwardUs, kBackwardUs);
      {
        STEPSCOPE_PHASE("data");
        ++it;
      }
    }
  } else if (mode == "sites") {
    SlowLoader loader(steps, 200);
    int generator_line = 0, discriminator_line = 0;
    for (auto& batch : stepscope::steps(loader)) {
      if (batch.pixels.empty()) return 1;
      // DCGAN: the discriminator's backward, then the generator's.
      // (__LINE__ on the macro's line: the site's line.)
      // clang-format off
      { STEPSCOPE_PHASE("backward"); discriminator_line = __LINE__; sleep_us(3000); }
      { STEPSCOPE_PHASE("backward"); generator_line = __LINE__; sleep_us(1000); }
      // clang-format on
    }
    std::printf("%d %d\n", discriminator_line, generator_line);
  } else if (mode == "steps-and-step") {
    SlowLoader loader(steps, kSlowFetchUs);
    for (auto& batch : stepscope::steps(loader)) {
      STEPSCOPE_STEP();
      train_step(batch, kForwardUs, kBackwardUs);
    }
  } else if (mode == "epochs") {
    SlowLoader loader(steps / 3, kSlowFetchUs);
    for (int epoch : stepscope::steps(std::vector<int>{1, 2, 3})) {
      for (auto& batch : stepscope::steps(loader)) train_step(batch, kForwardUs, kBackwardUs);
      STEPSCOPE_PHASE("evaluate");
      sleep_us(20000 * epoch);
    }
  } else {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  return 0;
}

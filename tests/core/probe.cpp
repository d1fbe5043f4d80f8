// A small instrumented program the run-time tests start as a separate
// process (finish() and exit handling are once per process).
//   probe workload STEPS   — steps with data / forward{matmul} / optimizer phases
//                             and a background loader thread
//   probe threads N        — N short-lived threads, 1000 phases each, then exit
//   probe fork             — a few steps, then fork; the child records and exits
//   probe exit-order STEPS — registers an exit handler before its first scope
//                             (as the CUDA runtime does when a program used
//                             CUDA first); the handler writes early-handler.txt
//                             saying whether the report existed when it ran
//   probe exit-quick       — one step, then exits at once
#include <stepscope/stepscope.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

// Busy work of a known length (a spin on the monotonic clock).
void spin_us(int us) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  volatile unsigned sink = 0;
  while (std::chrono::steady_clock::now() < until) sink = sink + 1;
}

void one_step() {
  STEPSCOPE_STEP();
  { STEPSCOPE_PHASE("data"); spin_us(300); }
  {
    STEPSCOPE_PHASE("forward");
    spin_us(200);
    { STEPSCOPE_PHASE_KIND("matmul", stepscope::PhaseKind::compute); spin_us(400); }
  }
  { STEPSCOPE_PHASE("optimizer"); spin_us(100); }
  spin_us(100);  // in the step, in no phase: unattributed
}

int workload(int steps) {
  stepscope::set_config("batch_size", 32);
  stepscope::set_config("optimizer", "sgd");
  std::atomic<bool> stop{false};
  std::thread loader([&] {
    while (!stop.load()) {
      STEPSCOPE_PHASE("decode");
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  });
  for (int i = 0; i < steps; ++i) one_step();
  stop = true;
  loader.join();
  return 0;
}

int threads(int n) {
  std::vector<std::thread> workers;
  for (int t = 0; t < n; ++t)
    workers.emplace_back([] {
      for (int i = 0; i < 1000; ++i) { STEPSCOPE_PHASE("work"); }
    });
  for (auto& w : workers) w.join();
  // The threads are gone; their records must still be in the report.
  return 0;
}

int forking() {
  for (int i = 0; i < 20; ++i) one_step();
  const pid_t child = fork();
  if (child == 0) {
    for (int i = 0; i < 20; ++i) one_step();  // must not record, must not hang
    std::exit(0);                             // runs atexit handlers in the child
  }
  int status = 0;
  waitpid(child, &status, 0);
  for (int i = 0; i < 20; ++i) one_step();
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 3;
}

void early_exit_handler() {
  const char* out = std::getenv("STEPSCOPE_OUT");
  const std::string report = out != nullptr && *out != '\0' ? out : "stepscope-report.json";
  const bool present = ::access(report.c_str(), F_OK) == 0;
  if (std::FILE* f = std::fopen("early-handler.txt", "w")) {
    std::fprintf(f, "report-present=%d\n", present ? 1 : 0);
    std::fclose(f);
  }
}

int exit_order(int steps) {
  std::atexit(early_exit_handler);
  for (int i = 0; i < steps; ++i) one_step();
  return 0;  // the report is written at exit, by finish()
}

int exit_quick() {
  one_step();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "workload";
  const int n = argc > 2 ? std::atoi(argv[2]) : 100;
  if (mode == "workload") return workload(n);
  if (mode == "threads") return threads(n);
  if (mode == "fork") return forking();
  if (mode == "exit-order") return exit_order(n);
  if (mode == "exit-quick") return exit_quick();
  std::fprintf(stderr, "probe: unknown mode %s\n", mode.c_str());
  return 2;
}

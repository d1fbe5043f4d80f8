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
// Modes for the fault tests (tests/faults):
//   probe forever            — steps until killed; writes "running" after 20 steps
//   probe abort MS           — steps for MS ms, then std::abort()
//   probe segv MS            — steps for MS ms, then a store to address 8
//                              from a worker thread (a real SIGSEGV)
//   probe own-handler before|after — installs its own SIGTERM handler (which
//                              writes "own-handler" and exits 7) before or after
//                              its first scope, then steps until killed
//   probe big-exit N         — N distinct phases (a large report), then exits
//   probe flood              — 8 threads record background phases for 0.5 s
//                              while the main thread runs steps; prints
//                              "work-done" on stdout when they stop
//   probe burst N            — N records in one go at start-up, then exits
//   probe fork-early N       — forks N children before any scope; each runs
//                              steps and exits; the parent runs none
//   probe throw MS           — steps for MS ms, then a std::runtime_error
//                              escapes main (std::terminate, then abort)
//   probe throw-thread MS    — the same from a worker thread, with a type of
//                              its own (probe::BadBatch) while main steps on
//   probe terminate MS       — steps for MS ms, then std::terminate() with no
//                              exception in flight
//   probe own-terminate MS   — installs its own terminate handler (writes
//                              "own-terminate", exits 9), then as throw
//   probe exit-after MS      — steps for MS ms, then _exit(3) (no exit handler runs)
//   probe chatty             — steps until killed, one line on stdout per step
//                              (flushed); writes "running" after 20 steps
//   probe printing N         — a line on stdout, N workload steps, another line
//   probe idle MS            — starts stepscope (enabled()), records nothing,
//                              sleeps MS ms and exits
//   probe big-exit-thread N  — big-exit with an idle second thread (a signal
//                              during the exit's report goes to it)
//   probe signal-at-start SIG — one step, then raises signal SIG at once
//                              (before the collector thread has started)
#include <stepscope/stepscope.hpp>

#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

// A type of the program's own, outside the anonymous namespace (its demangled name is in the report).
namespace probe {
struct BadBatch : std::runtime_error {
  using std::runtime_error::runtime_error;
};
}  // namespace probe

namespace {

// Set in a forked child. Under AddressSanitizer a fork can catch the
// collector thread inside the sanitizer's allocator: the child inherits that
// allocator lock held by a thread it does not have, and LeakSanitizer's exit
// check, which takes every allocator lock, waits forever (seen: the fork
// test hung under ASan on a busy machine; glibc's malloc, which real programs
// use, resets its locks at fork). The child's leak check would also be wrong:
// the collector's memory is reachable only from a thread the child lacks.
// So a forked child of this probe skips LeakSanitizer (its callback below).
bool g_forked_child = false;

// Busy work of a known length (a spin on the monotonic clock).
void spin_us(int us) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  volatile unsigned sink = 0;
  while (std::chrono::steady_clock::now() < until) sink = sink + 1;
}

void one_step() {
  STEPSCOPE_STEP();
  {
    STEPSCOPE_PHASE("data");
    spin_us(300);
  }
  {
    STEPSCOPE_PHASE("forward");
    spin_us(200);
    {
      STEPSCOPE_PHASE_KIND("matmul", stepscope::PhaseKind::compute);
      spin_us(400);
    }
  }
  {
    STEPSCOPE_PHASE("optimizer");
    spin_us(100);
  }
  stepscope::note_collectives(2, 2 * 4096);  // as a DDP model's two gradient buckets of 4 KiB
  spin_us(100);                              // in the step, in no phase: unattributed
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
      for (int i = 0; i < 1000; ++i) {
        STEPSCOPE_PHASE("work");
      }
    });
  for (auto& w : workers) w.join();
  // The threads are gone; their records must still be in the report.
  return 0;
}

int forking() {
  for (int i = 0; i < 20; ++i) one_step();
  const pid_t child = fork();
  if (child == 0) {
    g_forked_child = true;
    for (int i = 0; i < 20; ++i) one_step();  // must not record, must not hang
    std::exit(0);                             // runs atexit handlers in the child
  }
  int status = 0;
  waitpid(child, &status, 0);
  for (int i = 0; i < 20; ++i) one_step();
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 3;
}

// As a DataLoader worker starts: forked inside the parent's step and its
// data phase. The child runs its own 20 steps and exits without unwinding.
int fork_in_step() {
  for (int i = 0; i < 20; ++i) one_step();
  int status = 0;
  {
    STEPSCOPE_STEP();
    STEPSCOPE_PHASE("data");
    const pid_t child = fork();
    if (child == 0) {
      g_forked_child = true;
      for (int i = 0; i < 20; ++i) one_step();
      std::exit(0);
    }
    waitpid(child, &status, 0);
  }
  for (int i = 0; i < 20; ++i) one_step();
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 3;
}

// A DataLoader forking its workers for the next epoch while the collector's
// snapshot is stuck on a hung mount (tests/faults/hung_fs.cpp, LD_PRELOAD):
// the fork must not wait for it. Exit 4: the snapshot never got stuck.
int fork_when_hung() {
  const char* mark = std::getenv("HUNG_FS_MARK");
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (mark != nullptr && ::access(mark, F_OK) != 0)
    if (std::chrono::steady_clock::now() > until)
      return 4;
    else
      one_step();
  if (mark == nullptr) return 4;
  const pid_t child = fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  std::puts("forked");
  std::fflush(stdout);
  ::_exit(0);  // the exit handler would wait its bound for the stuck collector
}

// A DataLoader forking its workers as the first epoch starts, while the
// collector thread is still starting (slowed by tests/faults/hung_fs.cpp's
// HUNG_FS_FOR_MS): prints whether the start was over when fork() returned.
// The child registers an exit handler, as an imported module does.
int fork_at_start() {
  one_step();
  const pid_t child = fork();
  if (child == 0) {
    g_forked_child = true;
    std::atexit([] {});
    std::exit(0);
  }
  const auto* released = reinterpret_cast<const std::atomic<int>*>(::dlsym(RTLD_DEFAULT, "hung_fs_released"));
  const int start_over = released != nullptr ? released->load() : -1;
  int status = 0;
  waitpid(child, &status, 0);
  std::printf("start-over-at-fork=%d\n", start_over);
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
  one_step();
  // The ordering holds for handlers registered before stepscope *started*:
  // its exit handler is registered by the collector thread at the end of its
  // start-up (after the device probe, so it runs before the CUDA runtime's).
  // snapshot() waits for that start-up; without the wait a busy machine can
  // end this short run first (seen in CI under ASan), and the report is then
  // written by the handler registered when the library loaded, after this one.
  (void)stepscope::snapshot();
  for (int i = 1; i < steps; ++i) one_step();
  return 0;  // the report is written at exit, by finish()
}

int exit_quick() {
  one_step();
  return 0;
}

void touch(const char* name) {
  if (std::FILE* f = std::fopen(name, "w")) std::fclose(f);
}

int signal_at_start(int sig) {
  one_step();
  ::raise(sig);
  return 0;
}

int forever() {
  for (int i = 0;; ++i) {
    one_step();
    if (i == 20) touch("running");
  }
}

int abort_after(int ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < until) one_step();
  std::abort();
}

void step_for(int ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < until) one_step();
}

int throw_after(int ms) {
  step_for(ms);
  throw std::runtime_error("CUDA out of memory. Tried to allocate 2.00 GiB\n(second line, not kept)");
}

// A program that sets its configuration, then fails before its first step
// (PyTorch's MNIST example run from the wrong folder: the dataset throws).
int early_end(const std::string& how) {
  if (how != "throw-bare") stepscope::set_config("batch_size", 64);
  if (how != "exit") throw std::runtime_error("Error opening images file at ./data/train-images-idx3-ubyte");
  return how == "exit" ? 3 : 0;
}

int throw_from_thread(int ms) {
  std::thread worker([ms] {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    throw probe::BadBatch("batch 17 has NaN labels");
  });
  for (;;) one_step();
}

int terminate_after(int ms) {
  step_for(ms);
  std::terminate();
}

int own_terminate(int ms) {
  std::set_terminate([] {
    touch("own-terminate");
    std::_Exit(9);
  });
  return throw_after(ms);
}

int segv_after(int ms) {
  std::thread worker([ms] {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    volatile std::uintptr_t address = 8;  // read at run time: the compiler cannot turn the store into a trap
    *reinterpret_cast<volatile int*>(address) = 1;
  });
  for (;;) one_step();
}

void own_term_handler(int) {
  const int fd = ::open("own-handler", O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) ::close(fd);
  ::_exit(7);
}

int own_handler(const std::string& when) {
  struct sigaction sa {};
  sa.sa_handler = own_term_handler;
  sigemptyset(&sa.sa_mask);
  if (when == "before") ::sigaction(SIGTERM, &sa, nullptr);
  for (int i = 0; i < 5; ++i) one_step();
  // The collector installs its handlers once it has started: wait for that
  // (snapshot() returns once the collector is ready), then install ours.
  (void)stepscope::snapshot();
  if (when == "after") ::sigaction(SIGTERM, &sa, nullptr);
  return forever();
}

int big_exit(int phases) {
  // Sites need storage that outlives the exit's report (PhaseSite points at
  // its name): never destroyed, as STEPSCOPE_PHASE's own sites are.
  static auto& names = *new std::vector<std::string>;
  static auto& sites = *new std::vector<stepscope::detail::PhaseSite>;
  names.reserve(static_cast<std::size_t>(phases));
  sites.reserve(static_cast<std::size_t>(phases));
  for (int i = 0; i < phases; ++i) {
    names.push_back("phase_" + std::to_string(i));
    sites.push_back(
        stepscope::detail::PhaseSite{names.back().c_str(), stepscope::PhaseKind::other, false, __FILE__, __LINE__});
  }
  for (int step = 0; step < 8; ++step) {
    STEPSCOPE_STEP();
    for (auto& site : sites) stepscope::ScopedPhase phase(&site);
  }
  touch("running");
  return 0;
}

int flood() {
  { STEPSCOPE_STEP(); }  // the step thread registers first: its ring is drained first
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  for (int t = 0; t < 8; ++t)
    workers.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        STEPSCOPE_PHASE("flood");
      }
    });
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  while (std::chrono::steady_clock::now() < until) {
    STEPSCOPE_STEP();
    spin_us(1);
  }
  stop = true;
  for (auto& w : workers) w.join();
  std::printf("work-done\n");
  std::fflush(stdout);
  return 0;
}

int burst(int n) {
  for (int i = 0; i < n; ++i) {
    STEPSCOPE_PHASE("burst");
  }
  return 0;
}

int fork_early(int children) {
  std::vector<pid_t> pids;
  for (int c = 0; c < children; ++c) {
    const pid_t pid = fork();
    if (pid == 0) {
      g_forked_child = true;
      for (int i = 0; i < 30; ++i) one_step();
      std::exit(0);
    }
    pids.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  return failed == 0 ? 0 : 3;
}

int exit_after(int ms) {
  step_for(ms);
  ::_exit(3);
}

int chatty() {
  for (int i = 0;; ++i) {
    one_step();
    std::printf("step %d\n", i);
    std::fflush(stdout);
    if (i == 20) touch("running");
  }
}

int printing(int steps) {
  std::printf("program output before\n");
  std::fflush(stdout);
  const int status = workload(steps);
  std::printf("program output after\n");
  std::fflush(stdout);
  return status;
}

int idle(int ms) {
  (void)stepscope::enabled();
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return 0;
}

int big_exit_thread(int phases) {
  std::thread([] {
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }).detach();
  return big_exit(phases);
}

}  // namespace

#if defined(__SANITIZE_ADDRESS__)
#define PROBE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PROBE_ASAN 1
#endif
#endif
#if defined(PROBE_ASAN)
// LeakSanitizer's hook: non-zero turns its exit check off (see g_forked_child).
extern "C" int __lsan_is_turned_off() {
  return g_forked_child ? 1 : 0;
}
#endif

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "workload";
  const int n = argc > 2 ? std::atoi(argv[2]) : 100;
  if (mode == "workload") return workload(n);
  if (mode == "threads") return threads(n);
  if (mode == "fork") return forking();
  if (mode == "fork-in-step") return fork_in_step();
  if (mode == "fork-when-hung") return fork_when_hung();
  if (mode == "fork-at-start") return fork_at_start();
  if (mode == "exit-order") return exit_order(n);
  if (mode == "exit-quick") return exit_quick();
  if (mode == "forever") return forever();
  if (mode == "signal-at-start") return signal_at_start(n);
  if (mode == "abort") return abort_after(n);
  if (mode == "segv") return segv_after(n);
  if (mode == "own-handler") return own_handler(argc > 2 ? argv[2] : "before");
  if (mode == "big-exit") return big_exit(n);
  if (mode == "flood") return flood();
  if (mode == "burst") return burst(n);
  if (mode == "fork-early") return fork_early(n);
  if (mode == "throw") return throw_after(n);
  if (mode == "early-end") return early_end(argc > 2 ? argv[2] : "exit");
  if (mode == "throw-thread") return throw_from_thread(n);
  if (mode == "terminate") return terminate_after(n);
  if (mode == "own-terminate") return own_terminate(n);
  if (mode == "exit-after") return exit_after(n);
  if (mode == "chatty") return chatty();
  if (mode == "idle") return idle(n);
  if (mode == "printing") return printing(n);
  if (mode == "big-exit-thread") return big_exit_thread(n);
  std::fprintf(stderr, "probe: unknown mode %s\n", mode.c_str());
  return 2;
}

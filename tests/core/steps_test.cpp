// stepscope::steps() and next_step() in this process: which steps and data
// phases a loop records (STL containers, a temporary, an input iterator, a
// lazy iterator, break, an exception, an empty range, threads), read back
// through snapshot(). Timing-free: only counts and the scope bookkeeping.
#include <stepscope/stepscope.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <list>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace stepscope;

namespace {

// Before the first scope reads the environment: no warm-up (every step
// counts), no report or summary at exit.
const bool g_environment = [] {
  ::setenv("STEPSCOPE_WARMUP", "0", 1);
  ::setenv("STEPSCOPE_QUIET", "1", 1);
  ::setenv("STEPSCOPE_OUT", "/dev/null", 1);
  return true;
}();

struct Counts {
  std::uint64_t steps = 0;
  std::uint64_t unended = 0;  // steps not known to be whole (steps.unended_excluded)
  std::uint64_t data_in_step = 0;
  std::uint64_t data_outside = 0;
};

Counts counts() {
  const Report r = snapshot();
  Counts c;
  c.steps = r.steps.count + r.steps.warmup_excluded;
  c.unended = r.steps.unended_excluded;
  for (const auto& p : r.phases) {
    if (p.name != "data") continue;
    if (p.thread_role == ThreadRole::step) c.data_in_step += p.count;
    if (p.thread_role == ThreadRole::outside_step) c.data_outside += p.count;
  }
  return c;
}

Counts delta(const Counts& before) {
  const Counts now = counts();
  return Counts{now.steps - before.steps, now.unended - before.unended, now.data_in_step - before.data_in_step,
                now.data_outside - before.data_outside};
}

// The thread's scope bookkeeping is back where it was.
void require_balanced() {
  CHECK(detail::t_thread_state.depth == 0);
  CHECK(detail::t_thread_state.step_depth == 0);
  CHECK(detail::t_thread_state.outer_steps == 0);
}

// An input iterator whose work happens in operator* (like a lazy transform):
// counts the dereferences so the test can see each batch was fetched once.
struct LazyRange {
  int n;
  int* dereferences;
  struct iterator {
    int i;
    int* dereferences;
    int operator*() const {
      ++*dereferences;
      return i * 10;
    }
    iterator& operator++() {
      ++i;
      return *this;
    }
    bool operator!=(const iterator& o) const { return i != o.i; }
  };
  iterator begin() const { return {0, dereferences}; }
  iterator end() const { return {n, dereferences}; }
};

// A range over an istream: begin() reads the first value (a fetch in begin()).
struct IntStream {
  std::istringstream in;
  explicit IntStream(const std::string& text) : in(text) {}
  std::istream_iterator<int> begin() { return std::istream_iterator<int>(in); }
  std::istream_iterator<int> end() { return {}; }
};

// A loader whose fetch runs a per-sample transform in a phase of its own
// (begin() and operator++ produce the next batch, like a torch::data
// loader's): `on_end` also runs it in the fetch that finds the end.
struct TransformingLoader {
  int n;
  bool on_end;
  struct iterator {
    int i;
    const TransformingLoader* loader;
    void produce() const {
      if (i >= loader->n && !loader->on_end) return;
      STEPSCOPE_PHASE_KIND("transform", PhaseKind::input);
      volatile int work = 0;
      for (int k = 0; k < 1000; ++k) work = work + k;
    }
    int operator*() const { return i; }
    iterator& operator++() {
      ++i;
      produce();
      return *this;
    }
    bool operator!=(const iterator& o) const { return i != o.i; }
  };
  iterator begin() const {
    iterator it{0, this};
    it.produce();
    return it;
  }
  iterator end() const { return {n, this}; }
};

const PhaseSummary* phase_of(const Report& r, const std::string& name, ThreadRole role) {
  for (const auto& p : r.phases)
    if (p.name == name && p.thread_role == role) return &p;
  return nullptr;
}

}  // namespace

TEST_CASE("steps() over a vector: one step and one data phase per element", "[steps]") {
  REQUIRE(g_environment);
  (void)counts();  // starts the run time
  REQUIRE(enabled());
  std::vector<int> v{1, 2, 3, 4, 5, 6, 7};
  const Counts before = counts();
  int sum = 0;
  for (auto& x : stepscope::steps(v)) {
    STEPSCOPE_PHASE("forward");
    x += 1;
    sum += x;
  }
  require_balanced();
  CHECK(sum == 35);
  CHECK(v[0] == 2);  // auto& referred to the elements themselves
  const Counts d = delta(before);
  CHECK(d.steps == 7);
  CHECK(d.data_in_step == 7);
  CHECK(d.data_outside == 1);  // the last fetch found the end: outside any step
}

TEST_CASE("steps() compiles with auto&, const auto&, auto&& and by value, and owns a temporary", "[steps]") {
  const std::vector<int> v{1, 2, 3};
  const Counts before = counts();
  int sum = 0;
  for (const auto& x : stepscope::steps(v)) sum += x;
  for (auto&& x : stepscope::steps(v)) sum += x;
  for (auto x : stepscope::steps(v)) sum += x;
  // A temporary is moved into the adaptor and lives as long as the loop.
  for (auto& s : stepscope::steps(std::vector<std::string>{"a", "bb", "ccc"})) sum += static_cast<int>(s.size());
  std::map<std::string, int> m{{"x", 1}, {"y", 2}};
  for (auto& [key, value] : stepscope::steps(m)) sum += value + static_cast<int>(key.size());
  std::list<int> l{4, 5};
  for (auto& x : stepscope::steps(l)) sum += x;
  require_balanced();
  CHECK(sum == 6 * 3 + 6 + 5 + 9);
  CHECK(delta(before).steps == 3 * 3 + 3 + 2 + 2);
}

TEST_CASE("steps() over input iterators: begin() and operator* may do the fetch", "[steps]") {
  const Counts before = counts();
  IntStream numbers("3 1 4 1 5");
  int sum = 0;
  for (int x : stepscope::steps(numbers)) sum += x;
  CHECK(sum == 14);
  int dereferences = 0;
  int lazy_sum = 0;
  for (int x : stepscope::steps(LazyRange{4, &dereferences})) lazy_sum += x;
  CHECK(lazy_sum == 60);
  CHECK(dereferences == 4);
  require_balanced();
  const Counts d = delta(before);
  CHECK(d.steps == 5 + 4);
  CHECK(d.data_in_step == 5 + 4);
}

TEST_CASE(
    "steps(): break and return close the step in progress; a step left before its body recorded anything is left "
    "out",
    "[steps]") {
  std::vector<int> v(10, 1);
  Counts before = counts();
  int seen = 0;
  for (auto& x : stepscope::steps(v)) {
    STEPSCOPE_PHASE("forward");
    seen += x;
    if (seen == 3) break;  // after the body's work: a whole step
  }
  require_balanced();
  auto first_even = [](const std::vector<int>& w) {
    for (auto& x : stepscope::steps(w)) {
      STEPSCOPE_PHASE("forward");
      if (x % 2 == 0) return x;
    }
    return -1;
  };
  CHECK(first_even({1, 3, 6, 7}) == 6);
  require_balanced();
  Counts d = delta(before);
  CHECK(d.steps == 3 + 3);
  CHECK(d.unended == 0);
  CHECK(d.data_in_step == 3 + 3);
  CHECK(d.data_outside == 0);  // no fetch found the end

  // `if (i == limit) break;` at the top of the body (PyTorch's C++ dcgan with
  // a batch limit): the last step fetched a batch and did nothing. Read as a
  // step it was 0.08 ms beside steps of 1.1 s, and a steady loop's CV read 21%.
  before = counts();
  int i = 0;
  for (auto& x : stepscope::steps(v)) {
    if (i++ == 3) break;
    STEPSCOPE_PHASE("forward");
    (void)x;
  }
  require_balanced();
  d = delta(before);
  CHECK(d.steps == 3);
  CHECK(d.unended == 1);
  CHECK(d.data_in_step == 4);  // its fetch stays in the phase table

  // A loop's only step is kept: nothing says it is not a whole one.
  before = counts();
  for (auto& x : stepscope::steps(v)) {
    (void)x;
    break;
  }
  d = delta(before);
  CHECK(d.steps == 1);
  CHECK(d.unended == 0);
}

TEST_CASE("steps(): an exception in the body or in the fetch closes the step", "[steps]") {
  std::vector<int> v{1, 2, 3, 4};
  const Counts before = counts();
  try {
    for (auto& x : stepscope::steps(v)) {
      STEPSCOPE_PHASE("forward");
      if (x == 2) throw std::runtime_error("body");
    }
  } catch (const std::runtime_error&) {
  }
  require_balanced();
  // A fetch that throws (operator++ of the wrapped iterator).
  struct Throwing {
    struct iterator {
      int i;
      int operator*() const { return i; }
      iterator& operator++() {
        if (++i == 3) throw std::runtime_error("fetch");
        return *this;
      }
      bool operator!=(const iterator& o) const { return i != o.i; }
    };
    iterator begin() const { return {0}; }
    iterator end() const { return {10}; }
  };
  int body_runs = 0;
  try {
    for (int x : stepscope::steps(Throwing{})) body_runs += x >= 0 ? 1 : 0;
  } catch (const std::runtime_error&) {
  }
  require_balanced();
  CHECK(body_runs == 3);
  const Counts d = delta(before);
  CHECK(d.steps == 2 + 3);
  CHECK(d.data_in_step == 2 + 3);
  CHECK(d.data_outside == 1);  // the fetch that threw
}

TEST_CASE("steps() over an empty range records no step", "[steps]") {
  const Counts before = counts();
  std::vector<int> empty;
  int runs = 0;
  for (auto& x : stepscope::steps(empty)) runs += x;
  require_balanced();
  CHECK(runs == 0);
  const Counts d = delta(before);
  CHECK(d.steps == 0);
  CHECK(d.data_outside == 1);
}

TEST_CASE("steps() nested in a STEPSCOPE_PHASE keeps the phases inside its steps", "[steps]") {
  std::vector<int> v{1, 2, 3};
  const Report before = snapshot();
  {
    STEPSCOPE_PHASE("epoch");
    for (auto& x : stepscope::steps(v)) {
      STEPSCOPE_PHASE("optimizer");
      (void)x;
    }
  }
  require_balanced();
  const Report after = snapshot();
  auto count_of = [](const Report& r, const char* name, ThreadRole role) {
    for (const auto& p : r.phases)
      if (p.name == name && p.thread_role == role) return p.count;
    return std::uint64_t{0};
  };
  CHECK(count_of(after, "optimizer", ThreadRole::step) - count_of(before, "optimizer", ThreadRole::step) == 3);
  CHECK(count_of(after, "epoch", ThreadRole::outside_step) - count_of(before, "epoch", ThreadRole::outside_step) == 1);
}

TEST_CASE(
    "next_step() ends the previous step and opens the next; the last, closed by the run's or the thread's end, is "
    "left out and counted",
    "[steps]") {
  Counts before = counts();
  for (int i = 0; i < 5; ++i) {
    stepscope::next_step();
    STEPSCOPE_PHASE("forward");
  }
  CHECK(detail::t_thread_state.next_step.active);
  CHECK(delta(before).steps == 4);                  // the fifth is still open
  detail::close_next_step(detail::t_thread_state);  // what finish() does on this thread
  CHECK_FALSE(detail::t_thread_state.next_step.active);
  require_balanced();
  // No next call ended the fifth: it would hold whatever ran after the loop
  // (seen: a Python loop's last step took the 1 s after it, max 4700x p50).
  CHECK(delta(before).steps == 4);
  CHECK(delta(before).unended == 1);

  before = counts();
  std::thread worker([] {
    for (int i = 0; i < 3; ++i) stepscope::next_step();
  });
  worker.join();
  CHECK(delta(before).steps == 2);
  CHECK(delta(before).unended == 1);  // the third, closed by the thread's exit
}

TEST_CASE("steps() loops one after another (epochs): the gap between them is a loop boundary, not a step's",
          "[steps]") {
  // pytorch/examples' ddp-tutorial single_gpu.py: an epoch loop around
  // `for batch in steps(loader)`, a checkpoint saved between epochs. The
  // save ran in no step, yet read "steps cover 79%: the likely cause is the
  // fetch in the loop header — iterate steps()", which the loop already did.
  std::vector<int> v{1, 2, 3, 4};
  for (const bool leave_by_break : {false, true}) {
    INFO("first epoch left by " << (leave_by_break ? "break" : "its end"));
    for (int x : stepscope::steps(v)) {
      if (leave_by_break && x == 3) break;
    }
    const Report before = snapshot();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the checkpoint
    for (int x : stepscope::steps(v)) (void)x;
    const Report after = snapshot();
    CHECK(after.steps.loop_boundaries - before.steps.loop_boundaries == 1);
    // >= the sleep, less 5% for the tick clock's calibration.
    CHECK(after.steps.between_loops_ms - before.steps.between_loops_ms >= 19.0);
    // steps() times each fetch inside a loop: nothing falls between its steps.
    CHECK(after.steps.between_steps_ms == before.steps.between_steps_ms);
  }
  // A steps() loop inside an outer step: the outer step is a loop of steps
  // (counted apart), the loop's steps are the steps, and from the end of one
  // such loop to the next is a loop boundary. (The first outer step follows
  // the loops above: that gap is a loop boundary, taken first.)
  { STEPSCOPE_STEP(); }
  const Report before = snapshot();
  for (int outer = 0; outer < 2; ++outer) {
    {
      STEPSCOPE_STEP();
      for (int x : stepscope::steps(v)) (void)x;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const Report after = snapshot();
  CHECK(after.steps.outer_excluded - before.steps.outer_excluded == 2);
  CHECK(after.steps.count + after.steps.warmup_excluded - before.steps.count - before.steps.warmup_excluded == 8);
  CHECK(after.steps.loop_boundaries - before.steps.loop_boundaries == 1);
  CHECK(after.steps.between_loops_ms - before.steps.between_loops_ms >= 4.75);
  require_balanced();
}

TEST_CASE("two steps() loops in lockstep (a zip): the second's steps are the steps, both fetches data", "[steps]") {
  std::vector<int> a{1, 2, 3, 4, 5}, b{10, 20, 30, 40};
  for (const bool first_ends_first : {false, true}) {
    INFO((first_ends_first ? "the first range is shorter" : "the second range is shorter"));
    const Counts before = counts();
    const Report before_report = snapshot();
    {
      std::vector<int> first = first_ends_first ? b : a, second = first_ends_first ? a : b;
      auto ra = stepscope::steps(first);
      auto rb = stepscope::steps(second);
      auto ia = ra.begin();
      auto ib = rb.begin();
      int pairs = 0;
      while (ia != ra.end() && ib != rb.end()) {
        (void)*ia;
        (void)*ib;
        {
          STEPSCOPE_PHASE("forward");
          ++pairs;
        }
        ++ia;
        ++ib;
      }
      CHECK(pairs == 4);
    }
    const Counts d = delta(before);
    const Report after = snapshot();
    CHECK(d.steps == 4);  // one a pair
    CHECK(after.steps.outer_excluded - before_report.steps.outer_excluded == 1);
    // Every fetch of both loops is a data phase: 5 each (the loop's ++ of
    // both before the comparison that ends it).
    CHECK(d.data_in_step + d.data_outside == 10);
    CHECK_FALSE(detail::t_thread_state.deferred.active);
    require_balanced();
  }
}

TEST_CASE("next_step() inside a steps() loop or a step scope does nothing and is counted", "[steps]") {
  std::vector<int> v{1, 2, 3, 4};
  const Report before = snapshot();
  for (int x : stepscope::steps(v)) {
    stepscope::next_step();  // the loop marks the steps already
    (void)x;
  }
  {
    STEPSCOPE_STEP();
    stepscope::next_step();
  }
  const Report after = snapshot();
  CHECK(after.steps.next_step_ignored - before.steps.next_step_ignored == 5);
  CHECK(after.steps.count + after.steps.warmup_excluded - before.steps.count - before.steps.warmup_excluded == 5);
  CHECK(after.steps.outer_excluded == before.steps.outer_excluded);
  CHECK_FALSE(detail::t_thread_state.next_step.active);
  require_balanced();
}

TEST_CASE("a fetch that finds the end gives its step number back: steps are numbered without gaps across epochs",
          "[steps]") {
  // A checkpoint every 4 steps by the program's own count across 3 epochs of
  // 4 steps: the slow steps' numbers must stay 4 apart.
  std::vector<int> v{1, 2, 3, 4}, none;
  const std::uint32_t before = detail::g_steps_started.load();
  for (int epoch = 0; epoch < 3; ++epoch)
    for (int x : stepscope::steps(v)) (void)x;
  for (int x : stepscope::steps(none)) (void)x;  // an empty range opens no step either
  CHECK(detail::g_steps_started.load() - before == 12);
  require_balanced();
}

TEST_CASE("the first step of each later steps() loop is counted: an epoch start that restarts the loader", "[steps]") {
  // pytorch/examples' dcgan: `for epoch ...: for data in loader` with
  // workers; each epoch's iter(loader) starts new workers, so the first step
  // of epoch 2, 3, ... waits for them.
  std::vector<int> v{1, 2, 3, 4};
  // Past any warm-up, and after a step that ended no loop (whatever test ran before).
  for (int i = 0; i < 10; ++i) {
    STEPSCOPE_STEP();
  }
  const Report before = snapshot();
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (int x : stepscope::steps(v)) {
      if (epoch > 0 && x == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the restart
    }
  }
  const Report after = snapshot();
  CHECK(after.steps.loop_first_steps - before.steps.loop_first_steps == 2);  // epochs 1 and 2
  CHECK(after.steps.loop_boundaries - before.steps.loop_boundaries == 2);
  // >= the sleeps, less 5% for the tick clock's calibration.
  CHECK(after.steps.loop_first_ms - before.steps.loop_first_ms >= 38.0);
  CHECK(after.steps.loop_first_max_ms >= 19.0);
  require_balanced();
}

TEST_CASE("an evaluation loop's steps are not steps: its time is between the training loops", "[steps]") {
  // pytorch/examples' minGPT-ddp runs its test loader through the same
  // steps() loop as its training data: 619 training steps of ~730 ms and 70
  // evaluation steps of 313 ms read as 687 ms per step. The Python package
  // calls StepLoop::evaluation() when the step that just ran evaluated, or
  // evaluation_loop() before the first fetch when gradients are off there;
  // this drives a StepLoop the way its steps() iterator does: `batches`
  // iterations of a 10 ms forward_no_grad.
  const auto evaluate = [](int batches, bool known_at_start) {
    detail::StepLoop loop(detail::step_call_site(__FILE__, __LINE__));
    if (known_at_start) loop.evaluation_loop();
    for (int i = 0;; ++i) {
      if (i > 0) loop.evaluation();  // the step before evaluated (a no-op once no step is open)
      loop.fetch_starts();
      if (i == batches) {
        loop.fetched(false);
        break;
      }
      loop.fetched(true);
      loop.dereferenced();
      STEPSCOPE_PHASE_KIND("forward_no_grad", PhaseKind::compute);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    loop.end_loop();
  };
  const auto forward_no_grad = [](const Report& r, ThreadRole role) {
    const PhaseSummary* p = phase_of(r, "forward_no_grad", role);
    return p ? p->count : 0;
  };
  std::vector<int> v{1, 2, 3, 4};
  for (int x : stepscope::steps(v)) (void)x;  // training, then the boundary below is taken from here
  const Report before = snapshot();
  evaluate(3, false);
  for (int x : stepscope::steps(v)) (void)x;
  const Report after = snapshot();
  CHECK(after.steps.count + after.steps.warmup_excluded - before.steps.count - before.steps.warmup_excluded == 4);
  CHECK(after.steps.evaluation_loops - before.steps.evaluation_loops == 1);
  CHECK(after.steps.unended_excluded == before.steps.unended_excluded);
  // One gap between the two training loops, holding the whole evaluation
  // (>= its sleeps, less 5% for the tick clock's calibration).
  CHECK(after.steps.loop_boundaries - before.steps.loop_boundaries == 1);
  CHECK(after.steps.between_loops_ms - before.steps.between_loops_ms >= 28.5);
  CHECK(after.steps.between_steps_ms == before.steps.between_steps_ms);
  // The first evaluation step's phase was in a step; the rest in none, with the loop's fetches.
  CHECK(forward_no_grad(after, ThreadRole::step) - forward_no_grad(before, ThreadRole::step) == 1);
  CHECK(forward_no_grad(after, ThreadRole::outside_step) - forward_no_grad(before, ThreadRole::outside_step) == 2);
  // The evaluation loop's fetches after its first, and the training loop's end.
  const PhaseSummary* data_after = phase_of(after, "data", ThreadRole::outside_step);
  const PhaseSummary* data_before = phase_of(before, "data", ThreadRole::outside_step);
  CHECK((data_after ? data_after->count : 0) - (data_before ? data_before->count : 0) == 4);
  require_balanced();

  // Known before its first fetch (pytorch/examples' mnist: `with
  // torch.no_grad(): for ... in steps(test_loader)`): no step at all.
  evaluate(2, true);
  for (int x : stepscope::steps(v)) (void)x;
  const Report last = snapshot();
  CHECK(last.steps.count + last.steps.warmup_excluded - after.steps.count - after.steps.warmup_excluded == 4);
  CHECK(last.steps.evaluation_loops - after.steps.evaluation_loops == 1);
  CHECK(last.steps.loop_boundaries - after.steps.loop_boundaries == 1);
  CHECK(last.steps.between_loops_ms - after.steps.between_loops_ms >= 19.0);
  CHECK(forward_no_grad(last, ThreadRole::step) == forward_no_grad(after, ThreadRole::step));
  CHECK(forward_no_grad(last, ThreadRole::outside_step) - forward_no_grad(after, ThreadRole::outside_step) == 2);
  require_balanced();
}

// A stand-in for libtorch's c10::GradMode, exported from this executable
// (ENABLE_EXPORTS): the symbol detail::evaluates_from_start looks up.
// torch::NoGradGuard sets the flag it reads; so does this test.
namespace c10 {
struct GradMode {
  static bool is_enabled();
};
}  // namespace c10
namespace {
thread_local bool t_grad_enabled = true;
}  // namespace
bool c10::GradMode::is_enabled() {
  return t_grad_enabled;
}
// And libtorch's at::get_num_threads(): the intra-op threads a steps() loop
// reads at its start for the report (a libtorch program; Python records its own).
namespace at {
int get_num_threads();
}  // namespace at
namespace {
std::atomic<int> g_torch_threads{3};
}  // namespace
int at::get_num_threads() {
  return g_torch_threads.load();
}

TEST_CASE("a steps() loop begun under torch::NoGradGuard after one with gradients is an evaluation loop", "[steps]") {
  // pytorch/examples' cpp/mnist and cpp/custom-dataset test under
  // torch::NoGradGuard: a user's `for (auto& batch : stepscope::steps(*test_loader))`
  // counted the test batches as training steps. Each case on a fresh thread
  // (the rule is per thread).
  std::vector<int> v{1, 2, 3, 4};
  const auto counted = [](const Report& r) { return r.steps.count + r.steps.warmup_excluded; };
  const Report before = snapshot();
  std::thread([&v] {
    for (int x : stepscope::steps(v)) (void)x;  // training: gradients on
    t_grad_enabled = false;                     // torch::NoGradGuard
    for (int x : stepscope::steps(v)) (void)x;  // the test loop: no steps
    t_grad_enabled = true;
    for (int x : stepscope::steps(v)) (void)x;
  }).join();
  const Report after = snapshot();
  CHECK(counted(after) - counted(before) == 8);
  CHECK(after.steps.evaluation_loops - before.steps.evaluation_loops == 1);
  // A thread that never ran a loop with gradients on (inference): its steps are steps.
  std::thread([&v] {
    t_grad_enabled = false;
    for (int x : stepscope::steps(v)) (void)x;
    for (int x : stepscope::steps(v)) (void)x;
  }).join();
  const Report inference = snapshot();
  CHECK(counted(inference) - counted(after) == 8);
  CHECK(inference.steps.evaluation_loops == after.steps.evaluation_loops);
  // torch's intra-op threads, read at each loop's start, are the run's (the
  // CPU compute advice names them: classify_test).
  CHECK(detail::torch_intra_op_threads() == 3);
  CHECK(inference.run.config.at("intra_op_threads") == "3");
  CHECK(inference.run.config_types.at("intra_op_threads") == "number");
  g_torch_threads = 2;  // torch::set_num_threads(2) before the next loop
  std::thread([&v] {
    for (int x : stepscope::steps(v)) (void)x;
  }).join();
  CHECK(snapshot().run.config.at("intra_op_threads") == "2");
  require_balanced();
}

TEST_CASE("steps() call sites are told apart by file:line and reused", "[steps]") {
  const detail::StepCallSite* a = detail::step_call_site(__FILE__, 1001);
  const detail::StepCallSite* b = detail::step_call_site(__FILE__, 1002);
  CHECK(a != b);
  CHECK(detail::step_call_site(__FILE__, 1001) == a);
  // The same place spelled by another pointer (another translation unit).
  const std::string copy = __FILE__;
  CHECK(detail::step_call_site_slow(copy.c_str(), 1001) == a);
  CHECK(a->step.is_step);
  CHECK(a->data.kind == PhaseKind::input);
  CHECK(a->data.line == 1001);
}

TEST_CASE("steps(): phases nested in the fetch are inside the step they feed, under its data phase", "[steps]") {
  // Issue 32: a per-sample transform inside the loader's fetch was reported
  // outside every step while the coverage said 100%.
  const auto transform_count = [](const Report& r, ThreadRole role) {
    const PhaseSummary* p = phase_of(r, "transform", role);
    return p != nullptr ? p->count : std::uint64_t{0};
  };
  const auto totals = [](const Report& r, const char* name) {
    const PhaseSummary* p = phase_of(r, name, ThreadRole::step);
    return p != nullptr ? std::make_pair(p->host_ms.total, p->self_ms.total) : std::make_pair(0.0, 0.0);
  };
  const Report before = snapshot();
  const Counts counted = counts();
  int sum = 0;
  for (int x : stepscope::steps(TransformingLoader{6, false})) {
    STEPSCOPE_PHASE("forward");
    sum += x;
  }
  require_balanced();
  CHECK(sum == 15);
  const Report after = snapshot();
  CHECK(delta(counted).steps == 6);
  CHECK(transform_count(after, ThreadRole::step) - transform_count(before, ThreadRole::step) == 6);
  CHECK(transform_count(after, ThreadRole::outside_step) == transform_count(before, ThreadRole::outside_step));
  // Nested under the data phase: its time is the data phase's child, not
  // counted twice (the data phase's self time excludes it).
  const auto data_before = totals(before, "data"), data_after = totals(after, "data");
  const auto transform_before = totals(before, "transform"), transform_after = totals(after, "transform");
  const double data_children = (data_after.first - data_before.first) - (data_after.second - data_before.second);
  CHECK(data_children == Approx(transform_after.first - transform_before.first).epsilon(1e-6).margin(1e-6));

  // The fetch that finds the end runs the transform too: no step, and the
  // scope bookkeeping is balanced for the next loop.
  const Counts again = counts();
  for (int x : stepscope::steps(TransformingLoader{3, true})) sum += x;
  require_balanced();
  const Counts d = delta(again);
  CHECK(d.steps == 3);
  CHECK(d.data_outside == 1);
}

// Run-time-named sites (<stepscope/site.hpp>): interning (same name and kind,
// same site; the name is copied), scopes on them reach the report under their
// name, and the bound: past kMaxRuntimeSites distinct sites, site() answers
// the kind's overflow site, and the report counts every such call.
// Timing-free: counts and identities only.
#include <stepscope/stepscope.hpp>

#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

using namespace stepscope;

namespace {

const bool g_environment = [] {
  ::setenv("STEPSCOPE_WARMUP", "0", 1);
  ::setenv("STEPSCOPE_QUIET", "1", 1);
  ::setenv("STEPSCOPE_OUT", "/dev/null", 1);
  return true;
}();

std::uint64_t phase_count(const Report& r, const std::string& name, PhaseKind kind) {
  std::uint64_t n = 0;
  for (const auto& p : r.phases)
    if (p.name == name && p.kind == kind) n += p.count;
  return n;
}

}  // namespace

TEST_CASE("site: the same name and kind give the same site, the name is copied") {
  std::string name = "layer.17.attention";
  const Site a = site(name, PhaseKind::compute);
  name[0] = 'X';  // the caller's string changes or goes away: the site keeps its copy
  const Site b = site("layer.17.attention", PhaseKind::compute);
  CHECK(a == b);
  CHECK(std::string(a.name()) == "layer.17.attention");
  CHECK(a.kind() == PhaseKind::compute);
  CHECK_FALSE(a.is_step());
  CHECK(site("layer.17.attention", PhaseKind::memory) != a);  // kind is part of the identity
  CHECK(site("layer.18.attention", PhaseKind::compute) != a);
  CHECK(step_site("layer.17.attention") != a);
  CHECK(step_site().is_step());
  // The kind from the name, as STEPSCOPE_PHASE does.
  CHECK(site("data").kind() == PhaseKind::input);
  CHECK(site("h2d").kind() == PhaseKind::memory);
  CHECK(site("backward").kind() == PhaseKind::compute);
  CHECK(site("something else").kind() == PhaseKind::other);
  // A default Site is a valid (unnamed) site, never null.
  const Site unnamed;
  CHECK(unnamed.get() != nullptr);
}

TEST_CASE("site: threads interning the same names agree") {
  std::vector<const detail::PhaseSite*> seen(4 * 50);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t, &seen] {
      for (int i = 0; i < 50; ++i) seen[static_cast<std::size_t>(t * 50 + i)] = site("mt." + std::to_string(i)).get();
    });
  for (auto& th : threads) th.join();
  for (int t = 1; t < 4; ++t)
    for (int i = 0; i < 50; ++i) CHECK(seen[static_cast<std::size_t>(t * 50 + i)] == seen[static_cast<std::size_t>(i)]);
}

// A DataLoader forks its workers while the collector thread builds a snapshot
// (which reads the site table under its lock): a worker that inherited the
// lock held hung at its first `stepscope.phase()` and the loop with it (seen
// once in 3 full test runs). fork() must hand the child a free lock.
TEST_CASE("site: a child forked while another thread interns names can intern its own") {
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    while (!stop.load(std::memory_order_relaxed)) (void)site("held-across-fork", PhaseKind::compute);
  });
  int hung = 0;
  for (int i = 0; i < 200 && hung == 0; ++i) {
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      (void)site("child-name", PhaseKind::input);  // no allocation: static storage
      ::_exit(0);
    }
    int status = 0;
    pid_t done = 0;
    // Generous for a busy machine: an interning takes microseconds.
    for (int waited_ms = 0; waited_ms < 20000 && (done = ::waitpid(child, &status, WNOHANG)) == 0; waited_ms += 1)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (done == 0) {
      ++hung;
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
    }
  }
  stop = true;
  busy.join();
  CHECK(hung == 0);
}

TEST_CASE("site: ScopedPhase and ScopedStep on run-time sites reach the report under their names") {
  const Report before = snapshot();
  std::vector<Site> layers;
  for (int i = 0; i < 3; ++i) layers.push_back(site("rt.layer." + std::to_string(i), PhaseKind::compute));
  const Site step = step_site();
  for (int s = 0; s < 5; ++s) {
    ScopedStep st{step};
    for (const Site& layer : layers) {
      ScopedPhase p{layer};
    }
  }
  const Report after = snapshot();
  for (int i = 0; i < 3; ++i) {
    const std::string name = "rt.layer." + std::to_string(i);
    CHECK(phase_count(after, name, PhaseKind::compute) - phase_count(before, name, PhaseKind::compute) == 5);
  }
  CHECK(after.steps.count + after.steps.warmup_excluded - before.steps.count - before.steps.warmup_excluded == 5);
  CHECK(after.runtime_sites.sites >= 3);
  CHECK(after.runtime_sites.overflow == 0);
  CHECK(detail::t_thread_state.depth == 0);
  CHECK(detail::t_thread_state.step_depth == 0);
}

TEST_CASE("site: long names are cut to the bound and counted") {
  const std::string long_name(detail::kMaxRuntimeSiteNameLength + 40, 'n');
  const std::uint64_t before = detail::runtime_site_counts().truncated;
  const Site s = site(long_name, PhaseKind::other);
  CHECK(std::string(s.name()).size() == detail::kMaxRuntimeSiteNameLength);
  CHECK(detail::runtime_site_counts().truncated == before + 1);
  CHECK(site(long_name.substr(0, detail::kMaxRuntimeSiteNameLength), PhaseKind::other) == s);
}

// Last in this file: it fills the process's table.
TEST_CASE("site: past the bound, names share the overflow site and every such call is counted") {
  const detail::RuntimeSiteCounts start = detail::runtime_site_counts();
  REQUIRE(start.overflow == 0);
  const Site kept = site("kept.before.overflow", PhaseKind::compute);
  std::uint64_t interned = detail::runtime_site_counts().sites;
  int i = 0;
  while (interned < detail::kMaxRuntimeSites) {
    (void)site("fill." + std::to_string(i++), PhaseKind::other);
    interned = detail::runtime_site_counts().sites;
  }
  CHECK(detail::runtime_site_counts().overflow == 0);
  const Site over1 = site("over.1", PhaseKind::memory);
  const Site over2 = site("over.2", PhaseKind::memory);
  CHECK(over1 == over2);
  CHECK(std::string(over1.name()) == "(other run-time names)");
  CHECK(over1.kind() == PhaseKind::memory);  // the kind survives the overflow
  CHECK(site("over.3", PhaseKind::input).kind() == PhaseKind::input);
  CHECK(site("kept.before.overflow", PhaseKind::compute) == kept);  // names already interned still resolve
  CHECK(detail::runtime_site_counts().overflow == 3);
  CHECK(detail::runtime_site_counts().sites == detail::kMaxRuntimeSites);

  for (int n = 0; n < 4; ++n) {
    ScopedPhase p{over1};
  }
  const Report r = snapshot();
  CHECK(r.runtime_sites.overflow == 3);
  CHECK(phase_count(r, "(other run-time names)", PhaseKind::memory) == 4);
  bool warned = false;
  for (const auto& w : r.warnings) warned = warned || w.find("(other run-time names)") != std::string::npos;
  CHECK(warned);
  const std::string json = report_to_json(r);
  CHECK(json.find("\"runtime_sites\"") != std::string::npos);
  Report back;
  std::string error;
  REQUIRE(report_from_json(json, back, error));
  CHECK(back.runtime_sites.overflow == 3);
  CHECK(back.runtime_sites.sites == detail::kMaxRuntimeSites);
}

TEST_CASE("site: a phase's kind comes from the words of its name, the same rule for live scopes and traces") {
  using stepscope::default_phase_kind;
  using stepscope::PhaseKind;
  // Evaluated at compile time, as STEPSCOPE_PHASE does.
  static_assert(default_phase_kind("forward_pass") == PhaseKind::compute, "");
  struct Row {
    const char* name;
    PhaseKind kind;
  };
  // Names users write (live) and PyTorch/torchrec ranges (traces).
  const Row rows[] = {
      {"data", PhaseKind::input},
      {"## data ##", PhaseKind::input},
      {"data_loading", PhaseKind::input},
      {"Data Loading", PhaseKind::input},
      {"load_data", PhaseKind::input},
      {"enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", PhaseKind::input},
      {"get_batch", PhaseKind::input},
      {"forward", PhaseKind::compute},
      {"forward_pass", PhaseKind::compute},
      {"## forward ##", PhaseKind::compute},
      {"DistributedDataParallel.forward", PhaseKind::compute},
      {"backward_pass", PhaseKind::compute},
      {"optimizer_step", PhaseKind::compute},
      {"Optimizer.step#SGD.step", PhaseKind::compute},
      {"loss", PhaseKind::compute},
      {"zero_grad", PhaseKind::compute},
      {"h2d", PhaseKind::memory},
      {"copy_to_gpu", PhaseKind::memory},
      {"batch.to(device)", PhaseKind::memory},
      {"allreduce", PhaseKind::communication},
      {"all-reduce", PhaseKind::communication},
      {"record_param_comms", PhaseKind::communication},
      {"## SplitsAllToAllAwaitable wait() ##", PhaseKind::communication},
      {"## all2all_data:kjt splits ##", PhaseKind::communication},
      // Remote calls: stepscope.torch's rpc.wait, torch's RPC profiling ranges.
      {"rpc.wait", PhaseKind::communication},
      {"rpc_async#_call_method(trainer -> ps)", PhaseKind::communication},
      {"barrier", PhaseKind::communication},
      {"grpc_server", PhaseKind::other},
      // Words that only contain a marker, or "data" inside a longer name.
      {"recommend", PhaseKind::other},
      {"deepcopy_model", PhaseKind::other},
      {"## sparse_data_dist ##", PhaseKind::other},
      {"dataset_stats", PhaseKind::other},
      {"ProfilerStep#3", PhaseKind::other},
      {"checkpoint", PhaseKind::other},
      {"", PhaseKind::other},
  };
  for (const Row& row : rows) {
    INFO(row.name);
    CHECK(default_phase_kind(row.name) == row.kind);
  }
}

// tests/analysis/report_builder.hpp — builds Report facts in code for the
// analyzer's table-driven tests. Shares are given as fractions of a 100 ms step.
#pragma once

#include <stepscope/analysis.hpp>

#include "device_fact_key.hpp"

#include <algorithm>
#include <map>
#include <string>

namespace stepscope {
inline namespace v1 {
namespace test {

struct Shares {
  double input = 0, compute = 0, memory = 0, communication = 0, other = 0, unattributed = 0;
};

inline Distribution dist(double mean, double stddev, std::uint64_t count) {
  Distribution d;
  d.count = count;
  d.mean = mean;
  d.stddev = stddev;
  d.total = mean * static_cast<double>(count);
  d.min = std::max(0.0, mean - 2 * stddev);
  d.max = mean + 3 * stddev;
  d.p50 = mean;
  d.p90 = mean + 1.3 * stddev;
  d.p99 = mean + 2.3 * stddev;
  return d;
}

// A host-timeline report: `steps` measured steps of `wall_ms`, split as `s`.
inline Report host_report(const Shares& s, std::uint64_t steps = 100, double wall_ms = 100) {
  Report r;
  r.steps.count = steps;
  r.steps.wall_ms = dist(wall_ms, 0.02 * wall_ms, steps);
  StepBreakdown& b = r.steps.breakdown;
  b.wall_ms = wall_ms;
  b.kind_ms[PhaseKind::input] = s.input * wall_ms;
  b.kind_ms[PhaseKind::compute] = s.compute * wall_ms;
  b.kind_ms[PhaseKind::memory] = s.memory * wall_ms;
  b.kind_ms[PhaseKind::communication] = s.communication * wall_ms;
  b.kind_ms[PhaseKind::other] = s.other * wall_ms;
  b.unattributed_ms = s.unattributed * wall_ms;
  r.system.available = true;
  r.system.wall_s = static_cast<double>(steps) * wall_ms / 1000.0;
  r.system.cores_available = 8;
  r.system.cpu_utilization = 0.2;
  return r;
}

// `r` on a machine of 2 cores where this process used `own_cores`, other
// processes `other_cores`, and the step thread waited for a CPU `wait_share`
// of the run.
inline void on_two_cores(Report& r, double own_cores, double other_cores, double wait_share = 0) {
  r.system.cores_online = r.system.cores_available = 2;
  r.system.cpu_user_s = own_cores * r.system.wall_s;
  r.system.other_processes_cpu_s = other_cores * r.system.wall_s;
  r.system.runqueue_wait_s = wait_share * r.system.wall_s;
}

// `r` as a live run the Python package drove.
inline void from_python(Report& r) {
  r.run.source = "live";
  r.run.build["frontend"] = "python";
}

inline PhaseSummary& add_phase(Report& r, const std::string& name, PhaseKind kind, ThreadRole role,
                               double share_of_step, double mean_ms) {
  PhaseSummary p;
  p.name = name;
  p.kind = kind;
  p.thread_role = role;
  p.count = r.steps.count;
  p.host_ms = dist(mean_ms, 0.05 * mean_ms, p.count);
  p.self_ms = p.host_ms;
  p.share_of_step = share_of_step;
  p.threads = 1;
  r.phases.push_back(p);
  return r.phases.back();
}

// libtorch's DataLoader with workers(2), 2 ms of decoding a sample, 64 a
// batch, beside a conv net's 56 ms of step work, on 2 cores the process
// fills (docs/trials.md): 90 ms steps, 30% of them waiting for a CPU the
// loader held, 8% waiting for the batch. others_hold: other processes held
// the cores instead (this process 1.0 of 2). worker_processes: PyTorch's
// DataLoader instead, its 2 workers child processes (no phases here, their
// CPU in children_cpu_s, num_workers in the run's config).
inline Report loader_on_shared_cores(bool others_hold, bool worker_processes = false) {
  Shares s;
  s.input = 0.08;
  s.compute = 0.92;
  Report r = host_report(s, 40, 90);
  SystemSignals& sys = r.system;
  sys.cores_available = sys.cores_online = 2;
  sys.runqueue_wait_s = 0.30 * sys.wall_s;
  sys.step_threads_on_cpu_s = 0.056 * 40;
  sys.cpu_user_s = (others_hold ? 1.0 : 1.9) * sys.wall_s;
  sys.other_processes_cpu_s = (others_hold ? 0.95 : 0.05) * sys.wall_s;
  add_phase(r, "data", PhaseKind::input, ThreadRole::step, 0.08, 7.2);
  add_phase(r, "backward", PhaseKind::compute, ThreadRole::step, 0.60, 54);
  add_phase(r, "forward", PhaseKind::compute, ThreadRole::step, 0.32, 28.8);
  if (worker_processes) {
    sys.cpu_user_s = 0.65 * sys.wall_s;
    sys.children_cpu_s = 0.115 * 40;
    sys.child_processes = 2;
    r.run.config["num_workers"] = "2";
    return r;
  }
  PhaseSummary& decode = add_phase(r, "decode", PhaseKind::input, ThreadRole::background, 0, 2.7);
  decode.count = 64 * 40;
  decode.self_ms = decode.host_ms = dist(2.7, 0.1, decode.count);
  decode.threads = 2;
  decode.overlap_with_steps = 1.0;
  return r;
}

// Marks the report as a GPU run with the given timeline facts.
// Facts are named by their JSON keys (device.facts.<key>).
inline void gpu(Report& r, const std::map<std::string, double>& facts) {
  r.device.enabled = true;
  r.device.status = "ok";
  r.device.facts = device_facts_of(facts);
}

inline const Evidence* evidence(const Verdict& v, const std::string& signal) {
  for (const Evidence& e : v.evidence)
    if (e.signal == signal) return &e;
  return nullptr;
}

const Evidence* evidence(Verdict&&, const std::string&) = delete;  // would dangle

inline bool any_contains(const std::vector<std::string>& lines, const std::string& needle) {
  for (const std::string& l : lines)
    if (l.find(needle) != std::string::npos) return true;
  return false;
}

inline double ranked_cost(const Verdict& v, const std::string& category) {
  for (const auto& [name, cost] : v.ranking)
    if (name == category) return cost;
  return -1;
}

}  // namespace test
}  // namespace v1
}  // namespace stepscope

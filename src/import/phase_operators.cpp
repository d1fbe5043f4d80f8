// The top operators inside each phase of an imported trace: which aten:: ops
// and which GPU kernels the forward, backward, optimizer, data (PyTorch's own
// phases) or a user's record_function range spend their time in — what a
// PyTorch user opens TensorBoard's operator view for, per phase.
//
// An operator belongs to the phase the step's thread is in at the instant
// the operator starts, with framework_phases()' precedence (the user's
// annotations, data, optimizer on the step's thread, then backward on any
// thread, then forward for what runs on the step's thread); a kernel to the phase of the runtime call that launched it
// (the correlation id). Self time: a cpu_op's duration minus the cpu_ops
// nested in it on its thread (TensorBoard's "self host duration"); a
// kernel's time on the device.
#include <stepscope/report.hpp>
#include "import/trace_import.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "timeline/framework_phases.hpp"
#include "timeline/interval_set.hpp"

namespace stepscope {
inline namespace v1 {

namespace {

using timeline::HostInterval;
using timeline::HostOpKind;
using timeline::NameId;
using timeline::Timeline;

bool covers(const detail::Intervals& set, std::int64_t t) {
  // First interval starting after t; the one before it is the only candidate.
  const auto after = std::upper_bound(set.begin(), set.end(), t,
                                      [](std::int64_t v, const timeline::Interval& iv) { return v < iv.start_ns; });
  return after != set.begin() && std::prev(after)->end_ns > t;
}

bool covers(const std::map<std::int64_t, detail::Intervals>& per_thread, std::int64_t tid, std::int64_t t) {
  const auto it = per_thread.find(tid);
  return it != per_thread.end() && covers(it->second, t);
}

// Which report phase an instant on a thread belongs to: the PhaseSummary
// name, or nullptr (outside every step, or in none of its phases).
class PhaseLookup {
 public:
  explicit PhaseLookup(const Timeline& tl) : tl_(tl), marks_(timeline::framework_marks(tl)) {
    for (const timeline::Phase& p : tl.phases)
      if (!p.on_device && !timeline::is_pytorch_range(tl.name_of(p.name))) user_[p.tid].push_back(&p);
    for (auto& [tid, list] : user_)
      std::sort(list.begin(), list.end(),
                [](const timeline::Phase* a, const timeline::Phase* b) { return a->start_ns < b->start_ns; });
    step_threads_.reserve(tl.steps.size());
    for (const timeline::Step& s : tl.steps) step_threads_.push_back(marks_.thread_of(s));
  }

  const std::string* phase_at(std::int64_t tid, std::int64_t t) const {
    const auto step = std::upper_bound(tl_.steps.begin(), tl_.steps.end(), t,
                                       [](std::int64_t v, const timeline::Step& s) { return v < s.start_ns; });
    if (step == tl_.steps.begin() || std::prev(step)->end_ns <= t) return nullptr;
    // What the step's thread is in at t decides, whichever thread the
    // operator ran on: the autograd engine's thread runs the backward of a
    // "## backward ##" range on the step's thread.
    const std::int64_t step_tid = step_threads_[static_cast<std::size_t>(std::prev(step) - tl_.steps.begin())];
    if (const timeline::Phase* user = innermost_user_range(step_tid, t)) return &tl_.name_of(user->name);
    if (covers(marks_.data, step_tid, t)) return &kData;
    if (covers(marks_.optimizer, step_tid, t)) return &kOptimizer;
    if (covers(marks_.backward, t)) return &kBackward;
    if (tid == step_tid) return &kForward;
    return nullptr;
  }

 private:
  // The latest-starting user range on the thread that contains t: ranges
  // nest, so it is the innermost, the one whose self time holds t.
  const timeline::Phase* innermost_user_range(std::int64_t tid, std::int64_t t) const {
    const auto it = user_.find(tid);
    if (it == user_.end()) return nullptr;
    const auto& list = it->second;
    auto q = std::upper_bound(list.begin(), list.end(), t,
                              [](std::int64_t v, const timeline::Phase* p) { return v < p->start_ns; });
    while (q != list.begin()) {
      --q;
      if ((*q)->end_ns > t) return *q;
    }
    return nullptr;
  }

  static const std::string kData, kForward, kBackward, kOptimizer;
  const Timeline& tl_;
  const timeline::FrameworkMarks marks_;
  std::map<std::int64_t, std::vector<const timeline::Phase*>> user_;
  std::vector<std::int64_t> step_threads_;  // by step index
};

const std::string PhaseLookup::kData = timeline::to_string(timeline::FrameworkPhase::data);
const std::string PhaseLookup::kForward = timeline::to_string(timeline::FrameworkPhase::forward);
const std::string PhaseLookup::kBackward = timeline::to_string(timeline::FrameworkPhase::backward);
const std::string PhaseLookup::kOptimizer = timeline::to_string(timeline::FrameworkPhase::optimizer);

struct OperatorTotal {
  std::uint64_t count = 0;
  std::int64_t self_ns = 0;
};
// (name, is_kernel) -> total, per phase name.
using PhaseOperatorTotals = std::map<std::string, std::map<std::pair<NameId, bool>, OperatorTotal>>;

// cpu_ops: self time = duration minus the cpu_ops nested in it on its thread.
void add_cpu_ops(const Timeline& tl, const PhaseLookup& lookup, PhaseOperatorTotals& totals) {
  std::vector<const HostInterval*> ops;
  for (const HostInterval& h : tl.host_ops)
    if (h.kind == HostOpKind::framework_op) ops.push_back(&h);
  std::sort(ops.begin(), ops.end(), [](const HostInterval* a, const HostInterval* b) {
    if (a->tid != b->tid) return a->tid < b->tid;
    if (a->start_ns != b->start_ns) return a->start_ns < b->start_ns;
    return a->end_ns > b->end_ns;  // outer first
  });
  std::vector<std::int64_t> self_ns(ops.size());
  std::vector<std::size_t> open;  // enclosing ops on this thread
  for (std::size_t i = 0; i < ops.size(); ++i) {
    while (!open.empty() && (ops[open.back()]->tid != ops[i]->tid || ops[open.back()]->end_ns <= ops[i]->start_ns))
      open.pop_back();
    self_ns[i] = ops[i]->duration_ns();
    if (!open.empty()) self_ns[open.back()] -= ops[i]->duration_ns();
    open.push_back(i);
  }
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const std::string* phase = lookup.phase_at(ops[i]->tid, ops[i]->start_ns);
    if (phase == nullptr) continue;
    OperatorTotal& t = totals[*phase][{ops[i]->name, false}];
    ++t.count;
    t.self_ns += std::max<std::int64_t>(0, self_ns[i]);
  }
}

// Kernels: device time, in the phase of the runtime call that launched them.
void add_kernels(const Timeline& tl, const PhaseLookup& lookup, PhaseOperatorTotals& totals) {
  std::unordered_map<std::int64_t, const HostInterval*> launch_of;
  launch_of.reserve(tl.device_ops.size());
  for (const HostInterval& h : tl.host_ops)
    if (h.kind == HostOpKind::runtime_launch && h.correlation >= 0) launch_of.emplace(h.correlation, &h);
  for (const timeline::DeviceInterval& d : tl.device_ops) {
    if (d.kind != timeline::DeviceOpKind::kernel) continue;
    const auto launch = launch_of.find(d.correlation);
    if (launch == launch_of.end()) continue;
    const std::string* phase = lookup.phase_at(launch->second->tid, launch->second->start_ns);
    if (phase == nullptr) continue;
    OperatorTotal& t = totals[*phase][{d.name, true}];
    ++t.count;
    t.self_ns += std::max<std::int64_t>(0, d.duration_ns());
  }
}

}  // namespace

void attach_top_operators(const Timeline& tl, std::vector<PhaseSummary>& phases, std::size_t per_kind) {
  if (tl.steps.empty() || per_kind == 0) return;
  const PhaseLookup lookup(tl);
  PhaseOperatorTotals totals;
  add_cpu_ops(tl, lookup, totals);
  add_kernels(tl, lookup, totals);
  for (PhaseSummary& p : phases) {
    if (p.thread_role != ThreadRole::step) continue;
    const auto found = totals.find(p.name);
    if (found == totals.end()) continue;
    std::vector<OperatorTime> cpu_ops, kernels;
    for (const auto& [key, total] : found->second) {
      OperatorTime op;
      op.name = tl.name_of(key.first);
      op.kind = key.second ? "kernel" : "cpu_op";
      op.count = total.count;
      op.self_ms = static_cast<double>(total.self_ns) * 1e-6;
      (key.second ? kernels : cpu_ops).push_back(std::move(op));
    }
    p.top_operators.clear();
    for (auto* list : {&cpu_ops, &kernels}) {
      // Most self time first; the name breaks ties so the order is stable.
      std::sort(list->begin(), list->end(), [](const OperatorTime& a, const OperatorTime& b) {
        return a.self_ms != b.self_ms ? a.self_ms > b.self_ms : a.name < b.name;
      });
      if (list->size() > per_kind) list->resize(per_kind);
      for (OperatorTime& op : *list) p.top_operators.push_back(std::move(op));
    }
  }
}

std::string format_top_operators(const Report& report) {
  std::string out;
  const auto shorten = [](const std::string& name) {
    constexpr std::size_t kWidth = 72;
    if (name.size() <= kWidth) return name;
    std::size_t cut = kWidth - 3;
    while (cut > 0 && (static_cast<unsigned char>(name[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 sequence
    return name.substr(0, cut) + "...";
  };
  for (const PhaseSummary& p : report.phases) {
    if (p.top_operators.empty()) continue;
    if (out.empty()) out += "\ntop operators by self time, per phase (cpu_op: host, kernel: device)\n";
    out += "  " + p.name + "\n";
    for (const OperatorTime& op : p.top_operators) {
      char line[64];
      std::snprintf(line, sizeof line, "    %-7s %10.3f ms %8llu x  ", op.kind.c_str(), op.self_ms,
                    static_cast<unsigned long long>(op.count));
      out += line + shorten(op.name) + "\n";
    }
  }
  return out;
}

}  // namespace v1
}  // namespace stepscope

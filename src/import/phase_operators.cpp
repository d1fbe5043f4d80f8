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
#include <string_view>
#include <unordered_map>
#include <vector>

#include "import/phase_operators.hpp"
#include "text/printable.hpp"
#include "timeline/correlation_map.hpp"
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

template <typename List>
const List* list_of(const std::map<std::int64_t, List>& per_thread, std::int64_t tid) {
  const auto it = per_thread.find(tid);
  return it == per_thread.end() ? nullptr : &it->second;
}

// A report phase, as a small dense index: the four framework phases first
// (FrameworkPhase order), then the user's range names in order of first
// appearance. Totals are per phase *name*, as the report's phases are, so a
// user range named "forward" shares the framework forward's index.
using PhaseIndex = std::uint32_t;
constexpr PhaseIndex kNoPhase = ~PhaseIndex{0};

// Which report phase an instant on a thread belongs to (kNoPhase: outside
// every step, or in none of its phases).
class PhaseLookup {
 public:
  PhaseLookup(const Timeline& tl, const timeline::FrameworkMarks& marks) : tl_(tl), marks_(marks) {
    for (std::size_t k = 0; k < timeline::kFrameworkPhaseCount; ++k)
      index_of_name_.emplace(timeline::to_string(static_cast<timeline::FrameworkPhase>(k)), static_cast<PhaseIndex>(k));
    phase_count_ = timeline::kFrameworkPhaseCount;
    user_index_.assign(tl.names.size(), kNoPhase);
    std::map<std::int64_t, std::vector<const timeline::Phase*>> user_ranges;
    for (const timeline::Phase& p : tl.phases) {
      if (p.on_device || timeline::is_pytorch_range(tl.name_of(p.name))) continue;
      user_ranges[p.tid].push_back(&p);
      const auto [it, inserted] = index_of_name_.emplace(tl.name_of(p.name), phase_count_);
      if (inserted) ++phase_count_;
      user_index_[p.name] = it->second;
    }
    for (auto& [tid, list] : user_ranges) {
      std::sort(list.begin(), list.end(),
                [](const timeline::Phase* a, const timeline::Phase* b) { return a->start_ns < b->start_ns; });
      user_.emplace(tid, UserRanges(
                             std::move(list), [](const timeline::Phase* p) { return p->start_ns; },
                             [](const timeline::Phase* p) { return p->end_ns; }));
    }
    // What each step's thread holds, looked up once per step instead of once per operator.
    step_threads_.reserve(tl.steps.size());
    for (const timeline::Step& s : tl.steps) {
      StepThread st;
      st.tid = marks_.thread_of(s);
      st.user = list_of(user_, st.tid);
      st.data = list_of(marks_.data, st.tid);
      st.optimizer = list_of(marks_.optimizer, st.tid);
      step_threads_.push_back(st);
    }
  }

  PhaseIndex phase_count() const { return phase_count_; }
  // The index of a report phase by name; kNoPhase when no operator can be in it.
  PhaseIndex index_of(const std::string& phase_name) const {
    const auto it = index_of_name_.find(phase_name);
    return it == index_of_name_.end() ? kNoPhase : it->second;
  }

  PhaseIndex phase_at(std::int64_t tid, std::int64_t t) const {
    const auto step = std::upper_bound(tl_.steps.begin(), tl_.steps.end(), t,
                                       [](std::int64_t v, const timeline::Step& s) { return v < s.start_ns; });
    if (step == tl_.steps.begin() || std::prev(step)->end_ns <= t) return kNoPhase;
    // What the step's thread is in at t decides, whichever thread the
    // operator ran on: the autograd engine's thread runs the backward of a
    // "## backward ##" range on the step's thread.
    const StepThread& st = step_threads_[static_cast<std::size_t>(std::prev(step) - tl_.steps.begin())];
    if (st.user != nullptr)
      if (const timeline::Phase* user = innermost_user_range(*st.user, t)) return user_index_[user->name];
    if (st.data != nullptr && covers(*st.data, t)) return framework(timeline::FrameworkPhase::data);
    if (st.optimizer != nullptr && covers(*st.optimizer, t)) return framework(timeline::FrameworkPhase::optimizer);
    if (covers(marks_.backward, t)) return framework(timeline::FrameworkPhase::backward);
    if (tid == st.tid) return framework(timeline::FrameworkPhase::forward);
    return kNoPhase;
  }

 private:
  using UserRanges = detail::ByStart<const timeline::Phase*>;  // one thread's
  struct StepThread {
    std::int64_t tid = -1;
    const UserRanges* user = nullptr;  // null: none on that thread
    const detail::Intervals* data = nullptr;
    const detail::Intervals* optimizer = nullptr;
  };

  static PhaseIndex framework(timeline::FrameworkPhase phase) { return static_cast<PhaseIndex>(phase); }

  // The latest-starting user range on the thread that contains t: ranges
  // nest, so it is the innermost, the one whose self time holds t. The look
  // back stops where no earlier range reaches t (an operator outside every
  // range scanned them all: quadratic in the steps of a trace).
  static const timeline::Phase* innermost_user_range(const UserRanges& list, std::int64_t t) {
    const timeline::Phase* found = nullptr;
    list.reach_back(t, t, [&found, t](const timeline::Phase* p) {
      if (p->end_ns <= t) return true;
      found = p;
      return false;
    });
    return found;
  }

  const Timeline& tl_;
  const timeline::FrameworkMarks& marks_;
  std::map<std::int64_t, UserRanges> user_;
  std::unordered_map<std::string_view, PhaseIndex> index_of_name_;  // views of tl_.names and static strings
  std::vector<PhaseIndex> user_index_;                              // by NameId: a user range's phase
  PhaseIndex phase_count_ = 0;
  std::vector<StepThread> step_threads_;  // by step index
};

// Count and self time per (phase, operator name, cpu_op or kernel), in one
// flat table: thousands of operators land in a few hundred keys.
class OperatorTotals {
 public:
  struct Entry {
    PhaseIndex phase = kNoPhase;
    NameId name = 0;
    bool kernel = false;
    std::uint64_t count = 0;
    std::int64_t self_ns = 0;
  };

  OperatorTotals() : slot_of_(256) {}

  void add(PhaseIndex phase, NameId name, bool kernel, std::int64_t self_ns) {
    const auto key = static_cast<std::int64_t>((std::uint64_t{phase} << 33) | (std::uint64_t{name} << 1) |
                                               static_cast<std::uint64_t>(kernel));
    std::size_t& slot = slot_of_[key];  // index in entries_ + 1
    if (slot == 0) {
      entries_.push_back(Entry{phase, name, kernel, 0, 0});
      slot = entries_.size();
    }
    Entry& e = entries_[slot - 1];
    ++e.count;
    e.self_ns += self_ns;
  }

  const std::vector<Entry>& entries() const { return entries_; }

 private:
  detail::CorrelationMap<std::size_t> slot_of_;
  std::vector<Entry> entries_;
};

// cpu_ops: self time = duration minus the cpu_ops nested in it on its thread.
void add_cpu_ops(const Timeline& tl, const PhaseLookup& lookup, OperatorTotals& totals) {
  // Ordered by thread and start, outer first. Two ops of one thread with the
  // same start and end (common after HTA's microsecond rounding) are ordered
  // as std::sort leaves them, and which of them is "outer" decides whose self
  // time the pair's is: the keys are sorted by the same comparisons in the
  // same initial order (host_ops order) as the report always was, so the
  // result is the same. The keys are copies, sorted without chasing pointers.
  struct CpuOp {
    std::int64_t tid, start_ns, end_ns;
    std::uint32_t index;  // in host_ops
  };
  std::vector<CpuOp> ops;
  for (std::size_t i = 0; i < tl.host_ops.size(); ++i) {
    const HostInterval& h = tl.host_ops[i];
    if (h.kind == HostOpKind::framework_op) ops.push_back({h.tid, h.start_ns, h.end_ns, static_cast<std::uint32_t>(i)});
  }
  std::sort(ops.begin(), ops.end(), [](const CpuOp& a, const CpuOp& b) {
    if (a.tid != b.tid) return a.tid < b.tid;
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    return a.end_ns > b.end_ns;  // outer first
  });
  std::vector<std::int64_t> self_ns(ops.size());
  std::vector<std::size_t> open;  // enclosing ops on this thread
  for (std::size_t i = 0; i < ops.size(); ++i) {
    while (!open.empty() && (ops[open.back()].tid != ops[i].tid || ops[open.back()].end_ns <= ops[i].start_ns))
      open.pop_back();
    const std::int64_t duration = ops[i].end_ns - ops[i].start_ns;
    self_ns[i] = duration;
    if (!open.empty()) self_ns[open.back()] -= duration;
    open.push_back(i);
  }
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const PhaseIndex phase = lookup.phase_at(ops[i].tid, ops[i].start_ns);
    if (phase == kNoPhase) continue;
    totals.add(phase, tl.host_ops[ops[i].index].name, false, std::max<std::int64_t>(0, self_ns[i]));
  }
}

// Kernels: device time, in the phase of the runtime call that launched them
// (the first launch call with that correlation).
void add_kernels(const Timeline& tl, const PhaseLookup& lookup, OperatorTotals& totals) {
  detail::CorrelationMap<std::size_t> launch_of(tl.device_ops.size());  // correlation -> index in host_ops + 1
  for (std::size_t i = 0; i < tl.host_ops.size(); ++i) {
    const HostInterval& h = tl.host_ops[i];
    if (h.kind != HostOpKind::runtime_launch || h.correlation < 0) continue;
    std::size_t& launch = launch_of[h.correlation];
    if (launch == 0) launch = i + 1;
  }
  for (const timeline::DeviceInterval& d : tl.device_ops) {
    if (d.kind != timeline::DeviceOpKind::kernel) continue;
    const std::size_t* launch = launch_of.find(d.correlation);
    if (launch == nullptr) continue;
    const HostInterval& h = tl.host_ops[*launch - 1];
    const PhaseIndex phase = lookup.phase_at(h.tid, h.start_ns);
    if (phase == kNoPhase) continue;
    totals.add(phase, d.name, true, std::max<std::int64_t>(0, d.duration_ns()));
  }
}

// The per_kind operators of one kind with the most self time, in order: most
// first, the name breaking ties (then the name's id, for hand-built timelines
// that repeat a name), so the order is total.
std::vector<OperatorTime> top_of_kind(const Timeline& tl, const std::vector<const OperatorTotals::Entry*>& entries,
                                      bool kernel, std::size_t per_kind) {
  struct Candidate {
    double self_ms;
    const OperatorTotals::Entry* entry;
  };
  std::vector<Candidate> candidates;
  for (const OperatorTotals::Entry* e : entries)
    if (e->kernel == kernel) candidates.push_back({static_cast<double>(e->self_ns) * 1e-6, e});
  const auto first = [&tl](const Candidate& a, const Candidate& b) {
    if (a.self_ms != b.self_ms) return a.self_ms > b.self_ms;
    const std::string& an = tl.name_of(a.entry->name);
    const std::string& bn = tl.name_of(b.entry->name);
    if (an != bn) return an < bn;
    return a.entry->name < b.entry->name;
  };
  const std::size_t n = std::min(per_kind, candidates.size());
  std::partial_sort(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(n), candidates.end(), first);
  std::vector<OperatorTime> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    out[i].name = tl.name_of(candidates[i].entry->name);
    out[i].kind = kernel ? "kernel" : "cpu_op";
    out[i].count = candidates[i].entry->count;
    out[i].self_ms = candidates[i].self_ms;
  }
  return out;
}

}  // namespace

void attach_top_operators(const Timeline& tl, std::vector<PhaseSummary>& phases, std::size_t per_kind) {
  if (tl.steps.empty() || per_kind == 0) return;
  attach_top_operators(tl, timeline::framework_marks(tl), phases, per_kind);
}

void attach_top_operators(const Timeline& tl, const timeline::FrameworkMarks& marks, std::vector<PhaseSummary>& phases,
                          std::size_t per_kind) {
  if (tl.steps.empty() || per_kind == 0) return;
  const PhaseLookup lookup(tl, marks);
  OperatorTotals totals;
  add_cpu_ops(tl, lookup, totals);
  add_kernels(tl, lookup, totals);
  std::vector<std::vector<const OperatorTotals::Entry*>> by_phase(lookup.phase_count());
  for (const OperatorTotals::Entry& e : totals.entries()) by_phase[e.phase].push_back(&e);
  for (PhaseSummary& p : phases) {
    if (p.thread_role != ThreadRole::step) continue;
    const PhaseIndex index = lookup.index_of(p.name);
    if (index == kNoPhase || by_phase[index].empty()) continue;
    p.top_operators = top_of_kind(tl, by_phase[index], false, per_kind);
    for (OperatorTime& op : top_of_kind(tl, by_phase[index], true, per_kind)) p.top_operators.push_back(std::move(op));
  }
}

std::string format_top_operators(const Report& report) {
  std::string out;

  for (const PhaseSummary& p : report.phases) {
    if (p.top_operators.empty()) continue;
    if (out.empty()) out += "\ntop operators by self time, per phase (cpu_op: host, kernel: device)\n";
    out += "  " + p.name + "\n";
    for (const OperatorTime& op : p.top_operators) {
      char line[64];
      std::snprintf(line, sizeof line, "    %-7s %10.3f ms %8llu x  ", op.kind.c_str(), op.self_ms,
                    static_cast<unsigned long long>(op.count));
      out += line + detail::shortened(op.name, 72) + "\n";
    }
  }
  return out;
}

}  // namespace v1
}  // namespace stepscope

// PyTorch's own ranges become phases: what a torch.profiler trace says about
// data / forward / backward / optimizer when the user annotated nothing.
// Precedence inside a step, on the step's thread: the user's annotations,
// then data, optimizer, backward (any thread: the autograd engine may run it
// on its own), then forward (any other operator, runtime call or nn.Module
// frame inside the step). What is left is unattributed.
#include <algorithm>
#include <cstddef>
#include <iterator>
#include <map>
#include <string_view>
#include <vector>

#include "timeline/framework_phases.hpp"
#include "timeline/interval_set.hpp"
#include "timeline/name_rules.hpp"
#include "timeline/timeline.hpp"

namespace stepscope {
inline namespace v1 {
namespace timeline {
namespace {

using detail::Intervals;

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}
bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_data_range(std::string_view name) {
  return starts_with(name, "enumerate(DataLoader)");
}
bool is_optimizer_range(std::string_view name) {
  return starts_with(name, "Optimizer.step#") || starts_with(name, "Optimizer.zero_grad#");
}
// The autograd engine's per-node work, and the Python frame that runs it
// ("torch/_tensor.py(396): backward", "torch/autograd/__init__.py(173): backward").
bool is_backward_op(const HostInterval& h, std::string_view name) {
  if (h.kind == HostOpKind::framework_op)
    return starts_with(name, "autograd::engine::evaluate_function:") || detail::is_autograd_node(name) ||
           detail::is_data_parallel_backward_op(name);
  if (h.kind == HostOpKind::python) return ends_with(name, ": backward");
  return false;
}

// Which framework phase (if any) an event marks; forward is "any other work".
enum class Mark : std::uint8_t { user, data, optimizer, backward, work, none };

Mark mark_of(const HostInterval& h, std::string_view name) {
  switch (h.kind) {
    case HostOpKind::step:
      return Mark::none;
    case HostOpKind::annotation:
      if (is_data_range(name)) return Mark::data;
      if (is_optimizer_range(name)) return Mark::optimizer;
      if (detail::is_data_parallel_forward_range(name)) return Mark::work;  // DDP/FSDP's forward: forward
      return is_pytorch_range(name) ? Mark::none : Mark::user;
    case HostOpKind::framework_op:
      // Kineto before PyTorch 1.10 files record_function ranges as "Operator"
      // events, like the operators: PyTorch's own ranges are known by name.
      if (is_data_range(name)) return Mark::data;
      if (is_optimizer_range(name)) return Mark::optimizer;
      return is_backward_op(h, name) ? Mark::backward : Mark::work;
    case HostOpKind::python:
      // Only the module frames: outer Python frames (the script, the loop)
      // span the whole step and say nothing about its parts.
      if (is_backward_op(h, name)) return Mark::backward;
      return starts_with(name, "nn.Module:") ? Mark::work : Mark::none;
    case HostOpKind::runtime_launch:
    case HostOpKind::runtime_sync:
    case HostOpKind::runtime_other:
      return Mark::work;
    case HostOpKind::other:
      return Mark::none;
  }
  return Mark::none;
}

}  // namespace

const char* to_string(FrameworkPhase phase) {
  constexpr const char* kNames[] = {"data", "forward", "backward", "optimizer"};
  return kNames[std::min<std::size_t>(static_cast<std::size_t>(phase), std::size(kNames) - 1)];
}

bool is_pytorch_range(std::string_view name) {
  return starts_with(name, "ProfilerStep") || is_data_range(name) || is_optimizer_range(name) ||
         detail::is_data_parallel_forward_range(name);
}

FrameworkMarks framework_marks(const Timeline& tl) {
  FrameworkMarks m;
  // A name's mark depends on the op's kind too; computed once per name for
  // the kind it last came with (a name almost always comes with one kind).
  constexpr unsigned char kUnknown = 0xff;
  struct NameMark {
    HostOpKind kind;
    unsigned char mark = kUnknown;
  };
  std::vector<NameMark> name_marks(tl.names.size());
  // The lists of the thread of the previous op: a trace lists long runs of
  // one thread's ops, so the per-thread maps are searched once per run.
  std::int64_t cached_tid = 0;
  bool have_cached = false;
  detail::Intervals* cached[4] = {};  // user, data, optimizer, work of cached_tid; null until first used
  std::map<std::int64_t, detail::Intervals>* const per_thread[4] = {&m.user, &m.data, &m.optimizer, &m.work};
  const auto list_of = [&](int which, std::int64_t tid) -> detail::Intervals& {
    if (!have_cached || tid != cached_tid) {
      cached_tid = tid;
      have_cached = true;
      for (auto*& list : cached) list = nullptr;
    }
    if (cached[which] == nullptr) cached[which] = &(*per_thread[which])[tid];
    return *cached[which];
  };
  for (const HostInterval& h : tl.host_ops) {
    if (h.kind == HostOpKind::step) {
      m.step_tid.emplace(std::make_pair(h.start_ns, h.end_ns), h.tid);
      continue;
    }
    NameMark& known = name_marks[h.name];
    if (known.mark == kUnknown || known.kind != h.kind) {
      known.kind = h.kind;
      known.mark = static_cast<unsigned char>(mark_of(h, tl.name_of(h.name)));
    }
    const Interval iv{h.start_ns, h.end_ns};
    switch (static_cast<Mark>(known.mark)) {
      case Mark::user:
        list_of(0, h.tid).push_back(iv);
        break;
      case Mark::data:
        list_of(1, h.tid).push_back(iv);
        break;
      case Mark::optimizer:
        list_of(2, h.tid).push_back(iv);
        break;
      case Mark::backward:
        m.backward.push_back(iv);
        break;
      case Mark::work:
        list_of(3, h.tid).push_back(iv);
        break;
      case Mark::none:
        break;
    }
  }
  std::map<std::int64_t, std::int64_t> marked_ns;
  for (auto* lists : per_thread)
    for (auto& [tid, list] : *lists) {
      list = detail::normalise(std::move(list));
      marked_ns[tid] += detail::length(list);
    }
  std::int64_t most = 0;
  for (const auto& [tid, t] : marked_ns)
    if (t > most) most = t, m.main_tid = tid;
  m.backward = detail::normalise(std::move(m.backward));
  return m;
}

InferredIterations infer_iterations(const Timeline& tl) {
  // Per thread: the fetches' [start, end) and the optimizer steps' [start, end).
  std::map<std::int64_t, Intervals> fetches, optimizer_steps;
  for (const HostInterval& h : tl.host_ops) {
    if (h.kind != HostOpKind::annotation && h.kind != HostOpKind::framework_op) continue;
    const std::string_view name = tl.name_of(h.name);
    if (is_data_range(name))
      fetches[h.tid].push_back({h.start_ns, h.end_ns});
    else if (starts_with(name, "Optimizer.step#"))
      optimizer_steps[h.tid].push_back({h.start_ns, h.end_ns});
  }
  // Nested or repeated ranges (a wrapper's __next__ around the iterator's)
  // are one mark: normalise merges them.
  for (auto* per_thread : {&fetches, &optimizer_steps})
    for (auto& [t, list] : *per_thread) list = detail::normalise(std::move(list));
  const auto most = [](const std::map<std::int64_t, Intervals>& per_thread) {
    std::int64_t tid = -1;
    std::size_t best = 0;
    for (const auto& [t, list] : per_thread)
      if (list.size() > best) best = list.size(), tid = t;
    return tid;
  };
  InferredIterations out;
  // The loop's thread is the one that updates the weights: fetches on
  // another thread (a background prefetcher iterating the DataLoader) are
  // not the step's, and its iterations are then the optimizer steps'.
  const std::int64_t updater = most(optimizer_steps);
  const bool updates_elsewhere = updater != -1 && optimizer_steps.at(updater).size() >= 2 &&
                                 (fetches.count(updater) == 0 || fetches.at(updater).size() < 2);
  if (const std::int64_t tid = most(fetches); !updates_elsewhere && tid != -1 && fetches.at(tid).size() >= 2) {
    // An iteration starts with the first fetch after an optimizer step: a
    // loop that fetches from two loaders (zip) or accumulates gradients over
    // several batches updates once per iteration. Without optimizer steps on
    // the thread (inference, evaluation), every fetch starts one.
    const Intervals& fetch = fetches.at(tid);
    const auto found = optimizer_steps.find(tid);
    const Intervals* updates = found != optimizer_steps.end() && found->second.size() >= 2 ? &found->second : nullptr;
    std::vector<std::int64_t> starts;
    std::size_t next_update = 0;
    for (std::size_t i = 0; i < fetch.size(); ++i) {
      bool updated = updates == nullptr || i == 0;
      if (updates != nullptr)
        while (next_update < updates->size() && (*updates)[next_update].end_ns <= fetch[i].start_ns) {
          updated = true;
          ++next_update;
        }
      if (updated) starts.push_back(fetch[i].start_ns);
    }
    for (std::size_t i = 0; i + 1 < starts.size(); ++i)
      out.steps.push_back(Step{static_cast<std::int64_t>(i), starts[i], starts[i + 1], tid});
    if (!out.steps.empty()) {
      out.marked_by = "DataLoader fetches";
      out.tid = tid;
      return out;
    }
  }
  if (const std::int64_t tid = most(optimizer_steps); tid != -1 && optimizer_steps.at(tid).size() >= 2) {
    const Intervals& optimizer = optimizer_steps.at(tid);
    for (std::size_t i = 0; i + 1 < optimizer.size(); ++i)
      out.steps.push_back(Step{static_cast<std::int64_t>(i), optimizer[i].end_ns, optimizer[i + 1].end_ns, tid});
    out.marked_by = "Optimizer.step calls";
    out.tid = tid;
  }
  return out;
}

std::int64_t FrameworkMarks::thread_of(const Step& s) const {
  const auto it = step_tid.find({s.start_ns, s.end_ns});
  if (it != step_tid.end()) return it->second;
  return s.tid >= 0 ? s.tid : main_tid;
}

std::vector<StepFrameworkPhases> framework_phases(const Timeline& tl) {
  if (tl.steps.empty()) return {};
  return framework_phases(tl, framework_marks(tl));
}

std::vector<StepFrameworkPhases> framework_phases(const Timeline& tl, const FrameworkMarks& marks) {
  std::vector<StepFrameworkPhases> out;
  if (tl.steps.empty()) return out;

  // Marked intervals per thread (backward: all threads together).
  const auto& user = marks.user;
  const auto& data = marks.data;
  const auto& optimizer = marks.optimizer;
  const auto& work = marks.work;
  const Intervals& backward = marks.backward;

  const Intervals none;
  auto of_thread = [&none](const std::map<std::int64_t, Intervals>& m, std::int64_t tid) -> const Intervals& {
    const auto it = m.find(tid);
    return it == m.end() ? none : it->second;
  };
  for (const Step& s : tl.steps) {
    StepFrameworkPhases p;
    p.step = s.number;
    p.tid = marks.thread_of(s);
    p.span_ns = std::max<std::int64_t>(0, s.end_ns - s.start_ns);
    // Taken in order of precedence; each claims what the earlier ones left.
    Intervals left = {{s.start_ns, s.end_ns}};
    if (p.span_ns == 0) left.clear();
    auto claim = [&left](const Intervals& marked) {
      const Intervals mine = detail::intersect(left, marked);
      left = detail::subtract(left, mine);
      return detail::length(mine);
    };
    p.user_ns = claim(detail::clip(of_thread(user, p.tid), s.start_ns, s.end_ns));
    auto& phase = p.phase_ns;
    phase[static_cast<int>(FrameworkPhase::data)] = claim(detail::clip(of_thread(data, p.tid), s.start_ns, s.end_ns));
    phase[static_cast<int>(FrameworkPhase::optimizer)] =
        claim(detail::clip(of_thread(optimizer, p.tid), s.start_ns, s.end_ns));
    phase[static_cast<int>(FrameworkPhase::backward)] = claim(detail::clip(backward, s.start_ns, s.end_ns));
    phase[static_cast<int>(FrameworkPhase::forward)] =
        claim(detail::clip(of_thread(work, p.tid), s.start_ns, s.end_ns));
    p.unattributed_ns = detail::length(left);
    out.push_back(p);
  }
  return out;
}

}  // namespace timeline
}  // namespace v1
}  // namespace stepscope

// The Kineto importer's last pass, after either parser: from the raw events a
// TraceBuilder holds to the Timeline. Each category and name is classified
// once; then HTA's filters (events without a category, and everything from
// the last ProfilerStep on) pick the events kept, and each kept one becomes a
// host op, device op, step or phase.
#include "import/kineto_timeline.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "import/kineto_semantics.hpp"
#include "import/trace_import.hpp"
#include "timeline/correlation_map.hpp"
#include "timeline/name_rules.hpp"

namespace stepscope {
inline namespace v1 {
namespace detail::kineto {
namespace {

using timeline::NameId;

constexpr NameId kNoId = std::numeric_limits<NameId>::max();

// Trace categories the model cares about.
enum class Category : std::uint8_t {
  kernel,
  memcpy,
  memset,
  cuda_sync,
  runtime,  // cuda_runtime, cuda_driver
  cpu_op,
  user_annotation,
  gpu_user_annotation,
  python_function,
  other,
};

Category category_of(std::string_view cat) {
  if (cat == "kernel" || cat == "Kernel" || cat == "mtia_ccp_events") return Category::kernel;
  if (cat == "gpu_memcpy" || cat == "Memcpy") return Category::memcpy;
  if (cat == "gpu_memset" || cat == "Memset") return Category::memset;
  if (cat == "cuda_sync") return Category::cuda_sync;
  if (cat == "cuda_runtime" || cat == "cuda_driver" || cat == "Runtime" || cat == "Driver" || cat == "mtia_runtime")
    return Category::runtime;
  if (cat == "cpu_op" || cat == "Operator") return Category::cpu_op;
  if (cat == "user_annotation") return Category::user_annotation;
  if (cat == "gpu_user_annotation") return Category::gpu_user_annotation;
  if (cat == "python_function") return Category::python_function;
  return Category::other;
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

// The category a Kineto trace would have given an event of a legacy trace,
// from its name. Operators are namespaced ("aten::addmm",
// "autograd::engine::evaluate_function: AddmmBackward0"), autograd nodes end
// in Backward<N> ("AddmmBackward0"), and the few bare ATen names PyTorch 1.13
// writes are in-place ops ("detach_"): cpu_op. Everything else is a
// record_function range — PyTorch's own ("ProfilerStep#3",
// "enumerate(DataLoader)#...", "Optimizer.step#SGD.step") or the user's —
// which Kineto files under user_annotation.
Category legacy_category(std::string_view name) {
  if (name.find("::") != std::string_view::npos) return Category::cpu_op;
  std::size_t digits = 0;
  while (digits < name.size() && name[name.size() - 1 - digits] >= '0' && name[name.size() - 1 - digits] <= '9')
    ++digits;
  const std::string_view stem = name.substr(0, name.size() - digits);
  constexpr std::string_view kBackward = "Backward";
  if (stem.size() > kBackward.size() && stem.compare(stem.size() - kBackward.size(), kBackward.size(), kBackward) == 0)
    return Category::cpu_op;
  const bool identifier = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
  if (identifier && name.back() == '_') return Category::cpu_op;  // in-place op: "detach_", "zero_"
  return Category::user_annotation;
}

// HTA's GPUKernelFilter: device work is (stream >= 0 and correlation >= 0),
// plus the device-wide sync events that Kineto puts on stream -1.
struct NameFacts {
  bool is_step = false;
  std::int64_t step_number = -1;
  bool is_device_sync = false;  // "Event Sync" / "Context Sync"
};

// What each category and name of the trace says, computed once per id: the
// passes over the events only index these tables.
struct EventKinds {
  std::vector<Category> category_kind;
  // Kineto before PyTorch 1.10 files record_function ranges (the user's and
  // PyTorch's own) under "Operator", with the operators: events of that
  // category are told apart by name, as in a legacy trace.
  std::vector<char> category_by_name;
  bool any_by_name = false;
  NameId no_category = kNoId;
  // A legacy trace (PyTorch built without Kineto: torch.autograd.profiler's
  // export_chrome_trace, libtorch's RecordProfile) gives no event a category.
  // Then every event is a host event; in a Kineto trace the few without one
  // are dropped, as HTA drops them.
  bool legacy = false;
  std::vector<NameFacts> facts;
  std::vector<Category> legacy_kind;  // by name; empty unless legacy || any_by_name

  bool is_gpu_event(const RawEvent& e) const {
    return (e.stream >= 0 && e.correlation >= 0) || facts[e.name].is_device_sync;
  }
  Category category_of_event(const RawEvent& e) const {
    return legacy || (any_by_name && category_by_name[e.category]) ? legacy_kind[e.name] : category_kind[e.category];
  }
};

void classify_categories(const Interner& categories, EventKinds& kinds) {
  kinds.category_kind.resize(categories.size());
  kinds.category_by_name.assign(categories.size(), 0);
  for (NameId i = 0; i < categories.size(); ++i) {
    kinds.category_kind[i] = category_of(categories.text(i));
    if (categories.text(i) == kNoCategory) kinds.no_category = i;
    if (categories.text(i) == "Operator") kinds.category_by_name[i] = 1, kinds.any_by_name = true;
  }
  kinds.legacy = kinds.no_category != kNoId && categories.size() == 1;
}

NameFacts name_facts(const std::string& n) {
  NameFacts facts;
  if (starts_with(n, "ProfilerStep#")) {
    facts.is_step = true;
    // Digits after '#'; a name without them is still a step marker for HTA.
    std::int64_t number = 0;
    bool digits = false;
    for (std::size_t k = 13; k < n.size() && n[k] >= '0' && n[k] <= '9' && number < (1LL << 50); ++k) {
      number = number * 10 + (n[k] - '0');
      digits = true;
    }
    facts.step_number = digits ? number : -1;
  } else if (starts_with(n, "ProfilerStep")) {
    facts.is_step = true;  // HTA matches the prefix "ProfilerStep"
  }
  facts.is_device_sync = n == "Event Sync" || n == "Context Sync";
  return facts;
}

// After classify_categories(): legacy_kind depends on the categories.
void classify_names(const Interner& names, EventKinds& kinds) {
  const bool by_name = kinds.legacy || kinds.any_by_name;
  kinds.facts.resize(names.size());
  kinds.legacy_kind.resize(by_name ? names.size() : 0);
  for (NameId i = 0; i < names.size(); ++i) {
    const std::string& n = names.text(i);
    if (by_name) kinds.legacy_kind[i] = legacy_category(n);
    kinds.facts[i] = name_facts(n);
  }
}

struct LastStep {
  std::size_t distinct_steps = 0;
  std::int64_t start_ns = std::numeric_limits<std::int64_t>::min();
};

// Distinct step names present, and where the last step starts: the host's
// ProfilerStep ranges only. PyTorch 2.x also writes each step as a
// gpu_user_annotation on the GPU's row (no correlation id), starting when
// the step's first GPU work does, well inside the host's step: counted, it
// cut the last kept host step short (an RTX 3080 trace kept ProfilerStep#4
// with 0.03 ms of its 1.36 ms in any phase). HTA takes the CPU rows only.
LastStep find_last_step(const EventStore& events, const EventKinds& kinds) {
  LastStep last;
  std::vector<char> step_seen(kinds.facts.size(), 0);
  events.for_each([&](const RawEvent& e) {
    if (!kinds.facts[e.name].is_step || kinds.is_gpu_event(e) ||
        kinds.category_of_event(e) == Category::gpu_user_annotation)
      return;
    if (step_seen[e.name] == 0) {
      step_seen[e.name] = 1;
      ++last.distinct_steps;
    }
    last.start_ns = std::max(last.start_ns, e.start_ns);
  });
  return last;
}

// Host events starting before the last step are kept, and the device events
// their correlation ids launched.
void drop_from_last_step(const EventStore& events, const EventKinds& kinds, std::int64_t last_step_start,
                         std::vector<char>& keep, ImportStats& stats) {
  detail::CorrelationMap<char> kept_correlations(events.size() / 2);
  for (std::size_t i = 0; i < events.size(); ++i) {
    const RawEvent& e = events[i];
    if (kinds.is_gpu_event(e)) continue;
    keep[i] = e.start_ns < last_step_start;
    if (keep[i]) kept_correlations[e.correlation] = 1;
  }
  for (std::size_t i = 0; i < events.size(); ++i) {
    const RawEvent& e = events[i];
    if (kinds.is_gpu_event(e)) keep[i] = kept_correlations.contains(e.correlation);
    if (!keep[i]) ++stats.events_dropped_after_last_step;
  }
}

// One flag per event: whether the timeline keeps it.
std::vector<char> kept_events(const EventStore& events, const EventKinds& kinds, const ImportOptions& options,
                              ImportStats& stats) {
  const LastStep last = find_last_step(events, kinds);
  std::vector<char> keep(events.size(), 1);
  if (!kinds.legacy && kinds.no_category != kNoId) {
    for (std::size_t i = 0; i < events.size(); ++i) {
      if (events[i].category != kinds.no_category) continue;
      keep[i] = 0;
      ++stats.events_without_category;
    }
    stats.complete_events -= stats.events_without_category;
  }
  if (options.drop_last_profiler_step && last.distinct_steps >= 2)
    drop_from_last_step(events, kinds, last.start_ns, keep, stats);
  return keep;
}

timeline::DeviceInterval device_op(const RawEvent& e, Category cat, timeline::KernelClass cls, const Interner& names) {
  timeline::DeviceInterval d;
  d.start_ns = e.start_ns;
  d.end_ns = e.end_ns;
  d.stream = e.stream;
  d.correlation = e.correlation;
  d.device = e.device;
  d.name = e.name;
  d.cls = cls;
  d.bytes = e.bytes;
  switch (cat) {
    case Category::kernel:
      d.kind = timeline::DeviceOpKind::kernel;
      break;
    case Category::memcpy:
      d.kind = timeline::DeviceOpKind::memcpy;
      break;
    case Category::memset:
      d.kind = timeline::DeviceOpKind::memset;
      break;
    case Category::cuda_sync:
      d.kind = timeline::DeviceOpKind::sync;
      break;
    default:
      d.kind = timeline::DeviceOpKind::other;
      break;
  }
  if (d.kind == timeline::DeviceOpKind::memcpy) detail::describe_memcpy(names.text(e.name), d.direction, d.host_memory);
  return d;
}

// A step's kind is set by the caller, which knows the name's facts.
timeline::HostInterval host_op(const RawEvent& e, Category cat, const std::vector<timeline::HostOpKind>& runtime_kind) {
  timeline::HostInterval h;
  h.start_ns = e.start_ns;
  h.end_ns = e.end_ns;
  h.pid = e.pid;
  h.tid = e.tid;
  h.correlation = e.correlation;
  h.name = e.name;
  switch (cat) {
    case Category::runtime:
      h.kind = runtime_kind[e.name];
      break;
    case Category::cuda_sync:
      h.kind = timeline::HostOpKind::runtime_sync;
      break;
    case Category::cpu_op:
      h.kind = timeline::HostOpKind::framework_op;
      break;
    case Category::user_annotation:
      h.kind = timeline::HostOpKind::annotation;
      break;
    case Category::python_function:
      h.kind = timeline::HostOpKind::python;
      break;
    default:
      h.kind = timeline::HostOpKind::other;
      break;
  }
  return h;
}

// The kept events as the timeline's device ops, host ops, steps and phases.
void add_events(const EventStore& events, const std::vector<char>& keep, const EventKinds& kinds, const Interner& names,
                timeline::Timeline& tl) {
  // Per-name classification, computed once.
  std::vector<timeline::KernelClass> kernel_class(names.size());
  std::vector<timeline::HostOpKind> runtime_kind(names.size());
  for (NameId i = 0; i < names.size(); ++i) {
    kernel_class[i] = timeline::classify_kernel(names.text(i));
    runtime_kind[i] = timeline::classify_runtime_call(names.text(i));
  }

  // Exact capacities: a doubling vector would briefly hold twice the ops.
  std::size_t host_count = 0, device_count = 0;
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (!keep[i]) continue;
    (events[i].stream != -1 ? device_count : host_count) += 1;
  }
  tl.host_ops.reserve(host_count);
  tl.device_ops.reserve(device_count);

  for (std::size_t i = 0; i < events.size(); ++i) {
    if (!keep[i]) continue;
    const RawEvent& e = events[i];
    const Category cat = kinds.category_of_event(e);
    if (cat == Category::gpu_user_annotation) {
      tl.phases.push_back(timeline::Phase{e.name, e.start_ns, e.end_ns, e.tid, true});
      continue;
    }
    if (e.stream != -1) {
      tl.device_ops.push_back(device_op(e, cat, kernel_class[e.name], names));
      continue;
    }
    timeline::HostInterval h = host_op(e, cat, runtime_kind);
    if (kinds.facts[e.name].is_step) {
      h.kind = timeline::HostOpKind::step;
      tl.steps.push_back(timeline::Step{kinds.facts[e.name].step_number, e.start_ns, e.end_ns});
    } else if (cat == Category::user_annotation) {
      tl.phases.push_back(timeline::Phase{e.name, e.start_ns, e.end_ns, e.tid, false});
    }
    tl.host_ops.push_back(h);
  }
}

}  // namespace

void build_timeline(TraceBuilder& builder, const ImportOptions& options, ImportResult& result) {
  EventStore& events = builder.events();
  Interner& names = builder.names();

  EventKinds kinds;
  classify_categories(builder.categories(), kinds);
  if (kinds.legacy) result.stats.legacy_format = true;
  classify_names(names, kinds);
  const std::vector<char> keep = kept_events(events, kinds, options, result.stats);

  timeline::Timeline& tl = result.trace;
  tl = std::move(builder.meta());
  if (!tl.has_distributed_info) {
    tl.rank = 0;
    tl.world_size = 1;
  }
  add_events(events, keep, kinds, names, tl);
  std::stable_sort(tl.steps.begin(), tl.steps.end(),
                   [](const timeline::Step& a, const timeline::Step& b) { return a.start_ns < b.start_ns; });
  // The raw events are no longer needed; release them before the names move.
  events.release();
  tl.names = names.take();
}

}  // namespace detail::kineto
}  // namespace v1
}  // namespace stepscope

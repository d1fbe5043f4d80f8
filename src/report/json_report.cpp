// The JSON report: serialisation of stepscope::Report (docs/report-schema.md).
#include <stepscope/report.hpp>

#include <nlohmann/json.hpp>
#include <zlib.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

namespace stepscope {

using nlohmann::json;

const char* to_string(PhaseKind kind) noexcept {
  switch (kind) {
    case PhaseKind::input: return "input";
    case PhaseKind::compute: return "compute";
    case PhaseKind::memory: return "memory";
    case PhaseKind::communication: return "communication";
    case PhaseKind::other: return "other";
  }
  return "other";
}

const char* to_string(ThreadRole role) noexcept {
  switch (role) {
    case ThreadRole::step: return "step";
    case ThreadRole::outside_step: return "outside_step";
    case ThreadRole::background: return "background";
  }
  return "background";
}

bool parse_phase_kind(const std::string& text, PhaseKind& out) noexcept {
  for (PhaseKind k : {PhaseKind::input, PhaseKind::compute, PhaseKind::memory, PhaseKind::communication, PhaseKind::other})
    if (text == to_string(k)) return out = k, true;
  return false;
}

bool parse_thread_role(const std::string& text, ThreadRole& out) noexcept {
  for (ThreadRole r : {ThreadRole::step, ThreadRole::outside_step, ThreadRole::background})
    if (text == to_string(r)) return out = r, true;
  return false;
}

namespace {

// JSON has no NaN/Inf: write them as null and read null back as 0.
json num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }
double get_num(const json& j, const char* key, double fallback = 0) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) throw std::runtime_error(std::string("field '") + key + "' is not a number");
  return it->get<double>();
}
std::uint64_t get_u64(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return 0;
  if (!it->is_number()) throw std::runtime_error(std::string("field '") + key + "' is not a number");
  const double v = it->get<double>();
  return v > 0 ? static_cast<std::uint64_t>(v) : 0;
}
std::string get_str(const json& j, const char* key, const std::string& fallback = "") {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_string()) throw std::runtime_error(std::string("field '") + key + "' is not a string");
  return it->get<std::string>();
}
const json& get_obj(const json& j, const char* key) {
  static const json empty = json::object();
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return empty;
  if (!it->is_object()) throw std::runtime_error(std::string("field '") + key + "' is not an object");
  return *it;
}
const json& get_arr(const json& j, const char* key) {
  static const json empty = json::array();
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return empty;
  if (!it->is_array()) throw std::runtime_error(std::string("field '") + key + "' is not an array");
  return *it;
}

json to_j(const Distribution& d) {
  return json{{"count", d.count}, {"total", num(d.total)}, {"mean", num(d.mean)}, {"stddev", num(d.stddev)},
              {"min", num(d.min)},   {"max", num(d.max)},     {"p50", num(d.p50)},   {"p90", num(d.p90)},
              {"p99", num(d.p99)}};
}
Distribution dist_from(const json& j) {
  Distribution d;
  d.count = get_u64(j, "count");
  d.total = get_num(j, "total");
  d.mean = get_num(j, "mean");
  d.stddev = get_num(j, "stddev");
  d.min = get_num(j, "min");
  d.max = get_num(j, "max");
  d.p50 = get_num(j, "p50");
  d.p90 = get_num(j, "p90");
  d.p99 = get_num(j, "p99");
  return d;
}

json to_j(const HistogramData& h) {
  json buckets = json::array();
  for (const auto& [index, count] : h.buckets) buckets.push_back(json::array({index, count}));
  return json{{"layout", "log-linear-ns"}, {"sub_bucket_bits", h.sub_bucket_bits}, {"buckets", buckets}};
}
HistogramData hist_from(const json& j) {
  HistogramData h;
  h.sub_bucket_bits = static_cast<int>(get_num(j, "sub_bucket_bits"));
  for (const auto& b : get_arr(j, "buckets")) {
    if (!b.is_array() || b.size() != 2 || !b[0].is_number_unsigned() || !b[1].is_number_unsigned())
      throw std::runtime_error("histogram bucket is not a pair of counts");
    h.buckets.emplace_back(b[0].get<std::uint32_t>(), b[1].get<std::uint64_t>());
  }
  return h;
}

json to_j(const StepBreakdown& b) {
  return json{{"wall_ms", num(b.wall_ms)},
              {"input_ms", num(b.input_ms)},
              {"compute_ms", num(b.compute_ms)},
              {"memory_ms", num(b.memory_ms)},
              {"communication_ms", num(b.communication_ms)},
              {"other_ms", num(b.other_ms)},
              {"unattributed_ms", num(b.unattributed_ms)},
              {"between_steps_input_ms", num(b.between_steps_input_ms)},
              {"between_steps_ms", num(b.between_steps_ms)}};
}
StepBreakdown breakdown_from(const json& j) {
  StepBreakdown b;
  b.wall_ms = get_num(j, "wall_ms");
  b.input_ms = get_num(j, "input_ms");
  b.compute_ms = get_num(j, "compute_ms");
  b.memory_ms = get_num(j, "memory_ms");
  b.communication_ms = get_num(j, "communication_ms");
  b.other_ms = get_num(j, "other_ms");
  b.unattributed_ms = get_num(j, "unattributed_ms");
  b.between_steps_input_ms = get_num(j, "between_steps_input_ms");
  b.between_steps_ms = get_num(j, "between_steps_ms");
  return b;
}

json nums(const std::vector<double>& v) {
  json a = json::array();
  for (double x : v) a.push_back(num(x));
  return a;
}
std::vector<double> nums_from(const json& j, const char* key) {
  std::vector<double> v;
  for (const auto& x : get_arr(j, key)) v.push_back(x.is_number() ? x.get<double>() : 0.0);
  return v;
}

json to_j(const StepSeries& s) {
  return json{{"stride", s.stride},
              {"first_step", s.first_step},
              {"wall_ms", nums(s.wall_ms)},
              {"input_ms", nums(s.input_ms)},
              {"compute_ms", nums(s.compute_ms)},
              {"memory_ms", nums(s.memory_ms)},
              {"communication_ms", nums(s.communication_ms)},
              {"other_ms", nums(s.other_ms)},
              {"unattributed_ms", nums(s.unattributed_ms)},
              {"between_steps_ms", nums(s.between_steps_ms)},
              {"rss_mb", nums(s.rss_mb)}};
}
StepSeries series_from(const json& j) {
  StepSeries s;
  s.stride = static_cast<std::uint32_t>(get_u64(j, "stride"));
  if (s.stride == 0) s.stride = 1;
  for (const auto& x : get_arr(j, "first_step")) s.first_step.push_back(x.is_number() ? x.get<std::uint64_t>() : 0);
  s.wall_ms = nums_from(j, "wall_ms");
  s.input_ms = nums_from(j, "input_ms");
  s.compute_ms = nums_from(j, "compute_ms");
  s.memory_ms = nums_from(j, "memory_ms");
  s.communication_ms = nums_from(j, "communication_ms");
  s.other_ms = nums_from(j, "other_ms");
  s.unattributed_ms = nums_from(j, "unattributed_ms");
  s.between_steps_ms = nums_from(j, "between_steps_ms");
  s.rss_mb = nums_from(j, "rss_mb");
  return s;
}

json to_j(const SystemSignals& s) {
  auto fraction = [](double f) { return f < 0 ? json(nullptr) : num(f); };
  return json{{"available", s.available},
              {"wall_s", num(s.wall_s)},
              {"cpu_user_s", num(s.cpu_user_s)},
              {"cpu_system_s", num(s.cpu_system_s)},
              {"cores_available", s.cores_available},
              {"cpu_utilization", num(s.cpu_utilization)},
              {"minor_faults", s.minor_faults},
              {"major_faults", s.major_faults},
              {"voluntary_switches", s.voluntary_switches},
              {"involuntary_switches", s.involuntary_switches},
              {"read_bytes", s.read_bytes},
              {"write_bytes", s.write_bytes},
              {"io_wait_s", num(s.io_wait_s)},
              {"runqueue_wait_s", num(s.runqueue_wait_s)},
              {"rss_start_mb", num(s.rss_start_mb)},
              {"rss_peak_mb", num(s.rss_peak_mb)},
              {"rss_end_mb", num(s.rss_end_mb)},
              {"input_on_cpu_fraction", fraction(s.input_on_cpu_fraction)},
              {"compute_on_cpu_fraction", fraction(s.compute_on_cpu_fraction)},
              {"input_disk_wait_fraction", fraction(s.input_disk_wait_fraction)},
              {"input_samples", s.input_samples},
              {"samples", s.samples},
              {"sampling_cost_ms", num(s.sampling_cost_ms)},
              {"collector_cpu_ms", num(s.collector_cpu_ms)}};
}
SystemSignals system_from(const json& j) {
  SystemSignals s;
  s.available = j.value("available", false);
  s.wall_s = get_num(j, "wall_s");
  s.cpu_user_s = get_num(j, "cpu_user_s");
  s.cpu_system_s = get_num(j, "cpu_system_s");
  s.cores_available = static_cast<int>(get_num(j, "cores_available"));
  s.cpu_utilization = get_num(j, "cpu_utilization");
  s.minor_faults = get_u64(j, "minor_faults");
  s.major_faults = get_u64(j, "major_faults");
  s.voluntary_switches = get_u64(j, "voluntary_switches");
  s.involuntary_switches = get_u64(j, "involuntary_switches");
  s.read_bytes = get_u64(j, "read_bytes");
  s.write_bytes = get_u64(j, "write_bytes");
  s.io_wait_s = get_num(j, "io_wait_s");
  s.runqueue_wait_s = get_num(j, "runqueue_wait_s");
  s.rss_start_mb = get_num(j, "rss_start_mb");
  s.rss_peak_mb = get_num(j, "rss_peak_mb");
  s.rss_end_mb = get_num(j, "rss_end_mb");
  s.input_on_cpu_fraction = get_num(j, "input_on_cpu_fraction", -1);
  s.compute_on_cpu_fraction = get_num(j, "compute_on_cpu_fraction", -1);
  s.input_disk_wait_fraction = get_num(j, "input_disk_wait_fraction", -1);
  s.input_samples = get_u64(j, "input_samples");
  s.samples = get_u64(j, "samples");
  s.sampling_cost_ms = get_num(j, "sampling_cost_ms");
  s.collector_cpu_ms = get_num(j, "collector_cpu_ms");
  return s;
}

json to_j(const Verdict& v) {
  json evidence = json::array();
  for (const auto& e : v.evidence)
    evidence.push_back(json{{"signal", e.signal},
                            {"value", num(e.value)},
                            {"threshold", num(e.threshold)},
                            {"comparison", e.comparison},
                            {"supports", e.supports},
                            {"sentence", e.sentence}});
  json ranking = json::array();
  for (const auto& [category, cost] : v.ranking) ranking.push_back(json{{"category", category}, {"share_of_step", num(cost)}});
  return json{{"category", v.category},   {"confidence", num(v.confidence)},         {"severity", v.severity},
              {"summary", v.summary},     {"evidence", evidence},                     {"recommendations", v.recommendations},
              {"ranking", ranking}};
}
Verdict verdict_from(const json& j) {
  Verdict v;
  v.category = get_str(j, "category", "unknown");
  v.confidence = get_num(j, "confidence");
  v.severity = get_str(j, "severity");
  v.summary = get_str(j, "summary");
  for (const auto& e : get_arr(j, "evidence")) {
    Evidence ev;
    ev.signal = get_str(e, "signal");
    ev.value = get_num(e, "value");
    ev.threshold = get_num(e, "threshold");
    ev.comparison = get_str(e, "comparison");
    ev.supports = e.value("supports", false);
    ev.sentence = get_str(e, "sentence");
    v.evidence.push_back(std::move(ev));
  }
  for (const auto& r : get_arr(j, "recommendations"))
    if (r.is_string()) v.recommendations.push_back(r.get<std::string>());
  for (const auto& r : get_arr(j, "ranking")) v.ranking.emplace_back(get_str(r, "category"), get_num(r, "share_of_step"));
  return v;
}

json to_j(const PhaseSummary& p) {
  json j{{"name", p.name},
         {"kind", to_string(p.kind)},
         {"thread_role", to_string(p.thread_role)},
         {"count", p.count},
         {"host_ms", to_j(p.host_ms)},
         {"self_ms", to_j(p.self_ms)},
         {"share_of_step", num(p.share_of_step)},
         {"threads", p.threads},
         {"histogram", to_j(p.histogram)}};
  j["overlap_with_steps"] = p.overlap_with_steps ? num(*p.overlap_with_steps) : json(nullptr);
  j["device_ms"] = p.device_ms ? to_j(*p.device_ms) : json(nullptr);
  if (!p.sites.empty()) {
    json sites = json::array();
    for (const PhaseCallSite& site : p.sites)
      sites.push_back(json{{"file", site.file}, {"line", site.line}, {"host_ms", to_j(site.host_ms)}});
    j["sites"] = std::move(sites);
    j["sites_merged"] = p.sites_merged;
  }
  return j;
}
PhaseSummary phase_from(const json& j) {
  PhaseSummary p;
  p.name = get_str(j, "name");
  if (!parse_phase_kind(get_str(j, "kind", "other"), p.kind)) throw std::runtime_error("phase '" + p.name + "' has an unknown kind");
  if (!parse_thread_role(get_str(j, "thread_role", "step"), p.thread_role))
    throw std::runtime_error("phase '" + p.name + "' has an unknown thread_role");
  p.count = get_u64(j, "count");
  p.host_ms = dist_from(get_obj(j, "host_ms"));
  p.self_ms = dist_from(get_obj(j, "self_ms"));
  p.share_of_step = get_num(j, "share_of_step");
  p.threads = static_cast<std::uint32_t>(get_u64(j, "threads"));
  p.histogram = hist_from(get_obj(j, "histogram"));
  if (j.contains("overlap_with_steps") && j["overlap_with_steps"].is_number()) p.overlap_with_steps = j["overlap_with_steps"].get<double>();
  if (j.contains("device_ms") && j["device_ms"].is_object()) p.device_ms = dist_from(j["device_ms"]);
  for (const auto& x : get_arr(j, "sites")) {
    PhaseCallSite site;
    site.file = get_str(x, "file");
    site.line = static_cast<int>(get_num(x, "line"));
    site.host_ms = dist_from(get_obj(x, "host_ms"));
    p.sites.push_back(std::move(site));
  }
  p.sites_merged = get_u64(j, "sites_merged");
  return p;
}

json to_j(const AcrossRanks& a) {
  return json{{"min", num(a.min)},           {"median", num(a.median)}, {"max", num(a.max)},
              {"mean", num(a.mean)},         {"min_rank", a.min_rank},  {"max_rank", a.max_rank},
              {"imbalance", num(a.imbalance)}};
}
AcrossRanks across_from(const json& j) {
  AcrossRanks a;
  a.min = get_num(j, "min");
  a.median = get_num(j, "median");
  a.max = get_num(j, "max");
  a.mean = get_num(j, "mean");
  a.min_rank = static_cast<int>(get_num(j, "min_rank", -1));
  a.max_rank = static_cast<int>(get_num(j, "max_rank", -1));
  a.imbalance = get_num(j, "imbalance");
  return a;
}

// The multi-rank section of a merged report (absent from single-rank reports).
json to_j(const MultiRank& m) {
  json ranks = json::array();
  for (const auto& r : m.ranks)
    ranks.push_back(json{{"rank", r.rank},
                         {"host", r.host},
                         {"steps", r.steps},
                         {"step_ms", num(r.step_ms)},
                         {"busy_ms", num(r.busy_ms)},
                         {"input_ms", num(r.input_ms)},
                         {"compute_ms", num(r.compute_ms)},
                         {"memory_ms", num(r.memory_ms)},
                         {"communication_ms", num(r.communication_ms)},
                         {"other_ms", num(r.other_ms)},
                         {"unattributed_ms", num(r.unattributed_ms)},
                         {"comm_wait_ms", num(r.comm_wait_ms)},
                         {"verdict", r.verdict},
                         {"straggler", r.straggler}});
  json phases = json::array();
  for (const auto& p : m.phases)
    phases.push_back(json{{"name", p.name}, {"kind", to_string(p.kind)}, {"ranks", p.ranks}, {"per_step_ms", to_j(p.per_step_ms)}});
  json steps = json::array();
  for (const auto& s : m.steps)
    steps.push_back(json{{"first_step", s.first_step},
                         {"wall_ms", to_j(s.wall_ms)},
                         {"busy_ms", to_j(s.busy_ms)},
                         {"communication_ms", to_j(s.communication_ms)}});
  json stragglers = json::array();
  for (const auto& s : m.stragglers)
    stragglers.push_back(json{{"rank", s.rank},
                              {"phase", s.phase},
                              {"rank_ms", num(s.rank_ms)},
                              {"median_ms", num(s.median_ms)},
                              {"excess_ms", num(s.excess_ms)},
                              {"robust_z", num(s.robust_z)},
                              {"slow_step_fraction", num(s.slow_step_fraction)},
                              {"pattern", s.pattern},
                              {"slow_steps", s.slow_steps}});
  return json{{"world_size", m.world_size},
              {"ranks_merged", m.ranks_merged},
              {"missing_ranks", m.missing_ranks},
              {"step_ms", to_j(m.step_ms)},
              {"busy_ms", to_j(m.busy_ms)},
              {"compute_ms", to_j(m.compute_ms)},
              {"communication_ms", to_j(m.communication_ms)},
              {"comm_ms", num(m.comm_ms)},
              {"comm_collective_ms", num(m.comm_collective_ms)},
              {"comm_wait_ms", num(m.comm_wait_ms)},
              {"comm_wait_fraction", num(m.comm_wait_fraction)},
              {"expected_wait_from_imbalance_ms", num(m.expected_wait_from_imbalance_ms)},
              {"stragglers", stragglers},
              {"method", m.method},
              {"ranks", ranks},
              {"phases", phases},
              {"step_stride", m.step_stride},
              {"steps", steps}};
}
MultiRank multirank_from(const json& j) {
  MultiRank m;
  m.world_size = static_cast<int>(get_num(j, "world_size"));
  m.ranks_merged = static_cast<int>(get_num(j, "ranks_merged"));
  for (const auto& r : get_arr(j, "missing_ranks"))
    if (r.is_number_integer()) m.missing_ranks.push_back(r.get<int>());
  m.step_ms = across_from(get_obj(j, "step_ms"));
  m.busy_ms = across_from(get_obj(j, "busy_ms"));
  m.compute_ms = across_from(get_obj(j, "compute_ms"));
  m.communication_ms = across_from(get_obj(j, "communication_ms"));
  m.comm_ms = get_num(j, "comm_ms");
  m.comm_collective_ms = get_num(j, "comm_collective_ms");
  m.comm_wait_ms = get_num(j, "comm_wait_ms");
  m.comm_wait_fraction = get_num(j, "comm_wait_fraction");
  m.expected_wait_from_imbalance_ms = get_num(j, "expected_wait_from_imbalance_ms");
  for (const auto& x : get_arr(j, "stragglers")) {
    Straggler s;
    s.rank = static_cast<int>(get_num(x, "rank", -1));
    s.phase = get_str(x, "phase");
    s.rank_ms = get_num(x, "rank_ms");
    s.median_ms = get_num(x, "median_ms");
    s.excess_ms = get_num(x, "excess_ms");
    s.robust_z = get_num(x, "robust_z");
    s.slow_step_fraction = get_num(x, "slow_step_fraction");
    s.pattern = get_str(x, "pattern");
    for (const auto& v : get_arr(x, "slow_steps"))
      if (v.is_number_unsigned()) s.slow_steps.push_back(v.get<std::uint64_t>());
    m.stragglers.push_back(std::move(s));
  }
  m.method = get_str(j, "method");
  for (const auto& x : get_arr(j, "ranks")) {
    RankSummary r;
    r.rank = static_cast<int>(get_num(x, "rank", -1));
    r.host = get_str(x, "host");
    r.steps = get_u64(x, "steps");
    r.step_ms = get_num(x, "step_ms");
    r.busy_ms = get_num(x, "busy_ms");
    r.input_ms = get_num(x, "input_ms");
    r.compute_ms = get_num(x, "compute_ms");
    r.memory_ms = get_num(x, "memory_ms");
    r.communication_ms = get_num(x, "communication_ms");
    r.other_ms = get_num(x, "other_ms");
    r.unattributed_ms = get_num(x, "unattributed_ms");
    r.comm_wait_ms = get_num(x, "comm_wait_ms");
    r.verdict = get_str(x, "verdict");
    r.straggler = x.value("straggler", false);
    m.ranks.push_back(std::move(r));
  }
  for (const auto& x : get_arr(j, "phases")) {
    PhaseAcrossRanks p;
    p.name = get_str(x, "name");
    if (!parse_phase_kind(get_str(x, "kind", "other"), p.kind)) throw std::runtime_error("ranks.phases: unknown kind");
    p.ranks = static_cast<std::uint32_t>(get_u64(x, "ranks"));
    p.per_step_ms = across_from(get_obj(x, "per_step_ms"));
    m.phases.push_back(std::move(p));
  }
  m.step_stride = static_cast<std::uint32_t>(get_u64(j, "step_stride"));
  if (m.step_stride == 0) m.step_stride = 1;
  for (const auto& x : get_arr(j, "steps")) {
    StepAcrossRanks s;
    s.first_step = get_u64(x, "first_step");
    s.wall_ms = across_from(get_obj(x, "wall_ms"));
    s.busy_ms = across_from(get_obj(x, "busy_ms"));
    s.communication_ms = across_from(get_obj(x, "communication_ms"));
    m.steps.push_back(std::move(s));
  }
  return m;
}

json to_j(const Report& r) {
  json run{{"library_version", r.run.library_version},
           {"time_utc", r.run.time_utc},
           {"host", r.run.host},
           {"pid", r.run.pid},
           {"rank", r.run.rank < 0 ? json(nullptr) : json(r.run.rank)},
           {"world_size", r.run.world_size},
           {"source", r.run.source},
           {"build", r.run.build},
           {"clock", json{{"source", r.run.clock_source}, {"tsc_ghz", num(r.run.clock_tsc_ghz)}, {"error_ppm", num(r.run.clock_error_ppm)}}},
           {"warmup", json{{"steps", r.run.warmup_steps}, {"source", r.run.warmup_source}}}};
  json config = json::object();
  for (const auto& [key, value] : r.run.config) {
    auto type = r.run.config_types.find(key);
    if (type != r.run.config_types.end() && type->second == "number") {
      char* end = nullptr;
      const double d = std::strtod(value.c_str(), &end);
      config[key] = (end != value.c_str() && *end == '\0') ? num(d) : json(value);
    } else {
      config[key] = value;
    }
  }
  run["config"] = config;

  json steps{{"count", r.steps.count},
             {"warmup_excluded", r.steps.warmup_excluded},
             {"wall_ms", to_j(r.steps.wall_ms)},
             {"warmup_wall_ms", to_j(r.steps.warmup_wall_ms)},
             {"breakdown", to_j(r.steps.breakdown)},
             {"series", to_j(r.steps.series)},
             {"histogram", to_j(r.steps.histogram)},
             {"coverage", r.steps.coverage ? num(*r.steps.coverage) : json(nullptr)},
             {"between_steps_ms", num(r.steps.between_steps_ms)},
             {"between_steps_input_ms", num(r.steps.between_steps_input_ms)}};
  json phases = json::array();
  for (const auto& p : r.phases) phases.push_back(to_j(p));
  json findings = json::array();
  for (const auto& f : r.findings)
    findings.push_back(json{{"kind", f.kind}, {"severity", f.severity}, {"message", f.message}, {"values", f.values}});
  json what_if = json::array();
  for (const auto& w : r.what_if)
    what_if.push_back(json{{"target", w.target},
                           {"share", num(w.share)},
                           {"speedup", num(w.speedup)},
                           {"step_ms_now", num(w.step_ms_now)},
                           {"step_ms_projected", num(w.step_ms_projected)},
                           {"step_change_pct", num(w.step_change_pct)},
                           {"note", w.note}});
  json device{{"enabled", r.device.enabled},
              {"status", r.device.status},
              {"reason", r.device.reason},
              {"name", r.device.name},
              {"memory_capacity_mb", num(r.device.memory_capacity_mb)},
              {"memory_peak_mb", num(r.device.memory_peak_mb)}};
  json facts = json::object();
  for (const auto& [k, v] : r.device.facts) facts[k] = num(v);
  device["facts"] = facts;

  json out{{"schema_version", r.schema_version},
           {"run", run},
           {"steps", steps},
           {"phases", phases},
           {"dropped_records", r.dropped_records},
           {"total_records", r.total_records},
           {"system", to_j(r.system)},
           {"device", device},
           {"bottleneck", to_j(r.bottleneck)},
           {"findings", findings},
           {"what_if", what_if},
           {"warnings", r.warnings}};
  if (r.ranks) out["ranks"] = to_j(*r.ranks);  // merged multi-rank reports only
  return out;
}

Report report_from(const json& j) {
  if (!j.is_object()) throw std::runtime_error("the top level is not a JSON object");
  if (!j.contains("schema_version")) throw std::runtime_error("no 'schema_version': not a stepscope report");
  if (!j["schema_version"].is_number_integer()) throw std::runtime_error("'schema_version' is not an integer");
  Report r;
  r.schema_version = j["schema_version"].get<int>();
  if (r.schema_version != kReportSchemaVersion)
    throw std::runtime_error("unsupported schema_version " + std::to_string(r.schema_version) + " (this stepscope reads " +
                             std::to_string(kReportSchemaVersion) + ")");
  const json& run = get_obj(j, "run");
  r.run.library_version = get_str(run, "library_version");
  r.run.time_utc = get_str(run, "time_utc");
  r.run.host = get_str(run, "host");
  r.run.pid = static_cast<std::int64_t>(get_num(run, "pid"));
  r.run.rank = run.contains("rank") && run["rank"].is_number() ? run["rank"].get<int>() : -1;
  r.run.world_size = static_cast<int>(get_num(run, "world_size", 1));
  r.run.source = get_str(run, "source", "live");
  for (const auto& [k, v] : get_obj(run, "build").items()) r.run.build[k] = v.is_string() ? v.get<std::string>() : v.dump();
  for (const auto& [k, v] : get_obj(run, "config").items()) {
    if (v.is_string()) {
      r.run.config[k] = v.get<std::string>();
      r.run.config_types[k] = "string";
    } else if (v.is_number()) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.17g", v.get<double>());  // as set_config() stored it
      r.run.config[k] = buf;
      r.run.config_types[k] = "number";
    } else {
      r.run.config[k] = v.dump();
      r.run.config_types[k] = "string";
    }
  }
  const json& clock = get_obj(run, "clock");
  r.run.clock_source = get_str(clock, "source");
  r.run.clock_tsc_ghz = get_num(clock, "tsc_ghz");
  r.run.clock_error_ppm = get_num(clock, "error_ppm");
  const json& warmup = get_obj(run, "warmup");
  r.run.warmup_steps = get_u64(warmup, "steps");
  r.run.warmup_source = get_str(warmup, "source");

  const json& steps = get_obj(j, "steps");
  r.steps.count = get_u64(steps, "count");
  r.steps.warmup_excluded = get_u64(steps, "warmup_excluded");
  r.steps.wall_ms = dist_from(get_obj(steps, "wall_ms"));
  r.steps.warmup_wall_ms = dist_from(get_obj(steps, "warmup_wall_ms"));
  r.steps.breakdown = breakdown_from(get_obj(steps, "breakdown"));
  r.steps.series = series_from(get_obj(steps, "series"));
  r.steps.histogram = hist_from(get_obj(steps, "histogram"));
  if (steps.contains("coverage") && steps["coverage"].is_number()) r.steps.coverage = steps["coverage"].get<double>();
  r.steps.between_steps_ms = get_num(steps, "between_steps_ms");
  r.steps.between_steps_input_ms = get_num(steps, "between_steps_input_ms");
  for (const auto& p : get_arr(j, "phases")) r.phases.push_back(phase_from(p));
  r.dropped_records = get_u64(j, "dropped_records");
  r.total_records = get_u64(j, "total_records");
  r.system = system_from(get_obj(j, "system"));
  const json& device = get_obj(j, "device");
  r.device.enabled = device.value("enabled", false);
  r.device.status = get_str(device, "status");
  r.device.reason = get_str(device, "reason");
  r.device.name = get_str(device, "name");
  r.device.memory_capacity_mb = get_num(device, "memory_capacity_mb");
  r.device.memory_peak_mb = get_num(device, "memory_peak_mb");
  for (const auto& [k, v] : get_obj(device, "facts").items())
    if (v.is_number()) r.device.facts[k] = v.get<double>();
  r.bottleneck = verdict_from(get_obj(j, "bottleneck"));
  for (const auto& f : get_arr(j, "findings")) {
    Finding finding;
    finding.kind = get_str(f, "kind");
    finding.severity = get_str(f, "severity");
    finding.message = get_str(f, "message");
    for (const auto& [k, v] : get_obj(f, "values").items())
      if (v.is_number()) finding.values[k] = v.get<double>();
    r.findings.push_back(std::move(finding));
  }
  for (const auto& w : get_arr(j, "what_if")) {
    WhatIf x;
    x.target = get_str(w, "target");
    x.share = get_num(w, "share");
    x.speedup = get_num(w, "speedup");
    x.step_ms_now = get_num(w, "step_ms_now");
    x.step_ms_projected = get_num(w, "step_ms_projected");
    x.step_change_pct = get_num(w, "step_change_pct");
    x.note = get_str(w, "note");
    r.what_if.push_back(std::move(x));
  }
  for (const auto& w : get_arr(j, "warnings"))
    if (w.is_string()) r.warnings.push_back(w.get<std::string>());
  if (j.contains("ranks") && j["ranks"].is_object()) r.ranks = multirank_from(j["ranks"]);
  return r;
}

}  // namespace

bool read_file_maybe_gzip(const std::string& path, std::string& out, std::string& error) noexcept {
  // gzread passes plain files through unchanged.
  std::unique_ptr<gzFile_s, int (*)(gzFile)> f(gzopen(path.c_str(), "rb"), gzclose);
  if (f == nullptr) {
    error = "cannot open '" + path + "': " + std::strerror(errno);
    return false;
  }
  try {
    char buf[1 << 16];
    int n = 0;
    while ((n = gzread(f.get(), buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
    int errnum = 0;
    const char* message = gzerror(f.get(), &errnum);
    if (n == 0 && errnum == Z_OK) return true;
    error = "cannot read '" + path + "': " + (errnum == Z_BUF_ERROR ? "truncated gzip data" : message);
  } catch (const std::exception& e) {
    error = e.what();
  }
  return false;
}

std::string report_to_json(const Report& report, int indent) {
  try {
    return to_j(report).dump(indent, ' ', false, json::error_handler_t::replace);
  } catch (const std::exception& e) {
    return std::string("{\"error\": \"cannot serialise the report\"}");
  }
}

bool report_from_json(const std::string& text, Report& out, std::string& error) {
  try {
    json j = json::parse(text);
    out = report_from(j);
    return true;
  } catch (const json::parse_error& e) {
    error = std::string("not valid JSON: ") + e.what();
  } catch (const std::exception& e) {
    error = e.what();
  }
  return false;
}

bool load_report(const std::string& path, Report& out, std::string& error) {
  try {
    std::string text;
    if (!read_file_maybe_gzip(path, text, error)) return false;
    if (text.empty()) {
      error = "'" + path + "' is empty";
      return false;
    }
    if (!report_from_json(text, out, error)) {
      error = "'" + path + "': " + error;
      return false;
    }
    return true;
  } catch (const std::exception& e) {
    error = e.what();
    return false;
  }
}

bool write_report_file(const Report& report, const std::string& path, std::string& error) {
  try {
    const std::string text = report_to_json(report) + "\n";
    // A path that exists and is not a regular file (/dev/null, /dev/stdout, a
    // FIFO) is written in place: renaming over it would replace the device.
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
      std::FILE* f = std::fopen(path.c_str(), "wb");
      if (f == nullptr) {
        error = std::strerror(errno);
        return false;
      }
      const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
      const int write_errno = errno;
      if (std::fclose(f) != 0 || !ok) {
        error = std::strerror(write_errno);
        return false;
      }
      return true;
    }
    // Write beside the target, then rename: readers never see half a report.
    const std::string tmp = path + ".tmp." + std::to_string(static_cast<long>(getpid()));
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    if (f == nullptr) {
      error = std::strerror(errno);
      return false;
    }
    const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    const bool flushed = std::fflush(f) == 0 && fsync(fileno(f)) == 0;
    const int write_errno = errno;
    std::fclose(f);
    if (!written || !flushed) {
      error = std::strerror(write_errno);
      std::remove(tmp.c_str());
      return false;
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      error = std::strerror(errno);
      std::remove(tmp.c_str());
      return false;
    }
    return true;
  } catch (const std::exception& e) {
    error = e.what();
    return false;
  }
}

}  // namespace stepscope

// The JSON report: serialisation of stepscope::Report (docs/report-schema.md).
#include <stepscope/analysis.hpp>
#include <stepscope/report.hpp>

#include "core/atomic_file.hpp"
#include "report/json_guard.hpp"
#include "text/printable.hpp"

#include <zlib.h>
#include <nlohmann/json.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

namespace stepscope {
inline namespace v1 {

using nlohmann::json;

const char* to_string(PhaseKind kind) noexcept {
  return phase_kind_name(kind);
}

const char* to_string(ThreadRole role) noexcept {
  switch (role) {
    case ThreadRole::step:
      return "step";
    case ThreadRole::outside_step:
      return "outside_step";
    case ThreadRole::background:
      return "background";
  }
  return "background";
}

bool parse_phase_kind(const std::string& text, PhaseKind& out) noexcept {
  for (PhaseKind k : kPhaseKinds)
    if (text == phase_kind_name(k)) return out = k, true;
  return false;
}

bool parse_thread_role(const std::string& text, ThreadRole& out) noexcept {
  for (ThreadRole r : {ThreadRole::step, ThreadRole::outside_step, ThreadRole::background})
    if (text == to_string(r)) return out = r, true;
  return false;
}

namespace {

// JSON has no NaN/Inf: write them as null and read null back as 0.
json num(double v) {
  return std::isfinite(v) ? json(v) : json(nullptr);
}

// ---- reading: every value is checked and every error names its field --------
//
// A report file is input like any other: hand-edited, truncated by a full
// disk, produced by another tool. Each value is checked for its type and range
// before it is converted (a double cast to an integer type it does not fit is
// undefined behaviour), so a bad file is refused with "steps.count: -5 is not a
// count" instead of read as zeros. Fields this stepscope does not know are
// ignored (docs/report-schema.md: readers must ignore them).

// Largest magnitude accepted for a real number: 1e15 ms is 31,700 years.
// Nothing measured comes near it, and the analysis may square values or turn
// ms into ns (x 1e6) without overflowing.
constexpr double kMaxMagnitude = 1e15;
// Largest rank / world size accepted: the merge walks 0..world_size.
constexpr int kMaxRanks = 1 << 20;

// A value of the report being read and where it is ("steps.wall_ms").
struct Field {
  const json& j;
  std::string path;
  operator const json&() const { return j; }  // NOLINT: read like the json it is
  std::string child(const std::string& key) const { return path.empty() ? key : path + "." + key; }
  // The member `key`, or nullptr when absent or null ("not measured"). A
  // value that should have members and is not an object (`phases: [null]`)
  // is an error, not a record of zeros.
  const json* find(const char* key) const;
};

[[noreturn]] void bad_field(const std::string& path, const std::string& why);
std::string shown(const json& v);

const json* Field::find(const char* key) const {
  if (!j.is_object()) bad_field(path.empty() ? "the report" : path, shown(j) + " is not an object");
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

[[noreturn]] void bad_field(const std::string& path, const std::string& why) {
  throw std::runtime_error(path + ": " + why);
}

// A value as an error message shows it: short and printable.
std::string shown(const json& v) {
  if (v.is_string()) return "\"" + detail::printable(v.get_ref<const std::string&>(), 40) + "\"";
  if (v.is_object()) return "an object";
  if (v.is_array()) return "an array";
  return v.dump();
}

double real_of(const json& v, const std::string& path) {
  if (!v.is_number()) bad_field(path, shown(v) + " is not a number");
  const double d = v.get<double>();
  if (!(std::fabs(d) <= kMaxMagnitude)) bad_field(path, shown(v) + " is out of range (more than 1e15 in magnitude)");
  return d;
}

// A non-negative integer of at most `max`.
std::uint64_t count_of(const json& v, const std::string& path, std::uint64_t max = UINT64_MAX) {
  if (v.is_number_unsigned()) {
    const auto n = v.get<std::uint64_t>();
    if (n > max) bad_field(path, shown(v) + " is out of range (at most " + std::to_string(max) + ")");
    return n;
  }
  if (v.is_number_integer()) bad_field(path, shown(v) + " is not a count");  // signed in JSON: negative
  if (!v.is_number()) bad_field(path, shown(v) + " is not a count");
  const double d = v.get<double>();
  if (!(d >= 0) || d != std::floor(d)) bad_field(path, shown(v) + " is not a count");
  // 2^64 is the first double that does not fit.
  if (d >= 18446744073709551616.0 || d > static_cast<double>(max))
    bad_field(path, shown(v) + " is out of range (at most " + std::to_string(max) + ")");
  return static_cast<std::uint64_t>(d);
}

// An integer in [lo, hi].
std::int64_t integer_of(const json& v, const std::string& path, std::int64_t lo, std::int64_t hi) {
  if (!v.is_number()) bad_field(path, shown(v) + " is not an integer");
  const double d = v.get<double>();
  if (d != std::floor(d) || !std::isfinite(d)) bad_field(path, shown(v) + " is not an integer");
  if (d < static_cast<double>(lo) || d > static_cast<double>(hi))
    bad_field(path, shown(v) + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v.is_number_float() ? static_cast<std::int64_t>(d) : v.get<std::int64_t>();
}

double get_num(const Field& f, const char* key, double fallback = 0) {
  const json* v = f.find(key);
  return v == nullptr ? fallback : real_of(*v, f.child(key));
}
std::uint64_t get_u64(const Field& f, const char* key, std::uint64_t max = UINT64_MAX) {
  const json* v = f.find(key);
  return v == nullptr ? 0 : count_of(*v, f.child(key), max);
}
std::uint32_t get_u32(const Field& f, const char* key) {
  return static_cast<std::uint32_t>(get_u64(f, key, UINT32_MAX));
}
int get_int(const Field& f, const char* key, int fallback, int lo, int hi) {
  const json* v = f.find(key);
  return v == nullptr ? fallback : static_cast<int>(integer_of(*v, f.child(key), lo, hi));
}
int get_rank(const Field& f, const char* key) {
  return get_int(f, key, -1, -1, kMaxRanks - 1);
}
bool get_bool(const Field& f, const char* key, bool fallback = false) {
  const json* v = f.find(key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) bad_field(f.child(key), shown(*v) + " is not true or false");
  return v->get<bool>();
}
std::string get_str(const Field& f, const char* key, const std::string& fallback = "") {
  const json* v = f.find(key);
  if (v == nullptr) return fallback;
  if (!v->is_string()) bad_field(f.child(key), shown(*v) + " is not a string");
  return v->get<std::string>();
}
Field get_obj(const Field& f, const char* key) {
  static const json empty = json::object();
  const json* v = f.find(key);
  if (v == nullptr) return Field{empty, f.child(key)};
  if (!v->is_object()) bad_field(f.child(key), shown(*v) + " is not an object");
  return Field{*v, f.child(key)};
}
// A field every report has: absent is an error, not a default.
Field required_obj(const Field& f, const char* key) {
  if (f.find(key) == nullptr) bad_field(f.child(key), "missing (every report has it)");
  return get_obj(f, key);
}
// The elements of an array field, each with its path ("phases[3]").
std::vector<Field> get_arr(const Field& f, const char* key) {
  std::vector<Field> out;
  const json* v = f.find(key);
  if (v == nullptr) return out;
  if (!v->is_array()) bad_field(f.child(key), shown(*v) + " is not an array");
  out.reserve(v->size());
  for (std::size_t i = 0; i < v->size(); ++i)
    out.push_back(Field{(*v)[i], f.child(key) + "[" + std::to_string(i) + "]"});
  return out;
}
// The members of an object field, each with its path.
std::vector<std::pair<std::string, Field>> get_members(const Field& f, const char* key) {
  std::vector<std::pair<std::string, Field>> out;
  const Field object = get_obj(f, key);
  for (const auto& [k, v] : object.j.items()) out.emplace_back(k, Field{v, object.child(k)});
  return out;
}
// A map of numbers (findings[i].values); null (not finite) is skipped.
std::map<std::string, double> get_numbers(const Field& f, const char* key) {
  std::map<std::string, double> out;
  for (const auto& [k, v] : get_members(f, key))
    if (!v.j.is_null()) out[k] = real_of(v, v.path);
  return out;
}

// device.facts: the keys for_each_device_fact() names; null (not finite) and
// keys this stepscope does not know are skipped.
DeviceFactsSection device_facts_from(const Field& facts) {
  DeviceFactsSection out;
  for_each_device_fact(
      [&facts](const char* key, std::optional<double>& value) {
        const json* v = facts.find(key);
        if (v != nullptr) value = real_of(*v, facts.child(key));
      },
      out);
  return out;
}

// device.hta: HTA's tables for an imported trace (docs/report-schema.md).
json hta_to_j(const HtaTables& h) {
  const auto& t = h.temporal_breakdown;
  json temporal{{"idle_us", num(t.idle_us)},
                {"compute_us", num(t.compute_us)},
                {"non_compute_us", num(t.non_compute_us)},
                {"kernel_time_us", num(t.kernel_time_us)},
                {"idle_pctg", num(t.idle_pctg)},
                {"compute_pctg", num(t.compute_pctg)},
                {"non_compute_pctg", num(t.non_compute_pctg)}};
  json kernel_types = json::array();
  for (const auto& k : h.kernel_type_breakdown)
    kernel_types.push_back(
        json{{"kernel_type", k.kernel_type}, {"sum_us", num(k.sum_us)}, {"percentage", num(k.percentage)}});
  json idle = json::array();
  for (const auto& i : h.idle_time_breakdown)
    idle.push_back(json{{"stream", i.stream},
                        {"idle_category", i.idle_category},
                        {"idle_time_us", num(i.idle_time_us)},
                        {"idle_time_ratio", num(i.idle_time_ratio)}});
  const auto& l = h.launch_stats;
  json launch{{"pairs", l.pairs},
              {"short_kernels", l.short_kernels},
              {"runtime_outliers", l.runtime_outliers},
              {"launch_delay_outliers", l.launch_delay_outliers},
              {"thresholds", json{{"runtime_cutoff_us", num(l.runtime_cutoff_us)},
                                  {"launch_delay_cutoff_us", num(l.launch_delay_cutoff_us)}}}};
  return json{{"rank", h.rank},
              {"temporal_breakdown", temporal},
              {"kernel_type_breakdown", kernel_types},
              {"comp_comm_overlap_pctg", h.comp_comm_overlap_pctg ? num(*h.comp_comm_overlap_pctg) : json(nullptr)},
              {"idle_time_breakdown", idle},
              {"launch_stats", launch},
              {"steps_kept", h.steps_kept}};
}
HtaTables hta_from(const Field& j) {
  HtaTables h;
  h.present = true;
  h.rank = get_rank(j, "rank");
  const Field t = get_obj(j, "temporal_breakdown");
  auto& tb = h.temporal_breakdown;
  tb.idle_us = get_num(t, "idle_us");
  tb.compute_us = get_num(t, "compute_us");
  tb.non_compute_us = get_num(t, "non_compute_us");
  tb.kernel_time_us = get_num(t, "kernel_time_us");
  tb.idle_pctg = get_num(t, "idle_pctg");
  tb.compute_pctg = get_num(t, "compute_pctg");
  tb.non_compute_pctg = get_num(t, "non_compute_pctg");
  for (const Field& k : get_arr(j, "kernel_type_breakdown"))
    h.kernel_type_breakdown.push_back({get_str(k, "kernel_type"), get_num(k, "sum_us"), get_num(k, "percentage")});
  if (j.find("comp_comm_overlap_pctg") != nullptr) h.comp_comm_overlap_pctg = get_num(j, "comp_comm_overlap_pctg");
  for (const Field& i : get_arr(j, "idle_time_breakdown"))
    h.idle_time_breakdown.push_back({static_cast<std::int64_t>(get_int(i, "stream", -1, -1, INT32_MAX)),
                                     get_str(i, "idle_category"), get_num(i, "idle_time_us"),
                                     get_num(i, "idle_time_ratio")});
  const Field l = get_obj(j, "launch_stats");
  h.launch_stats.pairs = static_cast<std::int64_t>(get_u64(l, "pairs", INT64_MAX));
  h.launch_stats.short_kernels = static_cast<std::int64_t>(get_u64(l, "short_kernels", INT64_MAX));
  h.launch_stats.runtime_outliers = static_cast<std::int64_t>(get_u64(l, "runtime_outliers", INT64_MAX));
  h.launch_stats.launch_delay_outliers = static_cast<std::int64_t>(get_u64(l, "launch_delay_outliers", INT64_MAX));
  const Field cut = get_obj(l, "thresholds");
  h.launch_stats.runtime_cutoff_us = get_num(cut, "runtime_cutoff_us", 50);
  h.launch_stats.launch_delay_cutoff_us = get_num(cut, "launch_delay_cutoff_us", 100);
  for (const Field& s : get_arr(j, "steps_kept"))
    h.steps_kept.push_back(static_cast<std::int64_t>(count_of(s, s.path, INT64_MAX)));
  return h;
}

json to_j(const Distribution& d) {
  return json{{"count", d.count},        {"total", num(d.total)}, {"mean", num(d.mean)},
              {"stddev", num(d.stddev)}, {"min", num(d.min)},     {"max", num(d.max)},
              {"p50", num(d.p50)},       {"p90", num(d.p90)},     {"p99", num(d.p99)}};
}
Distribution dist_from(const Field& j) {
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
HistogramData hist_from(const Field& j) {
  HistogramData h;
  // The bucket layout shifts by it (html.cpp, merge.cpp): keep it a valid shift.
  h.sub_bucket_bits = get_int(j, "sub_bucket_bits", 0, 0, 20);
  for (const Field& b : get_arr(j, "buckets")) {
    if (!b.j.is_array() || b.j.size() != 2) bad_field(b.path, shown(b) + " is not a pair [bucket index, count]");
    h.buckets.emplace_back(static_cast<std::uint32_t>(count_of(b.j[0], b.path + "[0]", UINT32_MAX)),
                           count_of(b.j[1], b.path + "[1]"));
  }
  return h;
}

// A kind's part of a breakdown or series: "input_ms", "compute_ms", ...
std::string kind_key(PhaseKind kind) {
  return std::string(phase_kind_name(kind)) + "_ms";
}

// Writes every kind's part of `parts` (values written by `to`) into object `j`.
template <class T, class To>
json with_kinds(json j, const PerKind<T>& parts, To to) {
  for (PhaseKind k : kPhaseKinds) j[kind_key(k)] = to(parts[k]);
  return j;
}
// Reads every kind's part (read by `from(j, key)`).
template <class T, class From>
PerKind<T> kinds_from(const Field& j, From from) {
  PerKind<T> parts;
  for (PhaseKind k : kPhaseKinds) parts[k] = from(j, kind_key(k).c_str());
  return parts;
}
double num_from(const Field& j, const char* key) {
  return get_num(j, key);
}

json to_j(const StepBreakdown& b) {
  return with_kinds(json{{"wall_ms", num(b.wall_ms)},
                         {"unattributed_ms", num(b.unattributed_ms)},
                         {"cpu_wait_ms", num(b.cpu_wait_ms)},
                         {"page_fault_ms", num(b.page_fault_ms)},
                         {"between_steps_input_ms", num(b.between_steps_input_ms)},
                         {"between_steps_ms", num(b.between_steps_ms)}},
                    b.kind_ms, num);
}
StepBreakdown breakdown_from(const Field& j) {
  StepBreakdown b;
  b.wall_ms = get_num(j, "wall_ms");
  b.kind_ms = kinds_from<double>(j, num_from);
  b.unattributed_ms = get_num(j, "unattributed_ms");
  b.cpu_wait_ms = get_num(j, "cpu_wait_ms");
  b.page_fault_ms = get_num(j, "page_fault_ms");
  b.between_steps_input_ms = get_num(j, "between_steps_input_ms");
  b.between_steps_ms = get_num(j, "between_steps_ms");
  return b;
}

json to_j(const SlowStep& x) {
  return with_kinds(json{{"step", x.step},
                         {"wall_ms", num(x.wall_ms)},
                         {"unattributed_ms", num(x.unattributed_ms)},
                         {"between_steps_ms", num(x.between_steps_ms)}},
                    x.kind_ms, num);
}
SlowStep slow_step_from(const Field& j) {
  SlowStep x;
  x.step = get_u64(j, "step");
  x.wall_ms = get_num(j, "wall_ms");
  x.kind_ms = kinds_from<double>(j, num_from);
  x.unattributed_ms = get_num(j, "unattributed_ms");
  x.between_steps_ms = get_num(j, "between_steps_ms");
  return x;
}

json nums(const std::vector<double>& v) {
  json a = json::array();
  for (double x : v) a.push_back(num(x));
  return a;
}
std::vector<double> nums_from(const Field& j, const char* key) {
  std::vector<double> v;
  for (const Field& x : get_arr(j, key)) v.push_back(x.j.is_null() ? 0.0 : real_of(x, x.path));
  return v;
}

json to_j(const StepSeries& s) {
  return with_kinds(json{{"stride", s.stride},
                         {"first_step", s.first_step},
                         {"wall_ms", nums(s.wall_ms)},
                         {"unattributed_ms", nums(s.unattributed_ms)},
                         {"between_steps_ms", nums(s.between_steps_ms)},
                         {"rss_mb", nums(s.rss_mb)}},
                    s.kind_ms, nums);
}
StepSeries series_from(const Field& j) {
  StepSeries s;
  s.stride = get_u32(j, "stride");
  if (s.stride == 0) s.stride = 1;
  for (const Field& x : get_arr(j, "first_step")) s.first_step.push_back(count_of(x, x.path));
  s.wall_ms = nums_from(j, "wall_ms");
  s.kind_ms = kinds_from<std::vector<double>>(j, nums_from);
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
              {"collector_cpu_ms", num(s.collector_cpu_ms)},
              {"load_average_start", fraction(s.load_average_start)},
              {"load_average_end", fraction(s.load_average_end)},
              {"cores_online", s.cores_online},
              {"other_processes_cpu_s", fraction(s.other_processes_cpu_s)},
              {"window_steps", num(s.window_steps)},
              {"run_wall_s", num(s.run_wall_s)},
              {"before_steps_wall_s", num(s.before_steps_wall_s)},
              {"before_steps_cpu_system_s", num(s.before_steps_cpu_system_s)},
              {"before_steps_minor_faults", s.before_steps_minor_faults},
              {"page_fault_us", fraction(s.page_fault_us)}};
}
SystemSignals system_from(const Field& j) {
  SystemSignals s;
  s.available = get_bool(j, "available");
  s.wall_s = get_num(j, "wall_s");
  s.cpu_user_s = get_num(j, "cpu_user_s");
  s.cpu_system_s = get_num(j, "cpu_system_s");
  s.cores_available = get_int(j, "cores_available", 0, 0, 1 << 24);
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
  s.load_average_start = get_num(j, "load_average_start", -1);
  s.load_average_end = get_num(j, "load_average_end", -1);
  s.cores_online = get_int(j, "cores_online", 0, 0, 1 << 20);
  s.other_processes_cpu_s = get_num(j, "other_processes_cpu_s", -1);
  s.window_steps = get_num(j, "window_steps");
  s.run_wall_s = get_num(j, "run_wall_s");
  s.before_steps_wall_s = get_num(j, "before_steps_wall_s");
  s.before_steps_cpu_system_s = get_num(j, "before_steps_cpu_system_s");
  s.before_steps_minor_faults = get_u64(j, "before_steps_minor_faults");
  s.page_fault_us = get_num(j, "page_fault_us", -1);
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
                            {"crossed", e.crossed},
                            {"sentence", e.sentence}});
  json ranking = json::array();
  for (const auto& [category, cost] : v.ranking)
    ranking.push_back(json{{"category", category}, {"share_of_step", num(cost)}});
  return json{{"category", v.category}, {"confidence", num(v.confidence)},
              {"severity", v.severity}, {"summary", v.summary},
              {"evidence", evidence},   {"recommendations", v.recommendations},
              {"ranking", ranking}};
}
Verdict verdict_from(const Field& j) {
  Verdict v;
  v.category = get_str(j, "category", "unknown");
  v.confidence = get_num(j, "confidence");
  v.severity = get_str(j, "severity");
  v.summary = get_str(j, "summary");
  for (const Field& e : get_arr(j, "evidence")) {
    Evidence ev;
    ev.signal = get_str(e, "signal");
    ev.value = get_num(e, "value");
    ev.threshold = get_num(e, "threshold");
    ev.comparison = get_str(e, "comparison");
    ev.supports = get_bool(e, "supports");
    ev.crossed = get_bool(e, "crossed", ev.supports);
    ev.sentence = get_str(e, "sentence");
    v.evidence.push_back(std::move(ev));
  }
  for (const Field& r : get_arr(j, "recommendations")) {
    if (!r.j.is_string()) bad_field(r.path, shown(r) + " is not a string");
    v.recommendations.push_back(r.j.get<std::string>());
  }
  for (const Field& r : get_arr(j, "ranking"))
    v.ranking.emplace_back(get_str(r, "category"), get_num(r, "share_of_step"));
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
  if (p.host_share_of_step) j["host_share_of_step"] = num(*p.host_share_of_step);
  if (!p.sites.empty()) {
    json sites = json::array();
    for (const PhaseCallSite& site : p.sites)
      sites.push_back(json{{"file", site.file}, {"line", site.line}, {"host_ms", to_j(site.host_ms)}});
    j["sites"] = std::move(sites);
    j["sites_merged"] = p.sites_merged;
  }
  if (!p.top_operators.empty()) {
    json ops = json::array();
    for (const OperatorTime& op : p.top_operators)
      ops.push_back(json{{"name", op.name}, {"kind", op.kind}, {"count", op.count}, {"self_ms", num(op.self_ms)}});
    j["top_operators"] = std::move(ops);
  }
  return j;
}
PhaseSummary phase_from(const Field& j) {
  PhaseSummary p;
  if (j.find("name") == nullptr) bad_field(j.child("name"), "missing (every phase has a name)");
  p.name = get_str(j, "name");
  const std::string kind = get_str(j, "kind", "other"), role = get_str(j, "thread_role", "step");
  if (!parse_phase_kind(kind, p.kind)) bad_field(j.child("kind"), shown(json(kind)) + " is not a phase kind");
  if (!parse_thread_role(role, p.thread_role))
    bad_field(j.child("thread_role"), shown(json(role)) + " is not a thread role");
  p.count = get_u64(j, "count");
  p.host_ms = dist_from(get_obj(j, "host_ms"));
  p.self_ms = dist_from(get_obj(j, "self_ms"));
  p.share_of_step = get_num(j, "share_of_step");
  p.threads = get_u32(j, "threads");
  p.histogram = hist_from(get_obj(j, "histogram"));
  if (j.find("overlap_with_steps") != nullptr) p.overlap_with_steps = get_num(j, "overlap_with_steps");
  if (j.find("device_ms") != nullptr) p.device_ms = dist_from(get_obj(j, "device_ms"));
  if (j.find("host_share_of_step") != nullptr) p.host_share_of_step = get_num(j, "host_share_of_step");
  for (const Field& x : get_arr(j, "sites")) {
    PhaseCallSite site;
    site.file = get_str(x, "file");
    site.line = get_int(x, "line", 0, 0, INT32_MAX);
    site.host_ms = dist_from(get_obj(x, "host_ms"));
    p.sites.push_back(std::move(site));
  }
  p.sites_merged = get_u64(j, "sites_merged");
  for (const Field& x : get_arr(j, "top_operators")) {
    OperatorTime op;
    op.name = get_str(x, "name");
    op.kind = get_str(x, "kind");
    op.count = get_u64(x, "count");
    op.self_ms = get_num(x, "self_ms");
    p.top_operators.push_back(std::move(op));
  }
  return p;
}

json to_j(const AcrossRanks& a) {
  return json{{"min", num(a.min)},
              {"median", num(a.median)},
              {"max", num(a.max)},
              {"mean", num(a.mean)},
              {"min_rank", a.min_rank},
              {"max_rank", a.max_rank},
              {"imbalance", num(a.imbalance)}};
}
AcrossRanks across_from(const Field& j) {
  AcrossRanks a;
  a.min = get_num(j, "min");
  a.median = get_num(j, "median");
  a.max = get_num(j, "max");
  a.mean = get_num(j, "mean");
  a.min_rank = get_rank(j, "min_rank");
  a.max_rank = get_rank(j, "max_rank");
  a.imbalance = get_num(j, "imbalance");
  return a;
}

// The multi-rank section of a merged report (absent from single-rank reports).
json to_j(const MultiRank& m) {
  json ranks = json::array();
  for (const auto& r : m.ranks)
    ranks.push_back(with_kinds(json{{"rank", r.rank},
                                    {"host", r.host},
                                    {"steps", r.steps},
                                    {"step_ms", num(r.step_ms)},
                                    {"busy_ms", num(r.busy_ms)},
                                    {"unattributed_ms", num(r.unattributed_ms)},
                                    {"comm_wait_ms", num(r.comm_wait_ms)},
                                    {"verdict", r.verdict},
                                    {"straggler", r.straggler},
                                    {"waits_for", r.waits_for},
                                    {"complete", r.complete},
                                    {"ended_by", r.ended_by.empty() ? json(nullptr) : json(r.ended_by)},
                                    {"interrupted", r.interrupted.empty() ? json(nullptr) : json(r.interrupted)},
                                    {"exception", r.exception.empty() ? json(nullptr) : json(r.exception)}},
                               r.kind_ms, num));
  json phases = json::array();
  for (const auto& p : m.phases)
    phases.push_back(
        json{{"name", p.name}, {"kind", to_string(p.kind)}, {"ranks", p.ranks}, {"per_step_ms", to_j(p.per_step_ms)}});
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
                              {"slow_steps", s.slow_steps},
                              {"cause", s.cause}});
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
MultiRank multirank_from(const Field& j) {
  MultiRank m;
  m.world_size = get_int(j, "world_size", 0, 0, kMaxRanks);
  m.ranks_merged = get_int(j, "ranks_merged", 0, 0, kMaxRanks);
  for (const Field& r : get_arr(j, "missing_ranks"))
    m.missing_ranks.push_back(static_cast<int>(integer_of(r, r.path, 0, kMaxRanks - 1)));
  m.step_ms = across_from(get_obj(j, "step_ms"));
  m.busy_ms = across_from(get_obj(j, "busy_ms"));
  m.compute_ms = across_from(get_obj(j, "compute_ms"));
  m.communication_ms = across_from(get_obj(j, "communication_ms"));
  m.comm_ms = get_num(j, "comm_ms");
  m.comm_collective_ms = get_num(j, "comm_collective_ms");
  m.comm_wait_ms = get_num(j, "comm_wait_ms");
  m.comm_wait_fraction = get_num(j, "comm_wait_fraction");
  m.expected_wait_from_imbalance_ms = get_num(j, "expected_wait_from_imbalance_ms");
  for (const Field& x : get_arr(j, "stragglers")) {
    Straggler s;
    s.rank = get_rank(x, "rank");
    s.phase = get_str(x, "phase");
    s.rank_ms = get_num(x, "rank_ms");
    s.median_ms = get_num(x, "median_ms");
    s.excess_ms = get_num(x, "excess_ms");
    s.robust_z = get_num(x, "robust_z");
    s.slow_step_fraction = get_num(x, "slow_step_fraction");
    s.pattern = get_str(x, "pattern");
    for (const Field& v : get_arr(x, "slow_steps")) s.slow_steps.push_back(count_of(v, v.path));
    s.cause = get_str(x, "cause");  // absent in merged reports written before it
    m.stragglers.push_back(std::move(s));
  }
  m.method = get_str(j, "method");
  for (const Field& x : get_arr(j, "ranks")) {
    RankSummary r;
    r.rank = get_rank(x, "rank");
    r.host = get_str(x, "host");
    r.steps = get_u64(x, "steps");
    r.step_ms = get_num(x, "step_ms");
    r.busy_ms = get_num(x, "busy_ms");
    r.kind_ms = kinds_from<double>(x, num_from);
    r.unattributed_ms = get_num(x, "unattributed_ms");
    r.comm_wait_ms = get_num(x, "comm_wait_ms");
    r.verdict = get_str(x, "verdict");
    r.straggler = get_bool(x, "straggler");
    for (const Field& v : get_arr(x, "waits_for"))  // absent in merged reports written before it
      r.waits_for.push_back(static_cast<int>(integer_of(v, v.path, 0, kMaxRanks - 1)));
    r.complete = get_bool(x, "complete", true);  // absent in merged reports written before it
    r.ended_by = get_str(x, "ended_by");
    r.interrupted = get_str(x, "interrupted");
    r.exception = get_str(x, "exception");
    m.ranks.push_back(std::move(r));
  }
  for (const Field& x : get_arr(j, "phases")) {
    PhaseAcrossRanks p;
    p.name = get_str(x, "name");
    const std::string kind = get_str(x, "kind", "other");
    if (!parse_phase_kind(kind, p.kind)) bad_field(x.child("kind"), shown(json(kind)) + " is not a phase kind");
    p.ranks = get_u32(x, "ranks");
    p.per_step_ms = across_from(get_obj(x, "per_step_ms"));
    m.phases.push_back(std::move(p));
  }
  m.step_stride = get_u32(j, "step_stride");
  if (m.step_stride == 0) m.step_stride = 1;
  for (const Field& x : get_arr(j, "steps")) {
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
           {"clock", json{{"source", r.run.clock_source},
                          {"tsc_ghz", num(r.run.clock_tsc_ghz)},
                          {"error_ppm", num(r.run.clock_error_ppm)},
                          {"reason", r.run.clock_reason}}},
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
             {"unended_excluded", r.steps.unended_excluded},
             {"unended_wall_ms", num(r.steps.unended_wall_ms)},
             {"breakdown", to_j(r.steps.breakdown)},
             // Derived, for scripts: the accounting the verdict and the summary use.
             {"settled_breakdown", to_j(settled_breakdown(r))},
             {"series", to_j(r.steps.series)},
             {"histogram", to_j(r.steps.histogram)},
             {"coverage", r.steps.coverage ? num(*r.steps.coverage) : json(nullptr)},
             {"between_steps_ms", num(r.steps.between_steps_ms)},
             {"between_steps_input_ms", num(r.steps.between_steps_input_ms)},
             {"loop_boundaries", r.steps.loop_boundaries},
             {"between_loops_ms", num(r.steps.between_loops_ms)},
             {"loop_first_steps", r.steps.loop_first_steps},
             {"loop_first_ms", num(r.steps.loop_first_ms)},
             {"loop_first_max_ms", num(r.steps.loop_first_max_ms)},
             {"slowest", json::array()}};
  for (const SlowStep& x : r.steps.slowest) steps["slowest"].push_back(to_j(x));
  steps["clock"] = r.steps.clock;
  if (r.steps.host_wall_ms) steps["host_wall_ms"] = to_j(*r.steps.host_wall_ms);
  if (r.steps.host_breakdown) steps["host_breakdown"] = to_j(*r.steps.host_breakdown);
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
  for_each_device_fact(
      [&facts](const char* key, const std::optional<double>& value) {
        if (value) facts[key] = num(*value);
      },
      r.device.facts);
  device["facts"] = facts;
  if (r.device.hta.present) device["hta"] = hta_to_j(r.device.hta);
  if (!r.device.hta_ranks.empty()) {
    json per_rank = json::array();
    for (const HtaTables& h : r.device.hta_ranks) per_rank.push_back(hta_to_j(h));
    device["hta_ranks"] = std::move(per_rank);
  }
  // Live CUDA runs: each GPU's own figures (C14); absent otherwise.
  if (!r.device.devices.empty()) {
    device["facts_device"] = r.device.facts_device;
    json per_device = json::array();
    for (const DeviceUsage& u : r.device.devices)
      per_device.push_back(json{{"id", u.id},
                                {"name", u.name},
                                {"phases_timed", u.phases_timed},
                                {"steps_ran_on", u.steps_ran_on},
                                {"memory_capacity_mb", num(u.memory_capacity_mb)},
                                {"memory_peak_mb", num(u.memory_peak_mb)},
                                {"busy_fraction", num(u.busy_fraction)},
                                {"busy_ms", num(u.busy_ms)},
                                {"kernels", u.kernels},
                                {"memcpys", u.memcpys},
                                {"peer_memcpys", u.peer_memcpys},
                                {"peer_memcpy_mb", num(u.peer_memcpy_mb)},
                                {"memsets", u.memsets}});
    device["devices"] = std::move(per_device);
  }
  if (r.device.cupti_launches_unrecorded > 0) device["cupti_launches_unrecorded"] = r.device.cupti_launches_unrecorded;

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
  out["complete"] = r.complete;
  out["ended_by"] = r.ended_by.empty() ? json(nullptr) : json(r.ended_by);
  out["interrupted"] =
      r.interrupted ? json{{"signal", r.interrupted->signal}, {"after_s", r.interrupted->after_s}} : json(nullptr);
  out["exception"] =
      r.exception
          ? json{{"type", r.exception->type}, {"message", r.exception->message}, {"after_s", r.exception->after_s}}
          : json(nullptr);
  out["snapshot_time_utc"] = r.snapshot_time_utc.empty() ? json(nullptr) : json(r.snapshot_time_utc);
  out["runtime_sites"] = json{{"sites", r.runtime_sites.sites},
                              {"overflow", r.runtime_sites.overflow},
                              {"truncated", r.runtime_sites.truncated}};
  const Overhead& o = r.overhead;
  out["overhead"] = json{{"scope_ns", num(o.scope_ns)},
                         {"tsc_scope_ns", num(o.tsc_scope_ns)},
                         {"collector_core_fraction", num(o.collector_core_fraction)},
                         {"device_mode", o.device_mode},
                         {"window_steps", o.window_steps},
                         {"window_period", o.window_period},
                         {"instrumented_steps", o.instrumented_steps},
                         {"uninstrumented_steps", o.uninstrumented_steps},
                         {"instrumented_step_ms", num(o.instrumented_step_ms)},
                         {"uninstrumented_step_ms", num(o.uninstrumented_step_ms)},
                         {"measured", o.measured},
                         {"window_cost_pct", num(o.window_cost_pct)},
                         {"run_cost_pct", num(o.run_cost_pct)}};
  return out;
}

Report report_from(const json& document) {
  if (!document.is_object()) throw std::runtime_error("the top level is not a JSON object: not a stepscope report");
  const Field j{document, ""};
  if (j.find("schema_version") == nullptr) throw std::runtime_error("no 'schema_version': not a stepscope report");
  Report r;
  r.schema_version = get_int(j, "schema_version", 0, INT32_MIN, INT32_MAX);
  if (r.schema_version != kReportSchemaVersion)
    throw std::runtime_error("unsupported schema_version " + std::to_string(r.schema_version) +
                             " (this stepscope reads " + std::to_string(kReportSchemaVersion) + ")");
  const Field run = required_obj(j, "run");
  r.run.library_version = get_str(run, "library_version");
  r.run.time_utc = get_str(run, "time_utc");
  r.run.host = get_str(run, "host");
  if (const json* pid = run.find("pid"))
    r.run.pid = integer_of(*pid, run.child("pid"), -(std::int64_t{1} << 53), std::int64_t{1} << 53);
  r.run.rank = get_rank(run, "rank");
  r.run.world_size = get_int(run, "world_size", 1, 0, kMaxRanks);
  r.run.source = get_str(run, "source", "live");
  for (const auto& [k, v] : get_members(run, "build"))
    r.run.build[k] = v.j.is_string() ? v.j.get<std::string>() : v.j.dump();
  for (const auto& [k, v] : get_members(run, "config")) {
    if (v.j.is_string()) {
      r.run.config[k] = v.j.get<std::string>();
      r.run.config_types[k] = "string";
    } else if (v.j.is_number()) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.17g", v.j.get<double>());  // as set_config() stored it
      r.run.config[k] = buf;
      r.run.config_types[k] = "number";
    } else {
      r.run.config[k] = v.j.dump();  // depth-limited before parsing (report_from_json)
      r.run.config_types[k] = "string";
    }
  }
  const Field clock = get_obj(run, "clock");
  r.run.clock_source = get_str(clock, "source");
  r.run.clock_tsc_ghz = get_num(clock, "tsc_ghz");
  r.run.clock_error_ppm = get_num(clock, "error_ppm");
  r.run.clock_reason = get_str(clock, "reason");
  const Field warmup = get_obj(run, "warmup");
  r.run.warmup_steps = get_u64(warmup, "steps");
  r.run.warmup_source = get_str(warmup, "source");

  const Field steps = required_obj(j, "steps");
  if (steps.find("count") == nullptr) bad_field("steps.count", "missing (every report has it)");
  r.steps.count = get_u64(steps, "count");
  r.steps.warmup_excluded = get_u64(steps, "warmup_excluded");
  r.steps.wall_ms = dist_from(get_obj(steps, "wall_ms"));
  r.steps.warmup_wall_ms = dist_from(get_obj(steps, "warmup_wall_ms"));
  r.steps.unended_excluded = get_u64(steps, "unended_excluded");
  r.steps.unended_wall_ms = get_num(steps, "unended_wall_ms");
  r.steps.breakdown = breakdown_from(get_obj(steps, "breakdown"));
  r.steps.series = series_from(get_obj(steps, "series"));
  r.steps.histogram = hist_from(get_obj(steps, "histogram"));
  if (steps.find("coverage") != nullptr) r.steps.coverage = get_num(steps, "coverage");
  r.steps.between_steps_ms = get_num(steps, "between_steps_ms");
  r.steps.between_steps_input_ms = get_num(steps, "between_steps_input_ms");
  r.steps.loop_boundaries = get_u64(steps, "loop_boundaries");  // 0 in reports that predate it
  r.steps.between_loops_ms = get_num(steps, "between_loops_ms");
  r.steps.loop_first_steps = get_u64(steps, "loop_first_steps");  // 0 in reports that predate them
  r.steps.loop_first_ms = get_num(steps, "loop_first_ms");
  r.steps.loop_first_max_ms = get_num(steps, "loop_first_max_ms");
  r.steps.clock = get_str(steps, "clock", "host") == "device" ? "device" : "host";  // "host" in reports that predate it
  if (steps.find("host_wall_ms") != nullptr) r.steps.host_wall_ms = dist_from(get_obj(steps, "host_wall_ms"));
  if (steps.find("host_breakdown") != nullptr)
    r.steps.host_breakdown = breakdown_from(get_obj(steps, "host_breakdown"));
  for (const Field& x : get_arr(steps, "slowest")) {  // absent in reports that predate it
    if (r.steps.slowest.size() >= StepStats::kSlowestStepsKept) break;
    r.steps.slowest.push_back(slow_step_from(x));
  }
  if (j.find("phases") == nullptr) bad_field("phases", "missing (every report has it)");
  for (const Field& p : get_arr(j, "phases")) r.phases.push_back(phase_from(p));
  r.dropped_records = get_u64(j, "dropped_records");
  r.total_records = get_u64(j, "total_records");
  r.system = system_from(get_obj(j, "system"));
  const Field device = get_obj(j, "device");
  r.device.enabled = get_bool(device, "enabled");
  r.device.status = get_str(device, "status");
  r.device.reason = get_str(device, "reason");
  r.device.name = get_str(device, "name");
  r.device.memory_capacity_mb = get_num(device, "memory_capacity_mb");
  r.device.memory_peak_mb = get_num(device, "memory_peak_mb");
  r.device.facts = device_facts_from(get_obj(device, "facts"));
  if (device.find("hta") != nullptr) r.device.hta = hta_from(get_obj(device, "hta"));
  for (const Field& h : get_arr(device, "hta_ranks")) r.device.hta_ranks.push_back(hta_from(h));
  r.device.facts_device = get_int(device, "facts_device", -1, -1, INT32_MAX);
  r.device.cupti_launches_unrecorded = get_u64(device, "cupti_launches_unrecorded");
  for (const Field& d : get_arr(device, "devices")) {
    DeviceUsage u;
    u.id = get_int(d, "id", -1, -1, INT32_MAX);
    u.name = get_str(d, "name");
    u.phases_timed = get_bool(d, "phases_timed");
    u.steps_ran_on = get_bool(d, "steps_ran_on");
    u.memory_capacity_mb = get_num(d, "memory_capacity_mb");
    u.memory_peak_mb = get_num(d, "memory_peak_mb");
    u.busy_fraction = get_num(d, "busy_fraction", -1);
    u.busy_ms = get_num(d, "busy_ms");
    u.kernels = get_u64(d, "kernels");
    u.memcpys = get_u64(d, "memcpys");
    u.peer_memcpys = get_u64(d, "peer_memcpys");
    u.peer_memcpy_mb = get_num(d, "peer_memcpy_mb");
    u.memsets = get_u64(d, "memsets");
    r.device.devices.push_back(std::move(u));
  }
  r.bottleneck = verdict_from(required_obj(j, "bottleneck"));
  for (const Field& f : get_arr(j, "findings")) {
    Finding finding;
    finding.kind = get_str(f, "kind");
    finding.severity = get_str(f, "severity");
    finding.message = get_str(f, "message");
    finding.values = get_numbers(f, "values");
    r.findings.push_back(std::move(finding));
  }
  for (const Field& w : get_arr(j, "what_if")) {
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
  for (const Field& w : get_arr(j, "warnings")) {
    if (!w.j.is_string()) bad_field(w.path, shown(w) + " is not a string");
    r.warnings.push_back(w.j.get<std::string>());
  }
  if (j.find("ranks") != nullptr) r.ranks = multirank_from(get_obj(j, "ranks"));
  // Absent in reports written before the flight recorder: those were final.
  r.complete = get_bool(j, "complete", true);
  r.ended_by = get_str(j, "ended_by");
  if (const json* v = j.find("interrupted"); v != nullptr && !v->is_null()) {  // absent in older reports
    const Field interrupted = get_obj(j, "interrupted");
    r.interrupted = Report::Interruption{get_str(interrupted, "signal"), get_num(interrupted, "after_s")};
  }
  if (const json* v = j.find("exception"); v != nullptr && !v->is_null()) {  // absent in older reports
    const Field exception = get_obj(j, "exception");
    r.exception = Report::UncaughtException{get_str(exception, "type"), get_str(exception, "message"),
                                            get_num(exception, "after_s")};
  }
  r.snapshot_time_utc = get_str(j, "snapshot_time_utc");
  if (j.find("runtime_sites") != nullptr) {  // absent before run-time-named sites
    const Field sites = get_obj(j, "runtime_sites");
    r.runtime_sites.sites = get_u64(sites, "sites");
    r.runtime_sites.overflow = get_u64(sites, "overflow");
    r.runtime_sites.truncated = get_u64(sites, "truncated");
  }
  if (j.find("overhead") != nullptr) {  // absent before the run measured its own cost
    const Field o = get_obj(j, "overhead");
    Overhead& x = r.overhead;
    x.scope_ns = get_num(o, "scope_ns");
    x.tsc_scope_ns = get_num(o, "tsc_scope_ns");
    x.collector_core_fraction = get_num(o, "collector_core_fraction", -1);
    x.device_mode = get_str(o, "device_mode");
    x.window_steps = get_u64(o, "window_steps");
    x.window_period = get_u64(o, "window_period");
    x.instrumented_steps = get_u64(o, "instrumented_steps");
    x.uninstrumented_steps = get_u64(o, "uninstrumented_steps");
    x.instrumented_step_ms = get_num(o, "instrumented_step_ms");
    x.uninstrumented_step_ms = get_num(o, "uninstrumented_step_ms");
    x.measured = get_bool(o, "measured");
    x.window_cost_pct = get_num(o, "window_cost_pct");
    x.run_cost_pct = get_num(o, "run_cost_pct");
  }
  return r;
}

}  // namespace

std::string report_to_json(const Report& report, int indent) {
  try {
    return to_j(report).dump(indent, ' ', false, json::error_handler_t::replace);
  } catch (const std::exception& e) {
    return std::string("{\"error\": \"cannot serialise the report\"}");
  }
}

bool report_from_json(const std::string& text, Report& out, std::string& error) {
  try {
    if (const std::string deep = detail::depth_problem(text); !deep.empty()) {
      error = "not a stepscope report: the JSON " + deep;
      return false;
    }
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
    if (!detail::read_json_input(path, detail::JsonInput::report, text, error)) return false;
    if (text.empty()) {
      error = "'" + detail::printable(path) + "' is empty";
      return false;
    }
    if (!report_from_json(text, out, error)) {
      error = "'" + detail::printable(path) + "': " + error;
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
    // The one atomic writer: through symlinks, devices and FIFOs in place,
    // temporary file + fsync + rename for regular files.
    return detail::write_file_atomically(path, report_to_json(report) + "\n", error);
  } catch (const std::exception& e) {
    error = e.what();
    return false;
  }
}

}  // namespace v1
}  // namespace stepscope

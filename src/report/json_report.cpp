// The JSON report: serialisation of stepscope::Report (docs/report-schema.md).
#include <stepscope/report.hpp>

#include "core/atomic_file.hpp"
#include "report/json_guard.hpp"
#include "text/printable.hpp"

#include <zlib.h>
#include <nlohmann/json.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <type_traits>
#include <vector>

namespace stepscope {
inline namespace v1 {

using nlohmann::json;

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

// A kind's part of a breakdown or series: "input_ms", "compute_ms", ...
std::string kind_key(PhaseKind kind) {
  return std::string(phase_kind_name(kind)) + "_ms";
}

// ---- One list of fields per struct --------------------------------------------
//
// fields(v, x) names each member of x once, with its JSON key and, where it
// has one, its range. The Writer visits it to build the JSON; the Reader to
// fill a default-constructed x, checking every value (an absent or null key
// keeps the member's default). Both visitors answer the same calls:
//   v(key, x)                    a number, count, string, flag, struct, vector or optional
//   v.integer(key, x, lo, hi)    an integer in [lo, hi];  v.rank(key, x): a rank or -1
//   v.fraction(key, x)           negative ("not measured") is written as null
//   v.nullable(key, text)        "" is written as null
//   v.group(key, fn)             a nested object that is not a struct of its own
//   v.keep(written)              false: the writer leaves the keys out (the reader reads them)
template <class T>
struct IsVector : std::false_type {};
template <class T>
struct IsVector<std::vector<T>> : std::true_type {};
template <class T>
struct IsOptional : std::false_type {};
template <class T>
struct IsOptional<std::optional<T>> : std::true_type {};

class Writer {
 public:
  static constexpr bool reading = false;
  json j = json::object();

  template <class T>
  static json value(const T& x) {
    if constexpr (std::is_same_v<T, double>) {
      return num(x);
    } else if constexpr (std::is_arithmetic_v<T> || std::is_same_v<T, std::string>) {
      return x;
    } else if constexpr (IsVector<T>::value) {
      json a = json::array();
      for (const auto& e : x) a.push_back(value(e));
      return a;
    } else if constexpr (IsOptional<T>::value) {
      return x ? value(*x) : json(nullptr);
    } else {
      Writer w;
      fields(w, const_cast<T&>(x));  // fields() serves both directions; the writer only reads
      return std::move(w.j);
    }
  }
  template <class T>
  void operator()(const char* key, const T& x) {
    j[key] = value(x);
  }
  template <class T>
  void integer(const char* key, const T& x, std::int64_t, std::int64_t) {
    j[key] = x;
  }
  void rank(const char* key, const int& x, bool null_if_none = false) {
    j[key] = null_if_none && x < 0 ? json(nullptr) : json(x);
  }
  void ranks(const char* key, const std::vector<int>& x) { j[key] = x; }
  void fraction(const char* key, const double& x) { j[key] = x < 0 ? json(nullptr) : num(x); }
  void nullable(const char* key, const std::string& x) { j[key] = x.empty() ? json(nullptr) : json(x); }
  template <class Fn>
  void group(const char* key, Fn&& fn) {
    Writer w;
    fn(w);
    j[key] = std::move(w.j);
  }
  bool keep(bool written) const { return written; }
  void require(const char*, const char* = nullptr) const {}
  void kind(const char* key, const PhaseKind& x) { j[key] = to_string(x); }
  void role(const char* key, const ThreadRole& x) { j[key] = to_string(x); }
  void pairs(const char* key, const std::vector<std::pair<std::string, double>>& x, const char* first,
             const char* second) {
    json a = json::array();
    for (const auto& [name, number] : x) a.push_back(json{{first, name}, {second, num(number)}});
    j[key] = std::move(a);
  }
  void buckets(const char* key, const std::vector<std::pair<std::uint32_t, std::uint64_t>>& x) {
    json a = json::array();
    for (const auto& [index, count] : x) a.push_back(json::array({index, count}));
    j[key] = std::move(a);
  }
  void numbers(const char* key, const std::map<std::string, double>& x) {
    json o = json::object();
    for (const auto& [name, number] : x) o[name] = num(number);
    j[key] = std::move(o);
  }
  void strings(const char* key, const std::map<std::string, std::string>& x) { j[key] = x; }
  // run.config: a value set_config() stored as a number is written as one.
  void config(const char* key, const std::map<std::string, std::string>& values,
              const std::map<std::string, std::string>& types) {
    json o = json::object();
    for (const auto& [name, text] : values) {
      const auto type = types.find(name);
      char* end = nullptr;
      const double d = std::strtod(text.c_str(), &end);
      const bool number = type != types.end() && type->second == "number" && end != text.c_str() && *end == '\0';
      o[name] = number ? num(d) : json(text);
    }
    j[key] = std::move(o);
  }
  // device.facts: the facts measured, under the keys for_each_device_fact() names.
  void facts(const char* key, const DeviceFactsSection& x) {
    json o = json::object();
    for_each_device_fact(
        [&o](const char* name, const std::optional<double>& value) {
          if (value) o[name] = num(*value);
        },
        x);
    j[key] = std::move(o);
  }
};

class Reader {
 public:
  static constexpr bool reading = true;
  Field f;

  // Reads `v` (at `path`) into x.
  template <class T>
  static void read(const json& v, const std::string& path, T& x) {
    if constexpr (std::is_same_v<T, double>) {
      x = real_of(v, path);
    } else if constexpr (std::is_same_v<T, bool>) {
      if (!v.is_boolean()) bad_field(path, shown(v) + " is not true or false");
      x = v.get<bool>();
    } else if constexpr (std::is_integral_v<T>) {
      x = static_cast<T>(count_of(v, path, static_cast<std::uint64_t>(std::numeric_limits<T>::max())));
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (!v.is_string()) bad_field(path, shown(v) + " is not a string");
      x = v.get<std::string>();
    } else if constexpr (IsVector<T>::value) {
      if (!v.is_array()) bad_field(path, shown(v) + " is not an array");
      x.clear();
      x.reserve(v.size());
      for (std::size_t i = 0; i < v.size(); ++i) {
        typename T::value_type e{};
        // A number not written (not finite) in a series reads as 0.
        if (!(std::is_same_v<typename T::value_type, double> && v[i].is_null()))
          read(v[i], path + "[" + std::to_string(i) + "]", e);
        x.push_back(std::move(e));
      }
    } else if constexpr (IsOptional<T>::value) {
      typename T::value_type e{};
      read(v, path, e);
      x = std::move(e);
    } else {
      if (!v.is_object()) bad_field(path, shown(v) + " is not an object");
      Reader r{Field{v, path}};
      fields(r, x);
    }
  }
  template <class T>
  void operator()(const char* key, T& x) const {
    if (const json* v = f.find(key)) read(*v, f.child(key), x);
  }
  template <class T>
  void integer(const char* key, T& x, std::int64_t lo, std::int64_t hi) const {
    if (const json* v = f.find(key)) x = static_cast<T>(integer_of(*v, f.child(key), lo, hi));
  }
  void rank(const char* key, int& x, bool = false) const { integer(key, x, -1, kMaxRanks - 1); }
  void ranks(const char* key, std::vector<int>& x) const {
    if (const json* v = f.find(key)) {
      if (!v->is_array()) bad_field(f.child(key), shown(*v) + " is not an array");
      for (std::size_t i = 0; i < v->size(); ++i)
        x.push_back(
            static_cast<int>(integer_of((*v)[i], f.child(key) + "[" + std::to_string(i) + "]", 0, kMaxRanks - 1)));
    }
  }
  void fraction(const char* key, double& x) const { (*this)(key, x); }
  void nullable(const char* key, std::string& x) const { (*this)(key, x); }
  template <class Fn>
  void group(const char* key, Fn&& fn) const {
    static const json empty = json::object();
    const json* v = f.find(key);
    if (v != nullptr && !v->is_object()) bad_field(f.child(key), shown(*v) + " is not an object");
    Reader r{Field{v != nullptr ? *v : empty, f.child(key)}};
    fn(r);
  }
  bool keep(bool) const { return true; }
  // A key every report has: absent is an error, not a default.
  void require(const char* key, const char* what = "every report has it") const {
    if (f.find(key) == nullptr) bad_field(f.child(key), std::string("missing (") + what + ")");
  }
  bool has(const char* key) const { return f.find(key) != nullptr; }
  void kind(const char* key, PhaseKind& x) const {
    std::string text;
    (*this)(key, text);
    if (!text.empty() && !parse_phase_kind(text, x))
      bad_field(f.child(key), shown(json(text)) + " is not a phase kind");
  }
  void role(const char* key, ThreadRole& x) const {
    std::string text;
    (*this)(key, text);
    if (!text.empty() && !parse_thread_role(text, x))
      bad_field(f.child(key), shown(json(text)) + " is not a thread role");
  }
  void pairs(const char* key, std::vector<std::pair<std::string, double>>& x, const char* first,
             const char* second) const {
    list(key, [&](const Reader& e) {
      std::pair<std::string, double> p;
      e(first, p.first);
      e(second, p.second);
      x.push_back(std::move(p));
    });
  }
  void buckets(const char* key, std::vector<std::pair<std::uint32_t, std::uint64_t>>& x) const {
    const json* v = f.find(key);
    if (v == nullptr) return;
    if (!v->is_array()) bad_field(f.child(key), shown(*v) + " is not an array");
    for (std::size_t i = 0; i < v->size(); ++i) {
      const json& b = (*v)[i];
      const std::string path = f.child(key) + "[" + std::to_string(i) + "]";
      if (!b.is_array() || b.size() != 2) bad_field(path, shown(b) + " is not a pair [bucket index, count]");
      x.emplace_back(static_cast<std::uint32_t>(count_of(b[0], path + "[0]", UINT32_MAX)),
                     count_of(b[1], path + "[1]"));
    }
  }
  // A map of numbers (findings[i].values); null (not finite) is skipped.
  void numbers(const char* key, std::map<std::string, double>& x) const {
    members(key, [&](const std::string& name, const json& v, const std::string& path) {
      if (!v.is_null()) x[name] = real_of(v, path);
    });
  }
  void strings(const char* key, std::map<std::string, std::string>& x) const {
    members(key, [&](const std::string& name, const json& v, const std::string&) {
      x[name] = v.is_string() ? v.get<std::string>() : v.dump();
    });
  }
  void config(const char* key, std::map<std::string, std::string>& values,
              std::map<std::string, std::string>& types) const {
    members(key, [&](const std::string& name, const json& v, const std::string&) {
      if (v.is_number()) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.17g", v.get<double>());  // as set_config() stored it
        values[name] = buf;
        types[name] = "number";
      } else {
        values[name] = v.is_string() ? v.get<std::string>() : v.dump();  // depth-limited before parsing
        types[name] = "string";
      }
    });
  }
  // device.facts: the keys for_each_device_fact() names; null and unknown keys are skipped.
  void facts(const char* key, DeviceFactsSection& x) const {
    group(key, [&x](const Reader& r) {
      for_each_device_fact([&r](const char* name, std::optional<double>& value) { r(name, value); }, x);
    });
  }

 private:
  template <class Fn>
  void list(const char* key, Fn&& fn) const {
    const json* v = f.find(key);
    if (v == nullptr) return;
    if (!v->is_array()) bad_field(f.child(key), shown(*v) + " is not an array");
    for (std::size_t i = 0; i < v->size(); ++i)
      fn(Reader{Field{(*v)[i], f.child(key) + "[" + std::to_string(i) + "]"}});
  }
  template <class Fn>
  void members(const char* key, Fn&& fn) const {
    group(key, [&fn](const Reader& r) {
      for (const auto& [name, v] : r.f.j.items()) fn(name, v, r.f.child(name));
    });
  }
};

// A field table's plain rows: STEPSCOPE_FIELDS(count, total) is
// v("count", x.count); v("total", x.total); (nlohmann/json's own member-list
// expansion, as its NLOHMANN_DEFINE_TYPE_* macros use it).
#define STEPSCOPE_FIELD(member) v(#member, x.member);
#define STEPSCOPE_FIELDS(...)                                               \
  do {                                                                      \
    NLOHMANN_JSON_EXPAND(NLOHMANN_JSON_PASTE(STEPSCOPE_FIELD, __VA_ARGS__)) \
  } while (false)
// A struct whose fields are all plain members, written and read in this order.
#define STEPSCOPE_PLAIN_FIELDS(Type, ...) \
  template <class V>                      \
  void fields(V& v, Type& x) {            \
    STEPSCOPE_FIELDS(__VA_ARGS__);        \
  }

// Every kind's part, as "<kind>_ms" keys of the same object.
template <class V, class T>
void kinds(V& v, PerKind<T>& parts) {
  for (PhaseKind k : kPhaseKinds) v(kind_key(k).c_str(), parts[k]);
}

STEPSCOPE_PLAIN_FIELDS(Distribution, count, total, mean, stddev, min, max, p50, p90, p99)

template <class V>
void fields(V& v, HistogramData& x) {
  if constexpr (!V::reading) v("layout", std::string("log-linear-ns"));
  v.integer("sub_bucket_bits", x.sub_bucket_bits, 0, 20);  // the bucket layout shifts by it
  v.buckets("buckets", x.buckets);
}

STEPSCOPE_PLAIN_FIELDS(HtaTemporalBreakdown, idle_us, compute_us, non_compute_us, kernel_time_us, idle_pctg,
                       compute_pctg, non_compute_pctg)

STEPSCOPE_PLAIN_FIELDS(HtaKernelTypeRow, kernel_type, sum_us, percentage)

template <class V>
void fields(V& v, HtaIdleRow& x) {
  v.integer("stream", x.stream, -1, INT32_MAX);
  STEPSCOPE_FIELDS(idle_category, idle_time_us, idle_time_ratio);
}

template <class V>
void fields(V& v, HtaLaunchStats& x) {
  STEPSCOPE_FIELDS(pairs, short_kernels, runtime_outliers, launch_delay_outliers);
  v.group("thresholds", [&x](auto& t) {
    t("runtime_cutoff_us", x.runtime_cutoff_us);
    t("launch_delay_cutoff_us", x.launch_delay_cutoff_us);
  });
}

// device.hta: HTA's tables for an imported trace (docs/report-schema.md).
template <class V>
void fields(V& v, HtaTables& x) {
  if constexpr (V::reading) x.present = true;
  v.rank("rank", x.rank);
  STEPSCOPE_FIELDS(temporal_breakdown, kernel_type_breakdown, comp_comm_overlap_pctg, idle_time_breakdown, launch_stats,
                   steps_kept);
}

template <class V>
void fields(V& v, StepBreakdown& x) {
  v("wall_ms", x.wall_ms);
  kinds(v, x.kind_ms);
  STEPSCOPE_FIELDS(unattributed_ms, cpu_wait_ms, page_fault_ms, between_steps_input_ms, between_steps_ms);
}

template <class V>
void fields(V& v, SlowStep& x) {
  STEPSCOPE_FIELDS(step, wall_ms);
  kinds(v, x.kind_ms);
  STEPSCOPE_FIELDS(unattributed_ms, between_steps_ms);
}

template <class V>
void fields(V& v, StepSeries& x) {
  v("stride", x.stride);
  if constexpr (V::reading) x.stride = std::max<std::uint32_t>(x.stride, 1);
  STEPSCOPE_FIELDS(first_step, wall_ms);
  kinds(v, x.kind_ms);
  STEPSCOPE_FIELDS(unattributed_ms, between_steps_ms, rss_mb);
}

template <class V>
void fields(V& v, CallsPerStep& x) {
  STEPSCOPE_FIELDS(min, max, mean);
  v.fraction("explained_variance", x.explained_variance);
  STEPSCOPE_FIELDS(phase, phase_mean);
}

template <class V>
void fields(V& v, StepStats& x) {
  v.require("count");
  STEPSCOPE_FIELDS(count, warmup_excluded, wall_ms, warmup_wall_ms, unended_excluded, unended_wall_ms, outer_excluded,
                   next_step_ignored, breakdown);
  if (v.keep(x.settled_breakdown.has_value())) v("settled_breakdown", x.settled_breakdown);
  STEPSCOPE_FIELDS(series, histogram, coverage, between_steps_ms, between_steps_input_ms);
  v("loop_boundaries", x.loop_boundaries);  // 0 in reports that predate it
  v("between_loops_ms", x.between_loops_ms);
  v("evaluation_loops", x.evaluation_loops);  // 0 in reports that predate it
  v("loop_first_steps", x.loop_first_steps);  // 0 in reports that predate them
  STEPSCOPE_FIELDS(loop_first_ms, loop_first_max_ms, loop_first_compared, loop_first_compared_ms, loop_first_rest_ms,
                   slowest);
  if (v.keep(x.within_loop_stddev_ms.has_value())) v("within_loop_stddev_ms", x.within_loop_stddev_ms);
  if (v.keep(x.calls_per_step.has_value())) v("calls_per_step", x.calls_per_step);
  v("clock", x.clock);  // "host" in reports that predate it
  if constexpr (V::reading) {
    if (x.slowest.size() > StepStats::kSlowestStepsKept) x.slowest.resize(StepStats::kSlowestStepsKept);
    if (x.clock != "device") x.clock = "host";
  }
  if (v.keep(x.host_wall_ms.has_value())) v("host_wall_ms", x.host_wall_ms);
  if (v.keep(x.host_breakdown.has_value())) v("host_breakdown", x.host_breakdown);
}

template <class V>
void fields(V& v, SystemSignals& x) {
  STEPSCOPE_FIELDS(available, wall_s, cpu_user_s, cpu_system_s);
  v.integer("cores_available", x.cores_available, 0, 1 << 24);
  STEPSCOPE_FIELDS(cpu_utilization, minor_faults, major_faults, voluntary_switches, involuntary_switches, read_bytes,
                   write_bytes, io_wait_s, runqueue_wait_s);
  v.fraction("step_threads_on_cpu_s", x.step_threads_on_cpu_s);
  STEPSCOPE_FIELDS(rss_start_mb, rss_peak_mb, rss_end_mb);
  v.fraction("input_on_cpu_fraction", x.input_on_cpu_fraction);
  v.fraction("compute_on_cpu_fraction", x.compute_on_cpu_fraction);
  v.fraction("unattributed_on_cpu_fraction", x.unattributed_on_cpu_fraction);
  v.fraction("input_disk_wait_fraction", x.input_disk_wait_fraction);
  STEPSCOPE_FIELDS(input_samples, samples, sampling_cost_ms, collector_cpu_ms);
  v.fraction("load_average_start", x.load_average_start);
  v.fraction("load_average_end", x.load_average_end);
  v.integer("cores_online", x.cores_online, 0, 1 << 20);
  v.fraction("other_processes_cpu_s", x.other_processes_cpu_s);
  v.fraction("children_cpu_s", x.children_cpu_s);
  v.integer("child_processes", x.child_processes, 0, 1 << 20);
  v.fraction("siblings_cpu_s", x.siblings_cpu_s);
  v.integer("sibling_processes", x.sibling_processes, 0, 1 << 20);
  STEPSCOPE_FIELDS(window_steps, run_wall_s, before_steps_wall_s, before_steps_cpu_system_s, before_steps_minor_faults);
  v.fraction("page_fault_us", x.page_fault_us);
}

template <class V>
void fields(V& v, Evidence& x) {
  STEPSCOPE_FIELDS(signal, value, threshold, comparison, supports);
  if constexpr (V::reading) x.crossed = x.supports;  // reports that predate `crossed`
  STEPSCOPE_FIELDS(crossed, sentence);
}

template <class V>
void fields(V& v, Verdict& x) {
  STEPSCOPE_FIELDS(category, confidence, severity, summary, evidence, recommendations);
  v.pairs("ranking", x.ranking, "category", "share_of_step");
}

template <class V>
void fields(V& v, PhaseCallSite& x) {
  v("file", x.file);
  v.integer("line", x.line, 0, INT32_MAX);
  v("host_ms", x.host_ms);
}

STEPSCOPE_PLAIN_FIELDS(OperatorTime, name, kind, count, self_ms)

template <class V>
void fields(V& v, PhaseSummary& x) {
  v.require("name", "every phase has a name");
  v("name", x.name);
  v.kind("kind", x.kind);
  v.role("thread_role", x.thread_role);
  STEPSCOPE_FIELDS(count, host_ms, self_ms, share_of_step, threads, histogram, overlap_with_steps, device_ms);
  if (v.keep(x.host_share_of_step.has_value())) v("host_share_of_step", x.host_share_of_step);
  if (v.keep(!x.sites.empty())) {
    v("sites", x.sites);
    v("sites_merged", x.sites_merged);
  }
  if (v.keep(!x.top_operators.empty())) v("top_operators", x.top_operators);
}

template <class V>
void fields(V& v, Finding& x) {
  STEPSCOPE_FIELDS(kind, severity, message);
  v.numbers("values", x.values);
}

STEPSCOPE_PLAIN_FIELDS(WhatIf, target, share, speedup, step_ms_now, step_ms_projected, step_change_pct, note)

template <class V>
void fields(V& v, AcrossRanks& x) {
  STEPSCOPE_FIELDS(min, median, max, mean);
  v.rank("min_rank", x.min_rank);
  v.rank("max_rank", x.max_rank);
  v("imbalance", x.imbalance);
}

template <class V>
void fields(V& v, RankSummary& x) {
  v.rank("rank", x.rank);
  STEPSCOPE_FIELDS(host, steps, step_ms, busy_ms);
  kinds(v, x.kind_ms);
  STEPSCOPE_FIELDS(unattributed_ms, comm_wait_ms, verdict, straggler);
  v.ranks("waits_for", x.waits_for);  // absent in merged reports written before it
  v("complete", x.complete);          // absent in merged reports written before it
  v.nullable("ended_by", x.ended_by);
  v.nullable("interrupted", x.interrupted);
  v.nullable("exception", x.exception);
}

template <class V>
void fields(V& v, PhaseAcrossRanks& x) {
  v("name", x.name);
  v.kind("kind", x.kind);
  STEPSCOPE_FIELDS(ranks, per_step_ms);
}

STEPSCOPE_PLAIN_FIELDS(StepAcrossRanks, first_step, wall_ms, busy_ms, communication_ms)

template <class V>
void fields(V& v, Straggler& x) {
  v.rank("rank", x.rank);
  STEPSCOPE_FIELDS(phase, rank_ms, median_ms, excess_ms, robust_z, slow_step_fraction, pattern, slow_steps);
  v("cause", x.cause);  // absent in merged reports written before it
}

// The multi-rank section of a merged report (absent from single-rank reports).
template <class V>
void fields(V& v, MultiRank& x) {
  v.integer("world_size", x.world_size, 0, kMaxRanks);
  v.integer("ranks_merged", x.ranks_merged, 0, kMaxRanks);
  v.ranks("missing_ranks", x.missing_ranks);
  STEPSCOPE_FIELDS(step_ms, busy_ms, compute_ms, communication_ms, comm_ms, comm_collective_ms, comm_wait_ms,
                   comm_wait_fraction, expected_wait_from_imbalance_ms, stragglers, method, ranks, phases, step_stride);
  if constexpr (V::reading) x.step_stride = std::max<std::uint32_t>(x.step_stride, 1);
  v("steps", x.steps);
}

template <class V>
void fields(V& v, DeviceUsage& x) {
  v.integer("id", x.id, -1, INT32_MAX);
  STEPSCOPE_FIELDS(name, phases_timed, steps_ran_on, memory_capacity_mb, memory_peak_mb, busy_fraction, busy_ms,
                   kernels, memcpys, peer_memcpys, peer_memcpy_mb, memsets);
}

template <class V>
void fields(V& v, DeviceInfo& x) {
  STEPSCOPE_FIELDS(enabled, status, reason, name, memory_capacity_mb, memory_peak_mb);
  v.facts("facts", x.facts);
  if (v.keep(x.hta.present)) v("hta", x.hta);  // reading it sets `present`
  if (v.keep(!x.hta_ranks.empty())) v("hta_ranks", x.hta_ranks);
  if (v.keep(!x.devices.empty())) {  // live CUDA runs: each GPU's own figures
    v.integer("facts_device", x.facts_device, -1, INT32_MAX);
    v("devices", x.devices);
  }
  if (v.keep(x.cupti_launches_unrecorded > 0)) v("cupti_launches_unrecorded", x.cupti_launches_unrecorded);
}

template <class V>
void fields(V& v, RunInfo& x) {
  STEPSCOPE_FIELDS(library_version, time_utc, host);
  v.integer("pid", x.pid, -(std::int64_t{1} << 53), std::int64_t{1} << 53);
  v.rank("rank", x.rank, /*null_if_none=*/true);
  v.integer("world_size", x.world_size, 0, kMaxRanks);
  v.integer("local_ranks", x.local_ranks, 0, kMaxRanks);  // 0 in reports that predate it
  v("source", x.source);
  v.strings("build", x.build);
  v.config("config", x.config, x.config_types);
  v.group("clock", [&x](auto& c) {
    c("source", x.clock_source);
    c("tsc_ghz", x.clock_tsc_ghz);
    c("error_ppm", x.clock_error_ppm);
    c("reason", x.clock_reason);
  });
  v.group("warmup", [&x](auto& w) {
    w("steps", x.warmup_steps);
    w("source", x.warmup_source);
  });
}

template <class V>
void fields(V& v, Report::Interruption& x) {
  STEPSCOPE_FIELDS(signal, after_s);
}

template <class V>
void fields(V& v, Report::UncaughtException& x) {
  STEPSCOPE_FIELDS(type, message, after_s);
}

template <class V>
void fields(V& v, Report::RuntimeSites& x) {
  STEPSCOPE_FIELDS(sites, overflow, truncated);
}

STEPSCOPE_PLAIN_FIELDS(CommunicationVolume, collectives, bytes, steps)
STEPSCOPE_PLAIN_FIELDS(Overhead, scope_ns, tsc_scope_ns, collector_core_fraction, device_mode, window_steps,
                       window_period, instrumented_steps, uninstrumented_steps, instrumented_step_ms,
                       uninstrumented_step_ms, measured, window_cost_pct, run_cost_pct)

// Absent sections of older reports read as their defaults (runtime_sites,
// overhead, communication, interrupted, exception; `complete`: those reports were final).
template <class V>
void fields(V& v, Report& x) {
  for (const char* key : {"run", "steps", "phases", "bottleneck"}) v.require(key);
  v.integer("schema_version", x.schema_version, INT32_MIN, INT32_MAX);
  STEPSCOPE_FIELDS(run, steps, phases, dropped_records, total_records, system, device, bottleneck, findings, what_if,
                   warnings);
  if (v.keep(x.ranks.has_value())) v("ranks", x.ranks);  // merged multi-rank reports only
  v("complete", x.complete);
  v.nullable("ended_by", x.ended_by);
  STEPSCOPE_FIELDS(interrupted, exception);
  v.nullable("snapshot_time_utc", x.snapshot_time_utc);
  STEPSCOPE_FIELDS(runtime_sites, overhead, communication);
}

#undef STEPSCOPE_PLAIN_FIELDS
#undef STEPSCOPE_FIELDS
#undef STEPSCOPE_FIELD

Report report_from(const json& document) {
  if (!document.is_object()) throw std::runtime_error("the top level is not a JSON object: not a stepscope report");
  if (!document.contains("schema_version")) throw std::runtime_error("no 'schema_version': not a stepscope report");
  const int version = static_cast<int>(integer_of(document["schema_version"], "schema_version", INT32_MIN, INT32_MAX));
  if (version != kReportSchemaVersion)
    throw std::runtime_error("unsupported schema_version " + std::to_string(version) + " (this stepscope reads " +
                             std::to_string(kReportSchemaVersion) + ")");
  Report r;
  Reader::read(document, "", r);
  return r;
}

}  // namespace

std::string report_to_json(const Report& report, int indent) {
  try {
    return Writer::value(report).dump(indent, ' ', false, json::error_handler_t::replace);
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

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

// Every kind's part, as "<kind>_ms" keys of the same object.
template <class V, class T>
void kinds(V& v, PerKind<T>& parts) {
  for (PhaseKind k : kPhaseKinds) v(kind_key(k).c_str(), parts[k]);
}

template <class V>
void fields(V& v, Distribution& d) {
  v("count", d.count);
  v("total", d.total);
  v("mean", d.mean);
  v("stddev", d.stddev);
  v("min", d.min);
  v("max", d.max);
  v("p50", d.p50);
  v("p90", d.p90);
  v("p99", d.p99);
}

template <class V>
void fields(V& v, HistogramData& h) {
  if constexpr (!V::reading) v("layout", std::string("log-linear-ns"));
  v.integer("sub_bucket_bits", h.sub_bucket_bits, 0, 20);  // the bucket layout shifts by it
  v.buckets("buckets", h.buckets);
}

template <class V>
void fields(V& v, HtaTemporalBreakdown& t) {
  v("idle_us", t.idle_us);
  v("compute_us", t.compute_us);
  v("non_compute_us", t.non_compute_us);
  v("kernel_time_us", t.kernel_time_us);
  v("idle_pctg", t.idle_pctg);
  v("compute_pctg", t.compute_pctg);
  v("non_compute_pctg", t.non_compute_pctg);
}

template <class V>
void fields(V& v, HtaKernelTypeRow& k) {
  v("kernel_type", k.kernel_type);
  v("sum_us", k.sum_us);
  v("percentage", k.percentage);
}

template <class V>
void fields(V& v, HtaIdleRow& i) {
  v.integer("stream", i.stream, -1, INT32_MAX);
  v("idle_category", i.idle_category);
  v("idle_time_us", i.idle_time_us);
  v("idle_time_ratio", i.idle_time_ratio);
}

template <class V>
void fields(V& v, HtaLaunchStats& l) {
  v("pairs", l.pairs);
  v("short_kernels", l.short_kernels);
  v("runtime_outliers", l.runtime_outliers);
  v("launch_delay_outliers", l.launch_delay_outliers);
  v.group("thresholds", [&l](auto& t) {
    t("runtime_cutoff_us", l.runtime_cutoff_us);
    t("launch_delay_cutoff_us", l.launch_delay_cutoff_us);
  });
}

// device.hta: HTA's tables for an imported trace (docs/report-schema.md).
template <class V>
void fields(V& v, HtaTables& h) {
  if constexpr (V::reading) h.present = true;
  v.rank("rank", h.rank);
  v("temporal_breakdown", h.temporal_breakdown);
  v("kernel_type_breakdown", h.kernel_type_breakdown);
  v("comp_comm_overlap_pctg", h.comp_comm_overlap_pctg);
  v("idle_time_breakdown", h.idle_time_breakdown);
  v("launch_stats", h.launch_stats);
  v("steps_kept", h.steps_kept);
}

template <class V>
void fields(V& v, StepBreakdown& b) {
  v("wall_ms", b.wall_ms);
  kinds(v, b.kind_ms);
  v("unattributed_ms", b.unattributed_ms);
  v("cpu_wait_ms", b.cpu_wait_ms);
  v("page_fault_ms", b.page_fault_ms);
  v("between_steps_input_ms", b.between_steps_input_ms);
  v("between_steps_ms", b.between_steps_ms);
}

template <class V>
void fields(V& v, SlowStep& x) {
  v("step", x.step);
  v("wall_ms", x.wall_ms);
  kinds(v, x.kind_ms);
  v("unattributed_ms", x.unattributed_ms);
  v("between_steps_ms", x.between_steps_ms);
}

template <class V>
void fields(V& v, StepSeries& s) {
  v("stride", s.stride);
  if constexpr (V::reading) s.stride = std::max<std::uint32_t>(s.stride, 1);
  v("first_step", s.first_step);
  v("wall_ms", s.wall_ms);
  kinds(v, s.kind_ms);
  v("unattributed_ms", s.unattributed_ms);
  v("between_steps_ms", s.between_steps_ms);
  v("rss_mb", s.rss_mb);
}

template <class V>
void fields(V& v, StepStats& s) {
  v.require("count");
  v("count", s.count);
  v("warmup_excluded", s.warmup_excluded);
  v("wall_ms", s.wall_ms);
  v("warmup_wall_ms", s.warmup_wall_ms);
  v("unended_excluded", s.unended_excluded);
  v("unended_wall_ms", s.unended_wall_ms);
  v("breakdown", s.breakdown);
  v("series", s.series);
  v("histogram", s.histogram);
  v("coverage", s.coverage);
  v("between_steps_ms", s.between_steps_ms);
  v("between_steps_input_ms", s.between_steps_input_ms);
  v("loop_boundaries", s.loop_boundaries);  // 0 in reports that predate it
  v("between_loops_ms", s.between_loops_ms);
  v("loop_first_steps", s.loop_first_steps);  // 0 in reports that predate them
  v("loop_first_ms", s.loop_first_ms);
  v("loop_first_max_ms", s.loop_first_max_ms);
  v("slowest", s.slowest);
  v("clock", s.clock);  // "host" in reports that predate it
  if constexpr (V::reading) {
    if (s.slowest.size() > StepStats::kSlowestStepsKept) s.slowest.resize(StepStats::kSlowestStepsKept);
    if (s.clock != "device") s.clock = "host";
  }
  if (v.keep(s.host_wall_ms.has_value())) v("host_wall_ms", s.host_wall_ms);
  if (v.keep(s.host_breakdown.has_value())) v("host_breakdown", s.host_breakdown);
}

template <class V>
void fields(V& v, SystemSignals& s) {
  v("available", s.available);
  v("wall_s", s.wall_s);
  v("cpu_user_s", s.cpu_user_s);
  v("cpu_system_s", s.cpu_system_s);
  v.integer("cores_available", s.cores_available, 0, 1 << 24);
  v("cpu_utilization", s.cpu_utilization);
  v("minor_faults", s.minor_faults);
  v("major_faults", s.major_faults);
  v("voluntary_switches", s.voluntary_switches);
  v("involuntary_switches", s.involuntary_switches);
  v("read_bytes", s.read_bytes);
  v("write_bytes", s.write_bytes);
  v("io_wait_s", s.io_wait_s);
  v("runqueue_wait_s", s.runqueue_wait_s);
  v.fraction("step_threads_on_cpu_s", s.step_threads_on_cpu_s);
  v("rss_start_mb", s.rss_start_mb);
  v("rss_peak_mb", s.rss_peak_mb);
  v("rss_end_mb", s.rss_end_mb);
  v.fraction("input_on_cpu_fraction", s.input_on_cpu_fraction);
  v.fraction("compute_on_cpu_fraction", s.compute_on_cpu_fraction);
  v.fraction("unattributed_on_cpu_fraction", s.unattributed_on_cpu_fraction);
  v.fraction("input_disk_wait_fraction", s.input_disk_wait_fraction);
  v("input_samples", s.input_samples);
  v("samples", s.samples);
  v("sampling_cost_ms", s.sampling_cost_ms);
  v("collector_cpu_ms", s.collector_cpu_ms);
  v.fraction("load_average_start", s.load_average_start);
  v.fraction("load_average_end", s.load_average_end);
  v.integer("cores_online", s.cores_online, 0, 1 << 20);
  v.fraction("other_processes_cpu_s", s.other_processes_cpu_s);
  v("window_steps", s.window_steps);
  v("run_wall_s", s.run_wall_s);
  v("before_steps_wall_s", s.before_steps_wall_s);
  v("before_steps_cpu_system_s", s.before_steps_cpu_system_s);
  v("before_steps_minor_faults", s.before_steps_minor_faults);
  v.fraction("page_fault_us", s.page_fault_us);
}

template <class V>
void fields(V& v, Evidence& e) {
  v("signal", e.signal);
  v("value", e.value);
  v("threshold", e.threshold);
  v("comparison", e.comparison);
  v("supports", e.supports);
  if constexpr (V::reading) e.crossed = e.supports;  // reports that predate `crossed`
  v("crossed", e.crossed);
  v("sentence", e.sentence);
}

template <class V>
void fields(V& v, Verdict& x) {
  v("category", x.category);
  v("confidence", x.confidence);
  v("severity", x.severity);
  v("summary", x.summary);
  v("evidence", x.evidence);
  v("recommendations", x.recommendations);
  v.pairs("ranking", x.ranking, "category", "share_of_step");
}

template <class V>
void fields(V& v, PhaseCallSite& s) {
  v("file", s.file);
  v.integer("line", s.line, 0, INT32_MAX);
  v("host_ms", s.host_ms);
}

template <class V>
void fields(V& v, OperatorTime& op) {
  v("name", op.name);
  v("kind", op.kind);
  v("count", op.count);
  v("self_ms", op.self_ms);
}

template <class V>
void fields(V& v, PhaseSummary& p) {
  v.require("name", "every phase has a name");
  v("name", p.name);
  v.kind("kind", p.kind);
  v.role("thread_role", p.thread_role);
  v("count", p.count);
  v("host_ms", p.host_ms);
  v("self_ms", p.self_ms);
  v("share_of_step", p.share_of_step);
  v("threads", p.threads);
  v("histogram", p.histogram);
  v("overlap_with_steps", p.overlap_with_steps);
  v("device_ms", p.device_ms);
  if (v.keep(p.host_share_of_step.has_value())) v("host_share_of_step", p.host_share_of_step);
  if (v.keep(!p.sites.empty())) {
    v("sites", p.sites);
    v("sites_merged", p.sites_merged);
  }
  if (v.keep(!p.top_operators.empty())) v("top_operators", p.top_operators);
}

template <class V>
void fields(V& v, Finding& x) {
  v("kind", x.kind);
  v("severity", x.severity);
  v("message", x.message);
  v.numbers("values", x.values);
}

template <class V>
void fields(V& v, WhatIf& w) {
  v("target", w.target);
  v("share", w.share);
  v("speedup", w.speedup);
  v("step_ms_now", w.step_ms_now);
  v("step_ms_projected", w.step_ms_projected);
  v("step_change_pct", w.step_change_pct);
  v("note", w.note);
}

template <class V>
void fields(V& v, AcrossRanks& a) {
  v("min", a.min);
  v("median", a.median);
  v("max", a.max);
  v("mean", a.mean);
  v.rank("min_rank", a.min_rank);
  v.rank("max_rank", a.max_rank);
  v("imbalance", a.imbalance);
}

template <class V>
void fields(V& v, RankSummary& r) {
  v.rank("rank", r.rank);
  v("host", r.host);
  v("steps", r.steps);
  v("step_ms", r.step_ms);
  v("busy_ms", r.busy_ms);
  kinds(v, r.kind_ms);
  v("unattributed_ms", r.unattributed_ms);
  v("comm_wait_ms", r.comm_wait_ms);
  v("verdict", r.verdict);
  v("straggler", r.straggler);
  v.ranks("waits_for", r.waits_for);  // absent in merged reports written before it
  v("complete", r.complete);          // absent in merged reports written before it
  v.nullable("ended_by", r.ended_by);
  v.nullable("interrupted", r.interrupted);
  v.nullable("exception", r.exception);
}

template <class V>
void fields(V& v, PhaseAcrossRanks& p) {
  v("name", p.name);
  v.kind("kind", p.kind);
  v("ranks", p.ranks);
  v("per_step_ms", p.per_step_ms);
}

template <class V>
void fields(V& v, StepAcrossRanks& s) {
  v("first_step", s.first_step);
  v("wall_ms", s.wall_ms);
  v("busy_ms", s.busy_ms);
  v("communication_ms", s.communication_ms);
}

template <class V>
void fields(V& v, Straggler& s) {
  v.rank("rank", s.rank);
  v("phase", s.phase);
  v("rank_ms", s.rank_ms);
  v("median_ms", s.median_ms);
  v("excess_ms", s.excess_ms);
  v("robust_z", s.robust_z);
  v("slow_step_fraction", s.slow_step_fraction);
  v("pattern", s.pattern);
  v("slow_steps", s.slow_steps);
  v("cause", s.cause);  // absent in merged reports written before it
}

// The multi-rank section of a merged report (absent from single-rank reports).
template <class V>
void fields(V& v, MultiRank& m) {
  v.integer("world_size", m.world_size, 0, kMaxRanks);
  v.integer("ranks_merged", m.ranks_merged, 0, kMaxRanks);
  v.ranks("missing_ranks", m.missing_ranks);
  v("step_ms", m.step_ms);
  v("busy_ms", m.busy_ms);
  v("compute_ms", m.compute_ms);
  v("communication_ms", m.communication_ms);
  v("comm_ms", m.comm_ms);
  v("comm_collective_ms", m.comm_collective_ms);
  v("comm_wait_ms", m.comm_wait_ms);
  v("comm_wait_fraction", m.comm_wait_fraction);
  v("expected_wait_from_imbalance_ms", m.expected_wait_from_imbalance_ms);
  v("stragglers", m.stragglers);
  v("method", m.method);
  v("ranks", m.ranks);
  v("phases", m.phases);
  v("step_stride", m.step_stride);
  if constexpr (V::reading) m.step_stride = std::max<std::uint32_t>(m.step_stride, 1);
  v("steps", m.steps);
}

template <class V>
void fields(V& v, DeviceUsage& u) {
  v.integer("id", u.id, -1, INT32_MAX);
  v("name", u.name);
  v("phases_timed", u.phases_timed);
  v("steps_ran_on", u.steps_ran_on);
  v("memory_capacity_mb", u.memory_capacity_mb);
  v("memory_peak_mb", u.memory_peak_mb);
  v("busy_fraction", u.busy_fraction);
  v("busy_ms", u.busy_ms);
  v("kernels", u.kernels);
  v("memcpys", u.memcpys);
  v("peer_memcpys", u.peer_memcpys);
  v("peer_memcpy_mb", u.peer_memcpy_mb);
  v("memsets", u.memsets);
}

template <class V>
void fields(V& v, DeviceInfo& d) {
  v("enabled", d.enabled);
  v("status", d.status);
  v("reason", d.reason);
  v("name", d.name);
  v("memory_capacity_mb", d.memory_capacity_mb);
  v("memory_peak_mb", d.memory_peak_mb);
  v.facts("facts", d.facts);
  if (v.keep(d.hta.present)) v("hta", d.hta);  // reading it sets `present`
  if (v.keep(!d.hta_ranks.empty())) v("hta_ranks", d.hta_ranks);
  if (v.keep(!d.devices.empty())) {  // live CUDA runs: each GPU's own figures
    v.integer("facts_device", d.facts_device, -1, INT32_MAX);
    v("devices", d.devices);
  }
  if (v.keep(d.cupti_launches_unrecorded > 0)) v("cupti_launches_unrecorded", d.cupti_launches_unrecorded);
}

template <class V>
void fields(V& v, RunInfo& run) {
  v("library_version", run.library_version);
  v("time_utc", run.time_utc);
  v("host", run.host);
  v.integer("pid", run.pid, -(std::int64_t{1} << 53), std::int64_t{1} << 53);
  v.rank("rank", run.rank, /*null_if_none=*/true);
  v.integer("world_size", run.world_size, 0, kMaxRanks);
  v("source", run.source);
  v.strings("build", run.build);
  v.config("config", run.config, run.config_types);
  v.group("clock", [&run](auto& c) {
    c("source", run.clock_source);
    c("tsc_ghz", run.clock_tsc_ghz);
    c("error_ppm", run.clock_error_ppm);
    c("reason", run.clock_reason);
  });
  v.group("warmup", [&run](auto& w) {
    w("steps", run.warmup_steps);
    w("source", run.warmup_source);
  });
}

template <class V>
void fields(V& v, Report::Interruption& x) {
  v("signal", x.signal);
  v("after_s", x.after_s);
}

template <class V>
void fields(V& v, Report::UncaughtException& x) {
  v("type", x.type);
  v("message", x.message);
  v("after_s", x.after_s);
}

template <class V>
void fields(V& v, Report::RuntimeSites& x) {
  v("sites", x.sites);
  v("overflow", x.overflow);
  v("truncated", x.truncated);
}

template <class V>
void fields(V& v, Overhead& o) {
  v("scope_ns", o.scope_ns);
  v("tsc_scope_ns", o.tsc_scope_ns);
  v("collector_core_fraction", o.collector_core_fraction);
  v("device_mode", o.device_mode);
  v("window_steps", o.window_steps);
  v("window_period", o.window_period);
  v("instrumented_steps", o.instrumented_steps);
  v("uninstrumented_steps", o.uninstrumented_steps);
  v("instrumented_step_ms", o.instrumented_step_ms);
  v("uninstrumented_step_ms", o.uninstrumented_step_ms);
  v("measured", o.measured);
  v("window_cost_pct", o.window_cost_pct);
  v("run_cost_pct", o.run_cost_pct);
}

// Absent sections of older reports read as their defaults (runtime_sites,
// overhead, interrupted, exception; `complete`: those reports were final).
template <class V>
void fields(V& v, Report& r) {
  for (const char* key : {"run", "steps", "phases", "bottleneck"}) v.require(key);
  v.integer("schema_version", r.schema_version, INT32_MIN, INT32_MAX);
  v("run", r.run);
  v("steps", r.steps);
  v("phases", r.phases);
  v("dropped_records", r.dropped_records);
  v("total_records", r.total_records);
  v("system", r.system);
  v("device", r.device);
  v("bottleneck", r.bottleneck);
  v("findings", r.findings);
  v("what_if", r.what_if);
  v("warnings", r.warnings);
  if (v.keep(r.ranks.has_value())) v("ranks", r.ranks);  // merged multi-rank reports only
  v("complete", r.complete);
  v.nullable("ended_by", r.ended_by);
  v("interrupted", r.interrupted);
  v("exception", r.exception);
  v.nullable("snapshot_time_utc", r.snapshot_time_utc);
  v("runtime_sites", r.runtime_sites);
  v("overhead", r.overhead);
}

json to_j(const Report& r) {
  json out = Writer::value(r);
  // Derived, for scripts: the accounting the verdict and the summary use.
  out["steps"]["settled_breakdown"] = Writer::value(settled_breakdown(r));
  return out;
}

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

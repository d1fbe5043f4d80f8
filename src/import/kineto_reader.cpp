// PyTorch profiler / Kineto Chrome-trace reader: a SAX handler that keeps
// one small record per complete ("X") event, then a pass that applies HTA's
// rounding and last-step filtering and builds the Timeline.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <istream>
#include <limits>
#include <new>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "import/byte_source.hpp"
#include "stepscope/import.hpp"
#include "timeline/classify.hpp"

namespace stepscope::detail {
namespace {

using timeline::NameId;

// Interns strings; views point into a deque, whose elements never move.
class Interner {
 public:
  NameId intern(std::string&& text) {
    auto found = index_.find(std::string_view(text));
    if (found != index_.end()) return found->second;
    const auto id = static_cast<NameId>(storage_.size());
    storage_.push_back(std::move(text));
    index_.emplace(std::string_view(storage_.back()), id);
    return id;
  }
  std::vector<std::string> take() {
    index_.clear();
    std::vector<std::string> out;
    out.reserve(storage_.size());
    for (auto& s : storage_) out.push_back(std::move(s));
    storage_.clear();
    return out;
  }
  const std::string& text(NameId id) const { return storage_[id]; }
  std::size_t size() const { return storage_.size(); }

 private:
  std::deque<std::string> storage_;
  std::unordered_map<std::string_view, NameId> index_;
};

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
  if (cat == "cuda_runtime" || cat == "cuda_driver" || cat == "Runtime" || cat == "Driver" ||
      cat == "mtia_runtime")
    return Category::runtime;
  if (cat == "cpu_op" || cat == "Operator") return Category::cpu_op;
  if (cat == "user_annotation") return Category::user_annotation;
  if (cat == "gpu_user_annotation") return Category::gpu_user_annotation;
  if (cat == "python_function") return Category::python_function;
  return Category::other;
}

// A number as it appeared in the JSON: exact integer, or a double plus its
// text (the text gives exact nanoseconds when HTA rounding is off).
struct NumberValue {
  enum class Kind : std::uint8_t { missing, integer, floating, wrong_type } kind = Kind::missing;
  std::int64_t integer = 0;
  double floating = 0.0;
  std::string text;
  const char* wrong_type = "";
};

// One complete event, compact. Times already in ns.
struct RawEvent {
  std::int64_t start_ns;
  std::int64_t end_ns;
  std::int64_t pid;
  std::int64_t tid;
  std::int64_t stream;
  std::int64_t correlation;
  std::int64_t bytes;
  std::int32_t device;
  NameId name;
  NameId category;
};

constexpr double kMaxMicroseconds = 9.0e15;  // ns must fit in int64

// Parses a JSON decimal like "1712195495519695.8" (microseconds) into exact
// integer nanoseconds; falls back to the double for exponent forms.
bool microseconds_text_to_ns(const std::string& text, double value, std::int64_t& ns) {
  if (text.find_first_of("eE") != std::string::npos || text.empty()) {
    if (!(std::fabs(value) < kMaxMicroseconds)) return false;
    ns = std::llround(value * 1000.0);
    return true;
  }
  std::size_t i = 0;
  const bool negative = text[0] == '-';
  if (negative) ++i;
  std::int64_t whole = 0;
  for (; i < text.size() && text[i] != '.'; ++i) {
    whole = whole * 10 + (text[i] - '0');
    if (whole > static_cast<std::int64_t>(kMaxMicroseconds)) return false;
  }
  std::int64_t fraction = 0;
  int digits = 0;
  bool round_up = false;
  if (i < text.size() && text[i] == '.') {
    for (++i; i < text.size(); ++i) {
      if (digits < 3) {
        fraction = fraction * 10 + (text[i] - '0');
        ++digits;
      } else if (digits == 3) {
        round_up = text[i] >= '5';
        ++digits;
      }
    }
  }
  while (digits < 3) {
    fraction *= 10;
    ++digits;
  }
  ns = whole * 1000 + fraction + (round_up ? 1 : 0);
  if (negative) ns = -ns;
  return true;
}

const char* json_type_name(nlohmann::json::value_t t) {
  switch (t) {
    case nlohmann::json::value_t::null: return "null";
    case nlohmann::json::value_t::boolean: return "boolean";
    case nlohmann::json::value_t::string: return "string";
    case nlohmann::json::value_t::object: return "object";
    case nlohmann::json::value_t::array: return "array";
    default: return "number";
  }
}

class KinetoSax {
 public:
  using json = nlohmann::json;
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  KinetoSax(const ImportOptions& options, const ChunkStreambuf& position)
      : options_(options), position_(position) {}

  // --- SAX interface -------------------------------------------------------
  bool null() { return scalar(ScalarRef{json::value_t::null}); }
  bool boolean(bool) { return scalar(ScalarRef{json::value_t::boolean}); }
  bool number_integer(number_integer_t v) {
    ScalarRef s{json::value_t::number_integer};
    s.integer = v;
    return scalar(s);
  }
  bool number_unsigned(number_unsigned_t v) {
    ScalarRef s{json::value_t::number_unsigned};
    s.unsigned_value = v;
    return scalar(s);
  }
  bool number_float(number_float_t v, const string_t& text) {
    ScalarRef s{json::value_t::number_float};
    s.floating = v;
    s.text = &text;
    return scalar(s);
  }
  bool string(string_t& v) {
    ScalarRef s{json::value_t::string};
    s.string_value = &v;
    return scalar(s);
  }
  bool binary(binary_t&) { return scalar(ScalarRef{json::value_t::binary}); }
  bool start_object(std::size_t) { return start_container(json::value_t::object); }
  bool start_array(std::size_t) { return start_container(json::value_t::array); }
  bool end_object() { return end_container(); }
  bool end_array() { return end_container(); }
  bool key(string_t& k) {
    if (skip_depth_ > 0) return true;
    key_ = Key::other;
    switch (context()) {
      case Context::top:
        if (k == "traceEvents") key_ = Key::trace_events;
        else if (k == "distributedInfo") key_ = Key::distributed_info;
        else if (k == "deviceProperties") key_ = Key::device_properties;
        break;
      case Context::event:
        if (k.size() == 2 && k[0] == 't') {
          if (k[1] == 's') key_ = Key::ts;
          else if (k[1] == 'd') key_ = Key::tid;
        } else if (k == "ph") key_ = Key::ph;
        else if (k == "cat") key_ = Key::cat;
        else if (k == "name") key_ = Key::name;
        else if (k == "dur") key_ = Key::dur;
        else if (k == "pid") key_ = Key::pid;
        else if (k == "args") key_ = Key::args;
        if (position_.position() - event_start_ > options_.max_event_bytes) {
          return fail("event #" + std::to_string(event_index_) + " is larger than " +
                      std::to_string(options_.max_event_bytes) + " bytes");
        }
        break;
      case Context::args:
        if (k == "stream") key_ = Key::stream;
        else if (k == "correlation") key_ = Key::correlation;
        else if (k == "device") key_ = Key::device;
        else if (k == "bytes") key_ = Key::bytes;
        break;
      case Context::distributed_info:
        if (k == "rank") key_ = Key::rank;
        else if (k == "world_size") key_ = Key::world_size;
        else if (k == "backend") key_ = Key::backend;
        break;
      case Context::device:
        if (k == "id") key_ = Key::device_id;
        else if (k == "name") key_ = Key::device_name;
        else if (k == "totalGlobalMem") key_ = Key::total_memory;
        else if (k == "computeMajor") key_ = Key::compute_major;
        else if (k == "computeMinor") key_ = Key::compute_minor;
        else if (k == "numSms") key_ = Key::sm_count;
        break;
      default:
        break;
    }
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& ex) {
    if (error_.empty()) {
      std::string what = ex.what();
      // nlohmann's message has line/column, which for a one-line JSON adds nothing.
      const auto colon = what.find("syntax error");
      if (colon != std::string::npos) what = what.substr(colon);
      error_ = "invalid or truncated JSON at byte offset " + std::to_string(position) + where() +
               ": " + what;
      json_error_ = true;
    }
    return false;
  }

  // --- results -------------------------------------------------------------
  const std::string& error() const { return error_; }
  bool json_error() const { return json_error_; }
  bool saw_trace_events() const { return saw_trace_events_; }
  std::uint64_t events_seen() const { return event_index_; }
  std::vector<RawEvent>& events() { return events_; }
  Interner& names() { return names_; }
  Interner& categories() { return categories_; }
  timeline::Timeline& meta() { return meta_; }
  bool fractional_timestamps() const { return fractional_; }

 private:
  enum class Context : std::uint8_t { none, top, events, event, args, distributed_info, devices, device };
  enum class Key : std::uint8_t {
    other, trace_events, distributed_info, device_properties,
    ph, cat, name, ts, dur, pid, tid, args,
    stream, correlation, device, bytes,
    rank, world_size, backend,
    device_id, device_name, total_memory, compute_major, compute_minor, sm_count,
  };
  struct ScalarRef {
    json::value_t type;
    std::int64_t integer = 0;
    std::uint64_t unsigned_value = 0;
    double floating = 0;
    const string_t* text = nullptr;
    string_t* string_value = nullptr;
  };
  struct EventFields {
    bool has_ph = false, is_complete = false;
    bool has_cat = false;
    std::string cat, name;
    NumberValue ts, dur;
    std::int64_t pid = -1, tid = -1, stream = -1, correlation = -1, bytes = -1;
    std::int32_t device = -1;
    const char* wrong_field = nullptr;
    const char* wrong_type = nullptr;
    const char* wrong_expected = nullptr;
  };

  Context context() const { return stack_.empty() ? Context::none : stack_.back(); }

  std::string where() const {
    if (in_event_) return " (in traceEvents[" + std::to_string(event_index_) + "])";
    return "";
  }

  bool fail(std::string message) {
    if (error_.empty()) error_ = std::move(message);
    return false;
  }

  static bool as_int64(const ScalarRef& s, std::int64_t& out) {
    switch (s.type) {
      case json::value_t::number_integer: out = s.integer; return true;
      case json::value_t::number_unsigned:
        // Kineto writes stream -1 as 4294967295 on some versions; int64 holds it.
        if (s.unsigned_value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
          return false;
        out = static_cast<std::int64_t>(s.unsigned_value);
        return true;
      case json::value_t::number_float:
        if (!(std::fabs(s.floating) < 9.2e18)) return false;
        out = static_cast<std::int64_t>(s.floating);
        return true;
      default: return false;
    }
  }

  void set_number(NumberValue& n, const ScalarRef& s) {
    switch (s.type) {
      case json::value_t::number_integer:
      case json::value_t::number_unsigned:
        if (!as_int64(s, n.integer)) {
          n.kind = NumberValue::Kind::wrong_type;
          n.wrong_type = "out-of-range number";
          return;
        }
        n.kind = NumberValue::Kind::integer;
        return;
      case json::value_t::number_float:
        n.kind = NumberValue::Kind::floating;
        n.floating = s.floating;
        if (!options_.hta_rounding) n.text = *s.text;
        fractional_ = true;
        return;
      default:
        n.kind = NumberValue::Kind::wrong_type;
        n.wrong_type = json_type_name(s.type);
        return;
    }
  }

  void wrong(const char* field, const char* got, const char* expected) {
    if (event_.wrong_field == nullptr) {
      event_.wrong_field = field;
      event_.wrong_type = got;
      event_.wrong_expected = expected;
    }
  }

  bool scalar(const ScalarRef& s) {
    if (skip_depth_ > 0) return true;
    switch (context()) {
      case Context::none:
        return fail("the trace is a bare JSON " + std::string(json_type_name(s.type)) +
                    "; expected an object with \"traceEvents\"");
      case Context::top:
        if (key_ == Key::trace_events)
          return fail(std::string("\"traceEvents\" must be an array, got ") + json_type_name(s.type));
        return true;
      case Context::events:
        return fail("traceEvents[" + std::to_string(event_index_++) + "] must be an object, got " +
                    json_type_name(s.type) + " (byte offset " + std::to_string(position_.position()) + ")");
      case Context::event: event_scalar(s); return true;
      case Context::args: {
        std::int64_t v = -1;
        // Like HTA (pd.to_numeric(errors="coerce")), a non-numeric arg becomes -1.
        const bool numeric = as_int64(s, v);
        if (!numeric) v = -1;
        switch (key_) {
          case Key::stream: event_.stream = v; break;
          case Key::correlation: event_.correlation = v; break;
          case Key::device: event_.device = static_cast<std::int32_t>(v); break;
          case Key::bytes: event_.bytes = v; break;
          default: break;
        }
        return true;
      }
      case Context::distributed_info: {
        std::int64_t v = 0;
        if (key_ == Key::rank || key_ == Key::world_size) {
          if (!as_int64(s, v) || v < 0 || v > std::numeric_limits<int>::max())
            return fail(std::string("distributedInfo.") + (key_ == Key::rank ? "rank" : "world_size") +
                        " must be a non-negative integer, got " + json_type_name(s.type));
          (key_ == Key::rank ? meta_.rank : meta_.world_size) = static_cast<int>(v);
          meta_.has_distributed_info = true;
        } else if (key_ == Key::backend && s.type == json::value_t::string) {
          meta_.distributed_backend = *s.string_value;
        }
        return true;
      }
      case Context::device: {
        auto& d = meta_.devices.back();
        std::int64_t v = -1;
        if (key_ == Key::device_name) {
          if (s.type == json::value_t::string) d.name = *s.string_value;
          return true;
        }
        if (!as_int64(s, v)) v = -1;
        switch (key_) {
          case Key::device_id: d.id = static_cast<int>(v); break;
          case Key::total_memory: d.total_memory_bytes = v; break;
          case Key::compute_major: d.compute_major = static_cast<int>(v); break;
          case Key::compute_minor: d.compute_minor = static_cast<int>(v); break;
          case Key::sm_count: d.multiprocessor_count = static_cast<int>(v); break;
          default: break;
        }
        return true;
      }
      case Context::devices:
        return true;  // tolerate junk entries in deviceProperties
    }
    return true;
  }

  void event_scalar(const ScalarRef& s) {
    const bool is_string = s.type == json::value_t::string;
    switch (key_) {
      case Key::ph:
        if (!is_string) {
          wrong("ph", json_type_name(s.type), "a string");
          return;
        }
        event_.has_ph = true;
        event_.is_complete = *s.string_value == "X";
        return;
      case Key::cat:
        if (s.type == json::value_t::null) return;  // HTA drops events with null cat
        if (!is_string) {
          wrong("cat", json_type_name(s.type), "a string");
          return;
        }
        event_.has_cat = true;
        event_.cat = std::move(*s.string_value);
        return;
      case Key::name:
        if (!is_string) {
          wrong("name", json_type_name(s.type), "a string");
          return;
        }
        event_.name = std::move(*s.string_value);
        return;
      case Key::ts: set_number(event_.ts, s); return;
      case Key::dur:
        if (s.type == json::value_t::null) return;  // treated as missing, as HTA's dropna
        set_number(event_.dur, s);
        return;
      case Key::pid:
      case Key::tid: {
        // Kineto sometimes labels rows with strings ("Spans", "stream 7"): keep -1.
        std::int64_t v = -1;
        if (!as_int64(s, v)) v = -1;
        (key_ == Key::pid ? event_.pid : event_.tid) = v;
        return;
      }
      case Key::args:
        return;  // non-object args: HTA falls back to defaults
      default: return;
    }
  }

  bool start_container(json::value_t type) {
    if (skip_depth_ > 0) {
      ++skip_depth_;
      return true;
    }
    const bool is_object = type == json::value_t::object;
    switch (context()) {
      case Context::none:
        if (is_object) {
          stack_.push_back(Context::top);
        } else {
          // The Chrome "JSON Array Format": the document is the event list.
          stack_.push_back(Context::events);
          saw_trace_events_ = true;
        }
        return true;
      case Context::top:
        if (key_ == Key::trace_events) {
          if (is_object) return fail("\"traceEvents\" must be an array, got object");
          saw_trace_events_ = true;
          stack_.push_back(Context::events);
        } else if (key_ == Key::distributed_info && is_object) {
          stack_.push_back(Context::distributed_info);
        } else if (key_ == Key::device_properties && !is_object) {
          stack_.push_back(Context::devices);
        } else {
          skip_depth_ = 1;
        }
        return true;
      case Context::events:
        if (!is_object)
          return fail("traceEvents[" + std::to_string(event_index_) + "] must be an object, got array" +
                      " (byte offset " + std::to_string(position_.position()) + ")");
        event_ = EventFields{};
        in_event_ = true;
        event_start_ = position_.position();
        stack_.push_back(Context::event);
        return true;
      case Context::event:
        if (key_ == Key::args && is_object) {
          stack_.push_back(Context::args);
          return true;
        }
        if (key_ == Key::ts || key_ == Key::dur) wrong(key_ == Key::ts ? "ts" : "dur", json_type_name(type), "a number");
        if (key_ == Key::ph || key_ == Key::cat || key_ == Key::name)
          wrong(key_ == Key::ph ? "ph" : key_ == Key::cat ? "cat" : "name", json_type_name(type), "a string");
        skip_depth_ = 1;
        return true;
      case Context::devices:
        if (is_object) {
          meta_.devices.emplace_back();
          stack_.push_back(Context::device);
        } else {
          skip_depth_ = 1;
        }
        return true;
      default:
        skip_depth_ = 1;
        return true;
    }
  }

  bool end_container() {
    if (skip_depth_ > 0) {
      --skip_depth_;
      return true;
    }
    if (stack_.empty()) return fail("unbalanced JSON");
    const Context closing = stack_.back();
    stack_.pop_back();
    if (closing == Context::event) {
      in_event_ = false;
      const bool ok = finish_event();
      ++event_index_;
      return ok;
    }
    return true;
  }

  std::string event_label() const {
    return "traceEvents[" + std::to_string(event_index_) + "] (ending at byte offset " +
           std::to_string(position_.position()) + ")";
  }

  bool finish_event() {
    EventFields& e = event_;
    if (e.wrong_field != nullptr) {
      // Only complete events feed the model; other phases may carry odd fields.
      if (e.is_complete || !e.has_ph || std::strcmp(e.wrong_field, "ph") == 0) {
        return fail(event_label() + ": field \"" + e.wrong_field + "\" must be " + e.wrong_expected +
                    ", got " + e.wrong_type);
      }
      return true;
    }
    if (e.ts.kind == NumberValue::Kind::wrong_type || e.dur.kind == NumberValue::Kind::wrong_type) {
      const bool ts_bad = e.ts.kind == NumberValue::Kind::wrong_type;
      if (e.is_complete)
        return fail(event_label() + ": field \"" + (ts_bad ? "ts" : "dur") + "\" must be a number, got " +
                    (ts_bad ? e.ts.wrong_type : e.dur.wrong_type));
      return true;
    }
    if (!e.is_complete) return true;
    // HTA drops rows without dur or cat, and the "Trace" summary span.
    if (!e.has_cat || e.dur.kind == NumberValue::Kind::missing || e.cat == "Trace") return true;
    if (e.ts.kind == NumberValue::Kind::missing) return fail(event_label() + ": complete event has no \"ts\"");

    RawEvent raw{};
    if (!convert_times(e, raw.start_ns, raw.end_ns))
      return fail(event_label() + ": \"ts\"/\"dur\" out of range");
    raw.pid = e.pid;
    raw.tid = e.tid;
    raw.stream = e.stream;
    raw.correlation = e.correlation;
    raw.bytes = e.bytes;
    raw.device = e.device;
    raw.name = names_.intern(std::move(e.name));
    raw.category = categories_.intern(std::move(e.cat));
    events_.push_back(raw);
    return true;
  }

  // HTA's rounding works on float64 microseconds: start = ceil(ts),
  // end = floor(ts + dur). Doing the same double arithmetic reproduces its
  // integer microseconds bit for bit; integer inputs are exact either way.
  bool convert_times(const EventFields& e, std::int64_t& start_ns, std::int64_t& end_ns) const {
    const bool both_integer =
        e.ts.kind == NumberValue::Kind::integer && e.dur.kind == NumberValue::Kind::integer;
    if (both_integer) {
      const std::int64_t limit = static_cast<std::int64_t>(kMaxMicroseconds);
      if (std::llabs(e.ts.integer) > limit || std::llabs(e.dur.integer) > limit) return false;
      start_ns = e.ts.integer * 1000;
      end_ns = (e.ts.integer + e.dur.integer) * 1000;
      return true;
    }
    const double ts = e.ts.kind == NumberValue::Kind::integer ? static_cast<double>(e.ts.integer) : e.ts.floating;
    const double dur = e.dur.kind == NumberValue::Kind::integer ? static_cast<double>(e.dur.integer) : e.dur.floating;
    if (options_.hta_rounding) {
      const double start = std::ceil(ts);
      const double end = std::floor(ts + dur);
      if (!(std::fabs(start) < kMaxMicroseconds) || !(std::fabs(end) < kMaxMicroseconds)) return false;
      start_ns = static_cast<std::int64_t>(start) * 1000;
      end_ns = static_cast<std::int64_t>(end) * 1000;
      return true;
    }
    std::int64_t ts_ns = 0, dur_ns = 0;
    if (e.ts.kind == NumberValue::Kind::integer) {
      if (std::llabs(e.ts.integer) > static_cast<std::int64_t>(kMaxMicroseconds)) return false;
      ts_ns = e.ts.integer * 1000;
    } else if (!microseconds_text_to_ns(e.ts.text, ts, ts_ns)) {
      return false;
    }
    if (e.dur.kind == NumberValue::Kind::integer) {
      if (std::llabs(e.dur.integer) > static_cast<std::int64_t>(kMaxMicroseconds)) return false;
      dur_ns = e.dur.integer * 1000;
    } else if (!microseconds_text_to_ns(e.dur.text, dur, dur_ns)) {
      return false;
    }
    start_ns = ts_ns;
    end_ns = ts_ns + dur_ns;
    return true;
  }

  const ImportOptions& options_;
  const ChunkStreambuf& position_;
  std::vector<Context> stack_;
  Key key_ = Key::other;
  int skip_depth_ = 0;
  bool in_event_ = false;
  bool saw_trace_events_ = false;
  bool fractional_ = false;
  bool json_error_ = false;
  std::uint64_t event_index_ = 0;
  std::uint64_t event_start_ = 0;
  EventFields event_;
  std::vector<RawEvent> events_;
  Interner names_;
  Interner categories_;
  timeline::Timeline meta_;
  std::string error_;
};

// ---------------------------------------------------------------------------
// From raw events to the Timeline.

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

// HTA's GPUKernelFilter: device work is (stream >= 0 and correlation >= 0),
// plus the device-wide sync events that Kineto puts on stream -1.
struct NameFacts {
  bool is_step = false;
  std::int64_t step_number = -1;
  bool is_device_sync = false;  // "Event Sync" / "Context Sync"
};

void build_timeline(KinetoSax& sax, const ImportOptions& options, ImportResult& result) {
  std::vector<RawEvent>& events = sax.events();
  Interner& names = sax.names();
  Interner& categories = sax.categories();

  std::vector<Category> category_kind(categories.size());
  for (NameId i = 0; i < categories.size(); ++i) category_kind[i] = category_of(categories.text(i));

  std::vector<NameFacts> facts(names.size());
  std::size_t distinct_steps = 0;
  for (NameId i = 0; i < names.size(); ++i) {
    const std::string& n = names.text(i);
    if (starts_with(n, "ProfilerStep#")) {
      facts[i].is_step = true;
      // Digits after '#'; a name without them is still a step marker for HTA.
      std::int64_t number = 0;
      bool digits = false;
      for (std::size_t k = 13; k < n.size() && n[k] >= '0' && n[k] <= '9' && number < (1LL << 50); ++k) {
        number = number * 10 + (n[k] - '0');
        digits = true;
      }
      facts[i].step_number = digits ? number : -1;
    } else if (starts_with(n, "ProfilerStep")) {
      facts[i].is_step = true;  // HTA matches the prefix "ProfilerStep"
    }
    facts[i].is_device_sync = n == "Event Sync" || n == "Context Sync";
  }

  auto is_gpu_event = [&](const RawEvent& e) {
    return (e.stream >= 0 && e.correlation >= 0) || facts[e.name].is_device_sync;
  };

  // Distinct step names present.
  {
    std::unordered_set<NameId> step_names;
    for (const RawEvent& e : events)
      if (facts[e.name].is_step && !is_gpu_event(e)) step_names.insert(e.name);
    distinct_steps = step_names.size();
  }

  std::vector<char> keep(events.size(), 1);
  if (options.drop_last_profiler_step && distinct_steps >= 2) {
    std::int64_t last_step_start = std::numeric_limits<std::int64_t>::min();
    for (const RawEvent& e : events)
      if (facts[e.name].is_step && !is_gpu_event(e)) last_step_start = std::max(last_step_start, e.start_ns);
    std::unordered_set<std::int64_t> kept_correlations;
    for (std::size_t i = 0; i < events.size(); ++i) {
      const RawEvent& e = events[i];
      if (is_gpu_event(e)) continue;
      keep[i] = e.start_ns < last_step_start;
      if (keep[i]) kept_correlations.insert(e.correlation);
    }
    for (std::size_t i = 0; i < events.size(); ++i) {
      const RawEvent& e = events[i];
      if (is_gpu_event(e)) keep[i] = kept_correlations.count(e.correlation) > 0;
      if (!keep[i]) ++result.stats.events_dropped_after_last_step;
    }
  }

  timeline::Timeline& tl = result.trace;
  tl = std::move(sax.meta());
  if (!tl.has_distributed_info) {
    tl.rank = 0;
    tl.world_size = 1;
  }

  // Per-name classification, computed once.
  std::vector<timeline::KernelClass> kernel_class(names.size());
  std::vector<timeline::HostOpKind> runtime_kind(names.size());
  for (NameId i = 0; i < names.size(); ++i) {
    kernel_class[i] = timeline::classify_kernel(names.text(i));
    runtime_kind[i] = timeline::classify_runtime_call(names.text(i));
  }

  for (std::size_t i = 0; i < events.size(); ++i) {
    if (!keep[i]) continue;
    const RawEvent& e = events[i];
    const Category cat = category_kind[e.category];
    if (cat == Category::gpu_user_annotation) {
      tl.phases.push_back(timeline::Phase{e.name, e.start_ns, e.end_ns, e.tid, true});
      continue;
    }
    if (e.stream != -1) {
      timeline::DeviceInterval d;
      d.start_ns = e.start_ns;
      d.end_ns = e.end_ns;
      d.stream = e.stream;
      d.correlation = e.correlation;
      d.device = e.device;
      d.name = e.name;
      d.cls = kernel_class[e.name];
      d.bytes = e.bytes;
      switch (cat) {
        case Category::kernel: d.kind = timeline::DeviceOpKind::kernel; break;
        case Category::memcpy: d.kind = timeline::DeviceOpKind::memcpy; break;
        case Category::memset: d.kind = timeline::DeviceOpKind::memset; break;
        case Category::cuda_sync: d.kind = timeline::DeviceOpKind::sync; break;
        default: d.kind = timeline::DeviceOpKind::other; break;
      }
      if (d.kind == timeline::DeviceOpKind::memcpy)
        detail::describe_memcpy(names.text(e.name), d.direction, d.host_memory);
      tl.device_ops.push_back(d);
      continue;
    }
    timeline::HostInterval h;
    h.start_ns = e.start_ns;
    h.end_ns = e.end_ns;
    h.pid = e.pid;
    h.tid = e.tid;
    h.correlation = e.correlation;
    h.name = e.name;
    switch (cat) {
      case Category::runtime: h.kind = runtime_kind[e.name]; break;
      case Category::cuda_sync: h.kind = timeline::HostOpKind::runtime_sync; break;
      case Category::cpu_op: h.kind = timeline::HostOpKind::framework_op; break;
      case Category::user_annotation: h.kind = timeline::HostOpKind::annotation; break;
      case Category::python_function: h.kind = timeline::HostOpKind::python; break;
      default: h.kind = timeline::HostOpKind::other; break;
    }
    if (facts[e.name].is_step) {
      h.kind = timeline::HostOpKind::step;
      tl.steps.push_back(timeline::Step{facts[e.name].step_number, e.start_ns, e.end_ns});
    } else if (cat == Category::user_annotation) {
      tl.phases.push_back(timeline::Phase{e.name, e.start_ns, e.end_ns, e.tid, false});
    }
    tl.host_ops.push_back(h);
  }
  std::stable_sort(tl.steps.begin(), tl.steps.end(),
                   [](const timeline::Step& a, const timeline::Step& b) { return a.start_ns < b.start_ns; });
  // The raw events are no longer needed; release them before the names move.
  std::vector<RawEvent>().swap(events);
  tl.names = names.take();
}

ImportResult run_import(std::unique_ptr<RawInput> input, const ImportOptions& options) {
  ImportResult result;
  Decoder decoder(std::move(input));
  std::unique_ptr<PipelinedDecoder> pipeline;
  if (options.pipelined_decompression) {
    pipeline = std::make_unique<PipelinedDecoder>(decoder);
    if (pipeline->start_failed()) pipeline.reset();
  }
  ChunkStreambuf buffer(decoder, pipeline.get());
  KinetoSax sax(options, buffer);
  bool parsed = false;
  {
    std::istream stream(&buffer);
    parsed = nlohmann::json::sax_parse(stream, &sax, nlohmann::json::input_format_t::json, true, false);
  }
  const std::uint64_t uncompressed = buffer.position();
  pipeline.reset();  // joins the helper: the decoder's state is ours again

  result.stats.compressed_bytes = decoder.compressed_bytes();
  result.stats.uncompressed_bytes = uncompressed;
  result.stats.gzip = decoder.gzip();
  result.stats.events_seen = sax.events_seen();
  result.stats.fractional_timestamps = sax.fractional_timestamps();

  // A decompression failure explains whatever the JSON parser then tripped on.
  if (!decoder.error().empty()) {
    result.error = (decoder.gzip() ? "gzip: " : "input: ") + decoder.error();
    if (!sax.error().empty()) result.error += " (JSON parser then saw: " + sax.error() + ")";
    return result;
  }
  if (!parsed || !sax.error().empty()) {
    if (uncompressed == 0 && sax.json_error())
      result.error = "empty input: no JSON data";
    else
      result.error = sax.error().empty() ? std::string("JSON parse failed") : sax.error();
    return result;
  }
  if (!sax.saw_trace_events()) {
    result.error = "not a Kineto/Chrome trace: no \"traceEvents\" array in the top-level object";
    return result;
  }
  result.stats.complete_events = sax.events().size();
  build_timeline(sax, options, result);
  result.ok = true;
  return result;
}

template <typename Fn>
ImportResult guarded(Fn&& fn) noexcept {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    ImportResult r;
    r.error = "out of memory while importing the trace";
    return r;
  } catch (const std::exception& ex) {
    ImportResult r;
    r.error = std::string("import failed: ") + ex.what();
    return r;
  } catch (...) {
    ImportResult r;
    r.error = "import failed: unknown error";
    return r;
  }
}

}  // namespace
}  // namespace stepscope::detail

namespace stepscope {

ImportResult import_kineto_trace(const std::string& path, const ImportOptions& options) noexcept {
  return detail::guarded([&] {
    std::FILE* file = std::fopen(path.c_str(), "rb");
    if (file == nullptr) {
      ImportResult r;
      r.error = "cannot open " + path + ": " + std::strerror(errno);
      return r;
    }
    ImportResult r = detail::run_import(std::make_unique<detail::FileInput>(file), options);
    if (!r.ok) r.error = path + ": " + r.error;
    return r;
  });
}

ImportResult import_kineto_trace_from_buffer(std::string_view bytes, const ImportOptions& options) noexcept {
  return detail::guarded(
      [&] { return detail::run_import(std::make_unique<detail::MemoryInput>(bytes), options); });
}

}  // namespace stepscope

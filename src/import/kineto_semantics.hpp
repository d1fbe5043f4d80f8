// What each field of a Kineto / Chrome trace means to the importer, in one
// place. Two parsers drive this code: the exact nlohmann SAX parser and the
// fast scanner (kineto_fast_scanner.hpp). Both hand every value they do not
// skip to the same functions below, in document order, so the two cannot
// drift apart: a value the fast scanner skips is one these functions would
// have ignored. Internal to the importer; included by kineto_reader.cpp only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <iterator>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "import/trace_import.hpp"
#include "timeline/timeline.hpp"

namespace stepscope {
inline namespace v1 {
namespace detail::kineto {

using timeline::NameId;

// Interns strings; views point into a deque, whose elements never move.
class Interner {
 public:
  // Looks the text up first, so a repeated name costs a hash and no allocation.
  NameId intern(std::string_view text) {
    auto found = index_.find(text);
    if (found != index_.end()) return found->second;
    const auto id = static_cast<NameId>(storage_.size());
    storage_.emplace_back(text);
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

// A JSON scalar as either parser saw it. Views are valid only during the call
// they are passed to.
enum class ValueType : std::uint8_t {
  null,
  boolean,
  string,
  number_integer,   // fits int64 (negative, or what nlohmann calls integer)
  number_unsigned,  // non-negative integer, fits uint64
  number_float,
  object,
  array,
  other,  // binary: cannot occur in JSON text
};

inline const char* type_name(ValueType t) {
  constexpr const char* kNames[] = {"null",   "boolean", "string", "number", "number",
                                    "number", "object",  "array",  "number"};
  return kNames[std::min<std::size_t>(static_cast<std::size_t>(t), std::size(kNames) - 1)];
}

struct Scalar {
  explicit Scalar(ValueType t = ValueType::null) : type(t) {}
  ValueType type;
  std::int64_t integer = 0;
  std::uint64_t unsigned_value = 0;
  double floating = 0;
  std::string_view number_text;   // number_float only: the text as written
  std::string_view string_value;  // string only
  // string_value points into a document read whole and stays valid as long
  // as it does (not into a parser's scratch buffer or a moving window).
  bool stable_string = false;
};

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

// The kept events, in fixed-size blocks: growing never copies what is
// already stored, so the peak is the events themselves, not twice their
// size as with a doubling vector.
class EventStore {
 public:
  static constexpr std::size_t kBlockEvents = 4096;  // 288 KiB blocks

  void push_back(const RawEvent& e) {
    if (size_ % kBlockEvents == 0) {
      blocks_.emplace_back();
      blocks_.back().reserve(kBlockEvents);
    }
    blocks_.back().push_back(e);
    ++size_;
  }
  RawEvent& operator[](std::size_t i) { return blocks_[i / kBlockEvents][i % kBlockEvents]; }
  const RawEvent& operator[](std::size_t i) const { return blocks_[i / kBlockEvents][i % kBlockEvents]; }
  std::size_t size() const { return size_; }
  void release() {
    std::vector<std::vector<RawEvent>>().swap(blocks_);
    size_ = 0;
  }

  template <typename Fn>
  void for_each(Fn&& fn) const {
    for (const auto& block : blocks_)
      for (const RawEvent& e : block) fn(e);
  }

 private:
  std::vector<std::vector<RawEvent>> blocks_;
  std::size_t size_ = 0;
};

constexpr double kMaxMicroseconds = 9.0e15;  // ns must fit in int64

// Parses a JSON decimal like "1712195495519695.8" (microseconds) into exact
// integer nanoseconds; falls back to the double for exponent forms.
inline bool microseconds_text_to_ns(const std::string& text, double value, std::int64_t& ns) {
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

inline bool as_int64(const Scalar& s, std::int64_t& out) {
  switch (s.type) {
    case ValueType::number_integer:
      out = s.integer;
      return true;
    case ValueType::number_unsigned:
      // Kineto writes stream -1 as 4294967295 on some versions; int64 holds it.
      if (s.unsigned_value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return false;
      out = static_cast<std::int64_t>(s.unsigned_value);
      return true;
    case ValueType::number_float:
      if (!(std::fabs(s.floating) < 9.2e18)) return false;
      out = static_cast<std::int64_t>(s.floating);
      return true;
    default:
      return false;
  }
}

// A JSON string holding only a decimal integer ("17"), as some legacy
// writers put thread ids.
inline bool decimal_string(std::string_view text, std::int64_t& out) {
  if (text.empty() || text.size() > 18) return false;
  std::int64_t v = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  out = v;
  return true;
}

// The category given to a complete event that has none (legacy traces). Not
// a string any profiler writes: it starts with a NUL byte.
inline constexpr std::string_view kNoCategory{"\0(no cat)", 9};

// Keys, per context.
enum class Key : std::uint8_t {
  other,
  trace_events,
  distributed_info,
  device_properties,
  ph,
  cat,
  name,
  ts,
  dur,
  pid,
  tid,
  args,
  stream,
  correlation,
  device,
  bytes,
  rank,
  world_size,
  backend,
  device_id,
  device_name,
  total_memory,
  compute_major,
  compute_minor,
  sm_count,
};

// Key lookups run once per key of every event, so they compare lengths and
// fixed-size byte blocks (which compile to integer compares) rather than
// calling string comparison.
template <std::size_t N>
inline bool key_is(std::string_view k, const char (&literal)[N]) {
  return k.size() == N - 1 && std::memcmp(k.data(), literal, N - 1) == 0;
}

// The keys read once per document or device: a table (event and args keys,
// read per event, are switched on their length below).
struct KeyName {
  std::string_view name;
  Key key;
};

template <std::size_t N>
Key lookup_key(std::string_view k, const KeyName (&table)[N]) {
  for (const KeyName& entry : table)
    if (entry.name == k) return entry.key;
  return Key::other;
}

inline Key top_key(std::string_view k) {
  static constexpr KeyName kKeys[] = {{"traceEvents", Key::trace_events},
                                      {"distributedInfo", Key::distributed_info},
                                      {"deviceProperties", Key::device_properties}};
  return lookup_key(k, kKeys);
}

inline Key event_key(std::string_view k) {
  switch (k.size()) {
    case 2:
      if (k[0] == 't' && k[1] == 's') return Key::ts;
      if (k[0] == 'p' && k[1] == 'h') return Key::ph;
      return Key::other;
    case 3:
      // The thread is "tid" in the Chrome trace format and in every Kineto
      // trace (tests/import/import_test.cpp checks the real ones).
      if (key_is(k, "cat")) return Key::cat;
      if (key_is(k, "dur")) return Key::dur;
      if (key_is(k, "pid")) return Key::pid;
      if (key_is(k, "tid")) return Key::tid;
      return Key::other;
    case 4:
      if (key_is(k, "name")) return Key::name;
      if (key_is(k, "args")) return Key::args;
      return Key::other;
    default:
      return Key::other;
  }
}

inline Key args_key(std::string_view k) {
  switch (k.size()) {
    case 5:
      return key_is(k, "bytes") ? Key::bytes : Key::other;
    case 6:
      if (key_is(k, "stream")) return Key::stream;
      if (key_is(k, "device")) return Key::device;
      return Key::other;
    case 11:
      return key_is(k, "correlation") ? Key::correlation : Key::other;
    default:
      return Key::other;
  }
}

inline Key distributed_key(std::string_view k) {
  static constexpr KeyName kKeys[] = {{"rank", Key::rank}, {"world_size", Key::world_size}, {"backend", Key::backend}};
  return lookup_key(k, kKeys);
}

inline Key device_key(std::string_view k) {
  static constexpr KeyName kKeys[] = {{"id", Key::device_id},
                                      {"name", Key::device_name},
                                      {"totalGlobalMem", Key::total_memory},
                                      {"computeMajor", Key::compute_major},
                                      {"computeMinor", Key::compute_minor},
                                      {"numSms", Key::sm_count}};
  return lookup_key(k, kKeys);
}

// The fields of one traceEvents element that the model uses.
struct EventFields {
  bool has_ph = false, is_complete = false;
  bool has_cat = false;
  // Views of the document when its text stays put (Scalar::stable_string),
  // else of the copies below: most names are never copied when read whole.
  std::string_view cat, name;
  std::string cat_copy, name_copy;
  NumberValue ts, dur;
  std::int64_t pid = -1, tid = -1, stream = -1, correlation = -1, bytes = -1;
  std::int32_t device = -1;
  const char* wrong_field = nullptr;
  const char* wrong_type = nullptr;
  const char* wrong_expected = nullptr;

  // Back to the state of a fresh event, keeping string capacity.
  void reset() {
    has_ph = is_complete = has_cat = false;
    cat = name = std::string_view();
    ts.kind = dur.kind = NumberValue::Kind::missing;
    ts.text.clear();
    dur.text.clear();
    pid = tid = stream = correlation = bytes = -1;
    device = -1;
    wrong_field = wrong_type = wrong_expected = nullptr;
  }
};

// What finish_event decided.
enum class EventVerdict : std::uint8_t {
  kept,          // a complete event became a RawEvent
  ignored,       // not a complete event the model uses
  wrong_field,   // e.wrong_field / wrong_type / wrong_expected say which
  wrong_number,  // ts or dur of a complete event is not a number
  missing_ts,
  out_of_range,  // ts/dur do not fit int64 nanoseconds
};

// The state both parsers build: kept events, interned names, trace metadata.
class TraceBuilder {
 public:
  explicit TraceBuilder(const ImportOptions& options) : options_(options) {}

  // --- values inside one event ----------------------------------------------
  void wrong(EventFields& e, const char* field, const char* got, const char* expected) const {
    if (e.wrong_field == nullptr) {
      e.wrong_field = field;
      e.wrong_type = got;
      e.wrong_expected = expected;
    }
  }

  void set_number(NumberValue& n, const Scalar& s) {
    switch (s.type) {
      case ValueType::number_integer:
      case ValueType::number_unsigned:
        if (!as_int64(s, n.integer)) {
          n.kind = NumberValue::Kind::wrong_type;
          n.wrong_type = "out-of-range number";
          return;
        }
        n.kind = NumberValue::Kind::integer;
        return;
      case ValueType::number_float:
        n.kind = NumberValue::Kind::floating;
        n.floating = s.floating;
        if (!options_.hta_rounding) n.text.assign(s.number_text);
        fractional_ = true;
        return;
      default:
        n.kind = NumberValue::Kind::wrong_type;
        n.wrong_type = type_name(s.type);
        return;
    }
  }

  // A string value that must outlive the parser's call: the view itself
  // when the document stays put, else a copy in `copy`.
  static std::string_view keep(const Scalar& s, std::string& copy) {
    if (s.stable_string) return s.string_value;
    copy.assign(s.string_value);
    return copy;
  }

  // A scalar under an event-level key.
  void event_scalar(EventFields& e, Key key, const Scalar& s) {
    const bool is_string = s.type == ValueType::string;
    switch (key) {
      case Key::ph:
        if (!is_string) {
          wrong(e, "ph", type_name(s.type), "a string");
          return;
        }
        e.has_ph = true;
        e.is_complete = s.string_value.size() == 1 && s.string_value[0] == 'X';
        return;
      case Key::cat:
        if (s.type == ValueType::null) return;  // HTA drops events with null cat
        if (!is_string) {
          wrong(e, "cat", type_name(s.type), "a string");
          return;
        }
        e.has_cat = true;
        e.cat = keep(s, e.cat_copy);
        return;
      case Key::name:
        if (!is_string) {
          wrong(e, "name", type_name(s.type), "a string");
          return;
        }
        e.name = keep(s, e.name_copy);
        return;
      case Key::ts:
        set_number(e.ts, s);
        return;
      case Key::dur:
        if (s.type == ValueType::null) return;  // treated as missing, as HTA's dropna
        set_number(e.dur, s);
        return;
      case Key::pid:
      case Key::tid: {
        // Kineto sometimes labels rows with strings ("Spans", "stream 7"): keep -1.
        // Legacy traces write pid "CPU functions" and, from some writers, the
        // thread as a decimal string ("tid": "1"): that one is a number.
        std::int64_t v = -1;
        const bool thread_string = key == Key::tid && is_string && decimal_string(s.string_value, v);
        if (!thread_string && !as_int64(s, v)) v = -1;
        (key == Key::pid ? e.pid : e.tid) = v;
        return;
      }
      default:
        return;  // non-object args: HTA falls back to defaults
    }
  }

  // A container under an event-level key. True: descend (args object);
  // false: the parser skips the container.
  bool event_container(EventFields& e, Key key, bool is_object) const {
    if (key == Key::args && is_object) return true;
    const char* got = is_object ? "object" : "array";
    if (key == Key::ts || key == Key::dur) wrong(e, key == Key::ts ? "ts" : "dur", got, "a number");
    if (key == Key::ph || key == Key::cat || key == Key::name)
      wrong(e, key == Key::ph ? "ph" : key == Key::cat ? "cat" : "name", got, "a string");
    return false;
  }

  // A scalar inside args. Containers inside args are skipped.
  static void args_scalar(EventFields& e, Key key, const Scalar& s) {
    std::int64_t v = -1;
    // Like HTA (pd.to_numeric(errors="coerce")), a non-numeric arg becomes -1.
    if (!as_int64(s, v)) v = -1;
    switch (key) {
      case Key::stream:
        e.stream = v;
        break;
      case Key::correlation:
        e.correlation = v;
        break;
      case Key::device:
        e.device = static_cast<std::int32_t>(v);
        break;
      case Key::bytes:
        e.bytes = v;
        break;
      default:
        break;
    }
  }

  // The end of one traceEvents element.
  EventVerdict finish_event(const EventFields& e) {
    if (e.wrong_field != nullptr) {
      // Only complete events feed the model; other phases may carry odd fields.
      if (e.is_complete || !e.has_ph || std::string_view(e.wrong_field) == "ph") return EventVerdict::wrong_field;
      return EventVerdict::ignored;
    }
    if (e.ts.kind == NumberValue::Kind::wrong_type || e.dur.kind == NumberValue::Kind::wrong_type)
      return e.is_complete ? EventVerdict::wrong_number : EventVerdict::ignored;
    if (!e.is_complete) return EventVerdict::ignored;
    // HTA drops rows without dur or cat, and the "Trace" summary span. An
    // event without cat is kept under kNoCategory: the legacy (pre-Kineto)
    // trace writes none at all, and build_timeline drops them again when the
    // trace has categories, as HTA does.
    if (e.dur.kind == NumberValue::Kind::missing || (e.has_cat && key_is(e.cat, "Trace"))) return EventVerdict::ignored;
    if (e.ts.kind == NumberValue::Kind::missing) return EventVerdict::missing_ts;

    RawEvent raw{};
    if (!convert_times(e, raw.start_ns, raw.end_ns)) return EventVerdict::out_of_range;
    raw.pid = e.pid;
    raw.tid = e.tid;
    raw.stream = e.stream;
    raw.correlation = e.correlation;
    raw.bytes = e.bytes;
    raw.device = e.device;
    raw.name = names_.intern(e.name);
    raw.category = categories_.intern(e.has_cat ? e.cat : kNoCategory);
    events_.push_back(raw);
    return EventVerdict::kept;
  }

  // --- trace metadata --------------------------------------------------------
  // A scalar inside distributedInfo; false when rank/world_size is unusable
  // (error_field then names it).
  bool distributed_scalar(Key key, const Scalar& s, const char*& error_field) {
    std::int64_t v = 0;
    if (key == Key::rank || key == Key::world_size) {
      if (!as_int64(s, v) || v < 0 || v > std::numeric_limits<int>::max()) {
        error_field = key == Key::rank ? "rank" : "world_size";
        return false;
      }
      (key == Key::rank ? meta_.rank : meta_.world_size) = static_cast<int>(v);
      meta_.has_distributed_info = true;
    } else if (key == Key::backend && s.type == ValueType::string) {
      meta_.distributed_backend.assign(s.string_value);
    }
    return true;
  }

  // One deviceProperties entry; false past the first kMaxDevices (a machine
  // has a few; a huge or endless array must not grow memory without bound).
  static constexpr std::size_t kMaxDevices = 1024;
  bool begin_device() {
    if (meta_.devices.size() >= kMaxDevices) return false;
    meta_.devices.emplace_back();
    return true;
  }

  // A scalar inside one deviceProperties entry.
  void device_scalar(Key key, const Scalar& s) {
    auto& d = meta_.devices.back();
    if (key == Key::device_name) {
      if (s.type == ValueType::string) d.name.assign(s.string_value);
      return;
    }
    std::int64_t v = -1;
    if (!as_int64(s, v)) v = -1;
    switch (key) {
      case Key::device_id:
        d.id = static_cast<int>(v);
        break;
      case Key::total_memory:
        d.total_memory_bytes = v;
        break;
      case Key::compute_major:
        d.compute_major = static_cast<int>(v);
        break;
      case Key::compute_minor:
        d.compute_minor = static_cast<int>(v);
        break;
      case Key::sm_count:
        d.multiprocessor_count = static_cast<int>(v);
        break;
      default:
        break;
    }
  }

  // --- two builders, one document ----------------------------------------------
  // Appends what `later` built from the rest of the document (a split parse,
  // kineto_fast_scanner.hpp), leaving it empty. Names are interned in the
  // order `later` first met them, so the ids come out as one builder reading
  // the whole document would have given them. `later` saw no trace metadata
  // (its scanner gives up on any), so meta() stays this builder's.
  void append(TraceBuilder& later) {
    std::vector<NameId> name_ids(later.names_.size());
    for (NameId i = 0; i < name_ids.size(); ++i) name_ids[i] = names_.intern(later.names_.text(i));
    std::vector<NameId> category_ids(later.categories_.size());
    for (NameId i = 0; i < category_ids.size(); ++i) category_ids[i] = categories_.intern(later.categories_.text(i));
    later.events_.for_each([&](const RawEvent& e) {
      RawEvent moved = e;
      moved.name = name_ids[e.name];
      moved.category = category_ids[e.category];
      events_.push_back(moved);
    });
    later.events_.release();
    fractional_ = fractional_ || later.fractional_;
  }

  // --- results ---------------------------------------------------------------
  EventStore& events() { return events_; }
  const EventStore& events() const { return events_; }
  Interner& names() { return names_; }
  Interner& categories() { return categories_; }
  const Interner& names() const { return names_; }
  const Interner& categories() const { return categories_; }
  timeline::Timeline& meta() { return meta_; }
  bool fractional_timestamps() const { return fractional_; }
  const ImportOptions& options() const { return options_; }

 private:
  // HTA's rounding works on float64 microseconds: start = ceil(ts),
  // end = floor(ts + dur). Doing the same double arithmetic reproduces its
  // integer microseconds bit for bit; integer inputs are exact either way.
  bool convert_times(const EventFields& e, std::int64_t& start_ns, std::int64_t& end_ns) const {
    const bool both_integer = e.ts.kind == NumberValue::Kind::integer && e.dur.kind == NumberValue::Kind::integer;
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
  EventStore events_;
  Interner names_;
  Interner categories_;
  timeline::Timeline meta_;
  bool fractional_ = false;
};

}  // namespace detail::kineto
}  // namespace v1
}  // namespace stepscope

// PyTorch profiler / Kineto Chrome-trace reader. Two parsers fill one
// TraceBuilder (kineto_semantics.hpp) with one small record per complete
// ("X") event: the fast scanner (kineto_fast_scanner.hpp) first, and, for any
// input it does not handle, nlohmann's SAX parser from the start, which is the
// reference and words every error. A final pass (kineto_timeline.cpp)
// applies HTA's filters and builds the Timeline.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <istream>
#include <new>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "import/byte_source.hpp"
#include "import/kineto_fast_scanner.hpp"
#include "import/kineto_reader_internal.hpp"
#include "import/kineto_semantics.hpp"
#include "import/kineto_timeline.hpp"
#include "import/trace_import.hpp"
#include "import/worker.hpp"

namespace stepscope {
inline namespace v1 {
namespace detail {
namespace {

using kineto::build_timeline;
using kineto::EventFields;
using kineto::EventVerdict;
using kineto::Key;
using kineto::NumberValue;
using kineto::Scalar;
using kineto::TraceBuilder;
using kineto::ValueType;

// The exact parser: nlohmann's SAX events mapped onto the shared semantics.
// Every error message (with byte offsets and event indices) comes from here.
class KinetoSax {
 public:
  using json = nlohmann::json;
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  KinetoSax(const ImportOptions& options, const ChunkStreambuf& position)
      : options_(options), position_(position), builder_(options) {}

  // --- SAX interface -------------------------------------------------------
  bool null() { return scalar(Scalar{ValueType::null}); }
  bool boolean(bool) { return scalar(Scalar{ValueType::boolean}); }
  bool number_integer(number_integer_t v) {
    Scalar s{ValueType::number_integer};
    s.integer = v;
    return scalar(s);
  }
  bool number_unsigned(number_unsigned_t v) {
    Scalar s{ValueType::number_unsigned};
    s.unsigned_value = v;
    return scalar(s);
  }
  bool number_float(number_float_t v, const string_t& text) {
    Scalar s{ValueType::number_float};
    s.floating = v;
    s.number_text = text;
    return scalar(s);
  }
  bool string(string_t& v) {
    Scalar s{ValueType::string};
    s.string_value = v;
    return scalar(s);
  }
  bool binary(binary_t&) { return scalar(Scalar{ValueType::other}); }
  bool start_object(std::size_t) { return start_container(true); }
  bool start_array(std::size_t) { return start_container(false); }
  bool end_object() { return end_container(); }
  bool end_array() { return end_container(); }
  bool key(string_t& k) {
    if (skip_depth_ > 0) return true;
    key_ = Key::other;
    switch (context()) {
      case Context::top:
        key_ = kineto::top_key(k);
        break;
      case Context::event:
        key_ = kineto::event_key(k);
        if (position_.position() - event_start_ > options_.max_event_bytes) {
          return fail("event #" + std::to_string(event_index_) + " is larger than " +
                      std::to_string(options_.max_event_bytes) + " bytes");
        }
        break;
      case Context::args:
        key_ = kineto::args_key(k);
        break;
      case Context::distributed_info:
        key_ = kineto::distributed_key(k);
        break;
      case Context::device:
        key_ = kineto::device_key(k);
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
      error_ = "invalid or truncated JSON at byte offset " + std::to_string(position) + where() + ": " + what;
      json_error_ = true;
    }
    return false;
  }

  // --- results -------------------------------------------------------------
  const std::string& error() const { return error_; }
  bool json_error() const { return json_error_; }
  bool saw_trace_events() const { return saw_trace_events_; }
  std::uint64_t events_seen() const { return event_index_; }
  TraceBuilder& builder() { return builder_; }

 private:
  enum class Context : std::uint8_t { none, top, events, event, args, distributed_info, devices, device };

  Context context() const { return stack_.empty() ? Context::none : stack_.back(); }

  std::string where() const {
    if (in_event_) return " (in traceEvents[" + std::to_string(event_index_) + "])";
    return "";
  }

  bool fail(std::string message) {
    if (error_.empty()) error_ = std::move(message);
    return false;
  }

  bool scalar(const Scalar& s) {
    if (skip_depth_ > 0) return true;
    switch (context()) {
      case Context::none:
        return fail("the trace is a bare JSON " + std::string(kineto::type_name(s.type)) +
                    "; expected an object with \"traceEvents\"");
      case Context::top:
        if (key_ == Key::trace_events)
          return fail(std::string("\"traceEvents\" must be an array, got ") + kineto::type_name(s.type));
        return true;
      case Context::events:
        return fail("traceEvents[" + std::to_string(event_index_++) + "] must be an object, got " +
                    kineto::type_name(s.type) + " (byte offset " + std::to_string(position_.position()) + ")");
      case Context::event:
        builder_.event_scalar(event_, key_, s);
        return true;
      case Context::args:
        TraceBuilder::args_scalar(event_, key_, s);
        return true;
      case Context::distributed_info: {
        const char* field = nullptr;
        if (!builder_.distributed_scalar(key_, s, field))
          return fail(std::string("distributedInfo.") + field + " must be a non-negative integer, got " +
                      kineto::type_name(s.type));
        return true;
      }
      case Context::device:
        builder_.device_scalar(key_, s);
        return true;
      case Context::devices:
        return true;  // tolerate junk entries in deviceProperties
    }
    return true;
  }

  bool start_container(bool is_object) {
    if (skip_depth_ > 0) {
      ++skip_depth_;
      return true;
    }
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
        if (event_index_ >= options_.max_events) return fail(too_many_events(options_.max_events));
        if (!is_object)
          return fail("traceEvents[" + std::to_string(event_index_) + "] must be an object, got array" +
                      " (byte offset " + std::to_string(position_.position()) + ")");
        event_.reset();
        in_event_ = true;
        event_start_ = position_.position();
        stack_.push_back(Context::event);
        return true;
      case Context::event:
        if (builder_.event_container(event_, key_, is_object)) {
          stack_.push_back(Context::args);
          return true;
        }
        skip_depth_ = 1;
        return true;
      case Context::devices:
        if (is_object && builder_.begin_device()) {
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
    const EventFields& e = event_;
    switch (builder_.finish_event(e)) {
      case EventVerdict::kept:
      case EventVerdict::ignored:
        return true;
      case EventVerdict::wrong_field:
        return fail(event_label() + ": field \"" + e.wrong_field + "\" must be " + e.wrong_expected + ", got " +
                    e.wrong_type);
      case EventVerdict::wrong_number: {
        const bool ts_bad = e.ts.kind == NumberValue::Kind::wrong_type;
        return fail(event_label() + ": field \"" + (ts_bad ? "ts" : "dur") + "\" must be a number, got " +
                    (ts_bad ? e.ts.wrong_type : e.dur.wrong_type));
      }
      case EventVerdict::missing_ts:
        return fail(event_label() + ": complete event has no \"ts\"");
      case EventVerdict::out_of_range:
        return fail(event_label() + ": \"ts\"/\"dur\" out of range");
    }
    return true;
  }

  const ImportOptions& options_;
  const ChunkStreambuf& position_;
  TraceBuilder builder_;
  std::vector<Context> stack_;
  Key key_ = Key::other;
  int skip_depth_ = 0;
  bool in_event_ = false;
  bool saw_trace_events_ = false;
  bool json_error_ = false;
  std::uint64_t event_index_ = 0;
  std::uint64_t event_start_ = 0;
  EventFields event_;
  std::string error_;
};

// The decoder's output bound, and its helper thread when decompression is
// pipelined (none when it cannot start: the decoder then runs inline).
std::unique_ptr<PipelinedDecoder> prepare_decoder(Decoder& decoder, const ImportOptions& options) {
  decoder.limit_output(options.max_json_bytes, too_many_bytes(options.max_json_bytes));
  if (!options.pipelined_decompression) return nullptr;
  auto pipeline = std::make_unique<PipelinedDecoder>(decoder);
  if (pipeline->start_failed()) pipeline.reset();
  return pipeline;
}

// The exact path: nlohmann's SAX parser. Slow (its lexer copies every byte
// into token buffers) but the reference, and the source of every error message.
ImportResult run_exact(std::unique_ptr<RawInput> input, const ImportOptions& options) {
  ImportResult result;
  Decoder decoder(std::move(input));
  std::unique_ptr<PipelinedDecoder> pipeline = prepare_decoder(decoder, options);
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
  result.stats.fractional_timestamps = sax.builder().fractional_timestamps();

  if (decoder.over_limit()) {
    result.error = decoder.error();
    return result;
  }
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
  result.stats.complete_events = sax.builder().events().size();
  build_timeline(sax.builder(), options, result);
  result.ok = true;
  return result;
}

// The fast path, streaming: kineto::FastScanner over a ChunkWindow fed by
// the Decoder (on a helper thread when pipelined). True with the stats filled
// when it handled the whole input; false with `reason` otherwise.
bool scan_stream(std::unique_ptr<RawInput> input, const ImportOptions& options, TraceBuilder& builder,
                 ImportResult& result, std::string& reason) {
  Decoder decoder(std::move(input));
  std::unique_ptr<PipelinedDecoder> pipeline = prepare_decoder(decoder, options);
  ChunkWindow window(decoder, pipeline.get());
  kineto::FastScanner scanner(options, window, builder);
  const bool scanned = scanner.run();
  pipeline.reset();  // joins the helper: the decoder's state is ours again
  // A limit is the answer: the exact parser would only reach it again (and
  // an endless stream behind a FIFO cannot be read from its start again).
  if (decoder.over_limit()) result.error = decoder.error();
  if (scanner.over_limit()) result.error = too_many_events(options.max_events);
  if (!result.error.empty()) {
    reason = "over a limit";
    return false;
  }
  if (!scanned) {
    reason = scanner.give_up_reason() != nullptr ? scanner.give_up_reason() : "unknown";
    return false;
  }
  // The exact path words these failures; only a clean, complete trace is ours.
  if (!decoder.error().empty()) {
    reason = "the decoder failed";
    return false;
  }
  if (!scanner.saw_trace_events()) {
    reason = "no traceEvents";
    return false;
  }
  result.stats.compressed_bytes = decoder.compressed_bytes();
  result.stats.uncompressed_bytes = scanner.position();
  result.stats.gzip = decoder.gzip();
  result.stats.events_seen = scanner.events_seen();
  return true;
}

// Where the helper thread of a split parse starts: the '{' of the first
// "}" "," "{" (JSON whitespace allowed between them) at or after `from`,
// which is where one event of a traceEvents array ends and the next begins
// when it is not inside a string or a nested value; the main scanner checks
// which (kineto::SplitHandoff). Null when there is none nearby.
const char* find_split_point(const char* from, const char* end) {
  constexpr std::ptrdiff_t kSearchBytes = 4 << 20;
  const char* const stop = end - from > kSearchBytes ? from + kSearchBytes : end;
  const auto is_blank = [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; };
  for (const char* q = from; q < stop;) {
    q = static_cast<const char*>(std::memchr(q, '}', static_cast<std::size_t>(stop - q)));
    if (q == nullptr) return nullptr;
    const char* r = q + 1;
    while (r < end && is_blank(*r)) ++r;
    if (r < end && *r == ',') {
      ++r;
      while (r < end && is_blank(*r)) ++r;
      if (r < end && *r == '{') return r;
    }
    ++q;
  }
  return nullptr;
}

// The helper of a split parse: its own scanner and builder over the same
// document, from the split point to the end, on the worker's thread.
class SplitHelper final : public kineto::SplitHandoff {
 public:
  SplitHelper(const ImportOptions& options, const WholeDocument& document, Worker& worker)
      : window_(document), builder_(options), scanner_(options, window_, builder_), worker_(worker) {}
  ~SplitHelper() override { abandon(); }
  SplitHelper(const SplitHelper&) = delete;
  SplitHelper& operator=(const SplitHelper&) = delete;

  // False when the worker cannot take it (the caller then parses alone).
  bool post(const char* start, bool object_document) {
    return worker_.post([this, start, object_document] {
      try {
        succeeded_ = scanner_.run_from_split(start, object_document, cancel_);
      } catch (...) {
        succeeded_ = false;  // bad_alloc: the main scanner carries on alone
      }
    });
  }
  bool take_over() override {
    join();
    return succeeded_;
  }
  void abandon() override {
    cancel_.store(true, std::memory_order_relaxed);
    join();
  }
  TraceBuilder& builder() { return builder_; }
  const kineto::FastScanner& scanner() const { return scanner_; }

 private:
  void join() { worker_.wait(); }  // at once when nothing was posted

  ChunkWindow window_;
  TraceBuilder builder_;
  kineto::FastScanner scanner_;
  Worker& worker_;
  std::atomic<bool> cancel_{false};
  bool succeeded_ = false;  // written by the worker, read after join()
};

// The fast path over a document read whole: one scanner, or two when it is
// large enough and a second thread is allowed (see kineto::SplitHandoff).
bool scan_document(const WholeDocument& document, const ImportOptions& options, const ImportTuning& tuning,
                   Worker& worker, TraceBuilder& builder, ImportResult& result, std::string& reason,
                   ImportDiagnostics* diagnostics) {
  if (document.size() > options.max_json_bytes) {
    result.error = too_many_bytes(options.max_json_bytes);
    reason = "over a limit";
    return false;
  }
  ChunkWindow window(document);
  kineto::FastScanner scanner(options, window, builder);
  std::unique_ptr<SplitHelper> helper;
  if (options.pipelined_decompression && document.size() >= tuning.min_split_bytes && document.size() > 0) {
    const char* first = document.begin();
    while (first < document.end() && (*first == ' ' || *first == '\n' || *first == '\r' || *first == '\t')) ++first;
    const std::size_t from = tuning.split_search_from >= 0
                                 ? std::min(document.size(), static_cast<std::size_t>(tuning.split_search_from))
                                 : document.size() / 2;
    const char* start = find_split_point(document.begin() + from, document.end());
    if (start != nullptr && first < start && (*first == '{' || *first == '[')) {
      helper = std::make_unique<SplitHelper>(options, document, worker);
      if (helper->post(start, *first == '{'))
        scanner.set_split(window.offset_of(start), helper.get());
      else
        helper.reset();  // no thread: one scanner does it all
    }
  }
  const bool scanned = scanner.run();
  const bool handed_over = scanner.handed_over();
  if (helper != nullptr && !handed_over) helper->abandon();
  const std::uint64_t events = scanner.events_seen() + (handed_over ? helper->scanner().events_seen() : 0);
  if (scanner.over_limit() || events > options.max_events) {
    result.error = too_many_events(options.max_events);
    reason = "over a limit";
    return false;
  }
  if (!scanned) {
    reason = scanner.give_up_reason() != nullptr ? scanner.give_up_reason() : "unknown";
    return false;
  }
  if (!scanner.saw_trace_events()) {
    reason = "no traceEvents";
    return false;
  }
  result.stats.compressed_bytes = document.compressed_bytes();
  result.stats.gzip = document.gzip();
  result.stats.uncompressed_bytes = handed_over ? helper->scanner().position() : scanner.position();
  result.stats.events_seen = events;
  if (handed_over) builder.append(helper->builder());
  if (diagnostics != nullptr) {
    diagnostics->whole_document = true;
    diagnostics->split_parse = handed_over;
  }
  return true;
}

// The fast path: the document read whole when it is small enough, else
// streamed. True with `result` filled when it handled the whole input; false
// with `reason` otherwise.
bool run_fast(std::unique_ptr<RawInput> input, const ImportOptions& options, const ImportTuning& tuning,
              ImportResult& result, std::string& reason, ImportDiagnostics* diagnostics) {
  TraceBuilder builder(options);
  Worker own_worker;
  Worker& worker = tuning.worker != nullptr ? *tuning.worker : own_worker;
  {
    // Scoped: the document's (or decoder's and window's) buffers are freed
    // before the timeline is built.
    WholeDocumentLoader loader;
    WholeDocument document;
    auto outcome = WholeDocumentLoader::Outcome::streamed;
    // A document large enough to split: the worker starts now, while this
    // thread fills it (see worker.hpp).
    const auto before_fill = [&](std::size_t bytes) {
      if (options.pipelined_decompression && bytes >= tuning.min_split_bytes) worker.start();
    };
    if (options.max_in_memory_json_bytes > 0)
      outcome = loader.load(*input, options.max_in_memory_json_bytes, document, before_fill);
    switch (outcome) {
      case WholeDocumentLoader::Outcome::loaded:
        if (!scan_document(document, options, tuning, worker, builder, result, reason, diagnostics)) return false;
        break;
      case WholeDocumentLoader::Outcome::failed:
        reason = "reading the input failed";
        return false;
      case WholeDocumentLoader::Outcome::fallback:
        input = loader.fallback_input();
        [[fallthrough]];
      case WholeDocumentLoader::Outcome::streamed:
        if (!scan_stream(std::move(input), options, builder, result, reason)) return false;
        break;
    }
  }
  result.stats.fractional_timestamps = builder.fractional_timestamps();
  result.stats.complete_events = builder.events().size();
  build_timeline(builder, options, result);
  result.ok = true;
  return true;
}

// Opens the input again when the fast path hands over to the exact one.
using ReopenInput = std::function<std::unique_ptr<RawInput>(std::string& error)>;

ImportResult run_import(std::unique_ptr<RawInput> input, const ReopenInput& reopen, const ImportOptions& options,
                        KinetoParser parser, ImportDiagnostics* diagnostics, const ImportTuning& tuning) {
  if (parser != KinetoParser::exact) {
    ImportResult result;
    std::string reason;
    if (run_fast(std::move(input), options, tuning, result, reason, diagnostics)) {
      if (diagnostics != nullptr) diagnostics->fast_path_used = true;
      return result;
    }
    if (diagnostics != nullptr) diagnostics->fast_path_gave_up = reason;
    if (!result.error.empty()) return result;  // a limit of ImportOptions: final
    if (parser == KinetoParser::fast_only) {
      ImportResult failed;
      failed.error = "fast path gave up: " + reason;
      return failed;
    }
    std::string error;
    input = reopen(error);
    if (input == nullptr) {
      ImportResult failed;
      failed.error = error;
      return failed;
    }
  }
  return run_exact(std::move(input), options);
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
}  // namespace detail
}  // namespace v1
}  // namespace stepscope

namespace stepscope {
inline namespace v1 {
namespace detail {

ImportResult import_kineto_trace_with(const std::string& path, const ImportOptions& options, KinetoParser parser,
                                      ImportDiagnostics* diagnostics, const ImportTuning& tuning) noexcept {
  return guarded([&] {
    std::FILE* file = std::fopen(path.c_str(), "rb");
    if (file == nullptr) {
      ImportResult r;
      r.error = "cannot open " + path + ": " + std::strerror(errno);
      return r;
    }
    const ReopenInput reopen = [&path](std::string& error) -> std::unique_ptr<RawInput> {
      std::FILE* again = std::fopen(path.c_str(), "rb");
      if (again == nullptr) {
        error = "cannot open " + path + " again: " + std::strerror(errno);
        return nullptr;
      }
      return std::make_unique<FileInput>(again);
    };
    ImportResult r = run_import(std::make_unique<FileInput>(file), reopen, options, parser, diagnostics, tuning);
    if (!r.ok) r.error = path + ": " + r.error;
    return r;
  });
}

ImportResult import_kineto_buffer_with(std::string_view bytes, const ImportOptions& options, KinetoParser parser,
                                       ImportDiagnostics* diagnostics, const ImportTuning& tuning) noexcept {
  return guarded([&] {
    const ReopenInput reopen = [bytes](std::string&) -> std::unique_ptr<RawInput> {
      return std::make_unique<MemoryInput>(bytes);
    };
    return run_import(std::make_unique<MemoryInput>(bytes), reopen, options, parser, diagnostics, tuning);
  });
}

std::string too_many_events(std::uint64_t max_events) {
  return "the trace has more than " + std::to_string(max_events) +
         " events: the import stops there to bound its memory and time (ImportOptions::max_events; "
         "`stepscope analyze --max-events N` raises it)";
}

std::string too_many_bytes(std::uint64_t max_json_bytes) {
  return "the trace has more than " + std::to_string(max_json_bytes) +
         " bytes of JSON: the import stops there to bound its time (ImportOptions::max_json_bytes)";
}

}  // namespace detail

ImportResult import_kineto_trace(const std::string& path, const ImportOptions& options) noexcept {
  return detail::import_kineto_trace_with(path, options, detail::KinetoParser::automatic);
}

ImportResult import_kineto_trace_from_buffer(std::string_view bytes, const ImportOptions& options) noexcept {
  return detail::import_kineto_buffer_with(bytes, options, detail::KinetoParser::automatic);
}

}  // namespace v1
}  // namespace stepscope

// simdjson's On-Demand API over the V100 trace, for comparison with the
// importer's fast scanner (BM_V100ScanFastScannerOnly in import_bench.cpp):
// the same inflated document, the same fields, one thread. Part of
// import_bench, built only when CMake finds simdjson (Debian's
// libsimdjson-dev, optional). This file alone is compiled with
// -march=haswell: On-Demand is inlined and picks its SIMD kernel at compile
// time (without the flag it is simdjson's scalar "fallback" kernel), and
// haswell (AVX2) rather than icelake (AVX-512) keeps it runnable under
// valgrind. docs/benchmarks-import.md, "simdjson On-Demand, measured".
#include <benchmark/benchmark.h>

#if defined(STEPSCOPE_BENCH_SIMDJSON) && __has_include(<simdjson.h>)
#include <simdjson.h>

#include <cstdint>
#include <string_view>
#include <vector>

#include "import/byte_source.hpp"
#include "import/kineto_semantics.hpp"

namespace import_bench {
const stepscope::detail::WholeDocument* v100_document(benchmark::State& state);
void count_document(benchmark::State& state, std::size_t bytes, std::size_t kept_events);
}  // namespace import_bench

namespace {

namespace kin = stepscope::detail::kineto;
namespace od = simdjson::ondemand;
// The kernel this file's On-Demand code was compiled for (simdjson::builtin_implementation() would
// name the shared library's, built without -march).
#define STEPSCOPE_BENCH_STRINGIFY2(x) #x
#define STEPSCOPE_BENCH_STRINGIFY(x) STEPSCOPE_BENCH_STRINGIFY2(x)
constexpr const char* kOnDemandKernel = STEPSCOPE_BENCH_STRINGIFY(SIMDJSON_BUILTIN_IMPLEMENTATION);
static_assert(stepscope::detail::WholeDocument::kPadding >= simdjson::SIMDJSON_PADDING,
              "simdjson reads up to SIMDJSON_PADDING bytes past the JSON");

// A key as written between its quotes; empty when it has escapes (the caller then unescapes it).
std::string_view raw_key(od::raw_json_string key) {
  const char* const begin = key.raw();
  const char* q = begin;
  while (*q != '"') {
    if (*q == '\\') return {};
    ++q;
  }
  return {begin, static_cast<std::size_t>(q - begin)};
}

std::string_view field_key(od::field& field, simdjson::error_code& error) {
  std::string_view key = raw_key(field.key());
  if (key.empty()) error = field.unescaped_key().get(key);
  return key;
}

// What one event yields when read into a plain struct (mode 0).
struct SimdEvent {
  std::string_view ph, cat, name;
  double ts = 0, dur = 0;
  std::int64_t pid = -1, tid = -1, stream = -1, correlation = -1, device = -1, bytes = -1;
};

std::int64_t as_integer(od::value value) {
  std::int64_t v = -1;
  if (value.get_int64().get(v) != simdjson::SUCCESS) v = -1;
  return v;
}

// A scalar for the TraceBuilder, typed as nlohmann types it (non-negative integers unsigned); strings
// are decoded only when wanted. false on a simdjson error.
simdjson::error_code read_scalar(od::value value, od::json_type type, bool want_string, kin::Scalar& out) {
  using kin::ValueType;
  switch (type) {
    case od::json_type::string:
      out.type = ValueType::string;
      if (!want_string) return simdjson::SUCCESS;
      out.stable_string = true;  // the parser's string buffer outlives the event
      return value.get_string().get(out.string_value);
    case od::json_type::number: {
      od::number_type kind{};
      if (auto e = value.get_number_type().get(kind)) return e;
      if (kind == od::number_type::floating_point_number) {
        out.type = ValueType::number_float;
        if (auto e = value.get_double().get(out.floating)) return e;
        std::string_view text = value.raw_json_token();
        while (!text.empty() &&
               (text.back() == ' ' || text.back() == '\n' || text.back() == '\r' || text.back() == '\t'))
          text.remove_suffix(1);
        out.number_text = text;
        return simdjson::SUCCESS;
      }
      if (kind == od::number_type::unsigned_integer) {
        out.type = ValueType::number_unsigned;
        return value.get_uint64().get(out.unsigned_value);
      }
      std::int64_t v = 0;
      if (auto e = value.get_int64().get(v)) return e;
      if (v < 0) {
        out.type = ValueType::number_integer;
        out.integer = v;
      } else {
        out.type = ValueType::number_unsigned;
        out.unsigned_value = static_cast<std::uint64_t>(v);
      }
      return simdjson::SUCCESS;
    }
    case od::json_type::boolean: {
      out.type = ValueType::boolean;
      bool b = false;
      return value.get_bool().get(b);
    }
    case od::json_type::null:
      out.type = ValueType::null;
      return simdjson::SUCCESS;
    default:
      return simdjson::INCORRECT_TYPE;
  }
}

// One traceEvents element into the TraceBuilder, through the calls the fast scanner makes (mode 1).
simdjson::error_code build_event(od::object event, kin::TraceBuilder& builder, kin::EventFields& fields) {
  using kin::Key;
  fields.reset();
  for (auto member : event) {
    od::field field;
    if (auto e = std::move(member).get(field)) return e;
    simdjson::error_code error = simdjson::SUCCESS;
    const Key key = kin::event_key(field_key(field, error));
    if (error) return error;
    if (key == Key::other) continue;  // On-Demand skips the value when the loop moves on
    od::value value = field.value();
    od::json_type type{};
    if (auto e = value.type().get(type)) return e;
    if (type == od::json_type::object || type == od::json_type::array) {
      if (!builder.event_container(fields, key, type == od::json_type::object)) continue;
      od::object args;
      if (auto e = value.get_object().get(args)) return e;
      for (auto arg_member : args) {
        od::field arg;
        if (auto e = std::move(arg_member).get(arg)) return e;
        const Key arg_key = kin::args_key(field_key(arg, error));
        if (error) return error;
        if (arg_key == Key::other) continue;
        od::value arg_value = arg.value();
        od::json_type arg_type{};
        if (auto e = arg_value.type().get(arg_type)) return e;
        if (arg_type == od::json_type::object || arg_type == od::json_type::array) continue;
        kin::Scalar scalar;
        if (auto e = read_scalar(arg_value, arg_type, false, scalar)) return e;
        kin::TraceBuilder::args_scalar(fields, arg_key, scalar);
      }
      continue;
    }
    kin::Scalar scalar;
    const bool want_string = key == Key::ph || key == Key::cat || key == Key::name || key == Key::tid;
    if (auto e = read_scalar(value, type, want_string, scalar)) return e;
    builder.event_scalar(fields, key, scalar);
  }
  switch (builder.finish_event(fields)) {
    case kin::EventVerdict::kept:
    case kin::EventVerdict::ignored:
      return simdjson::SUCCESS;
    default:
      return simdjson::INCORRECT_TYPE;
  }
}

// One traceEvents element into a SimdEvent (mode 0): the fields and args the importer reads.
simdjson::error_code read_event(od::object event, std::vector<SimdEvent>& out) {
  SimdEvent ev;
  for (auto member : event) {
    od::field field;
    if (auto e = std::move(member).get(field)) return e;
    simdjson::error_code error = simdjson::SUCCESS;
    const std::string_view key = field_key(field, error);
    if (error) return error;
    od::value value = field.value();
    switch (kin::event_key(key)) {
      case kin::Key::ph:
        error = value.get_string().get(ev.ph);
        break;
      case kin::Key::cat:
        error = value.get_string().get(ev.cat);
        break;
      case kin::Key::name:
        error = value.get_string().get(ev.name);
        break;
      case kin::Key::ts:
        error = value.get_double().get(ev.ts);
        break;
      case kin::Key::dur:
        error = value.get_double().get(ev.dur);
        break;
      case kin::Key::pid:
        ev.pid = as_integer(value);
        break;
      case kin::Key::tid:
        ev.tid = as_integer(value);
        break;
      case kin::Key::args: {
        od::object args;
        if (value.get_object().get(args) != simdjson::SUCCESS) break;
        for (auto arg_member : args) {
          od::field arg;
          if (auto e = std::move(arg_member).get(arg)) return e;
          const std::string_view arg_key = field_key(arg, error);
          if (error) return error;
          switch (kin::args_key(arg_key)) {
            case kin::Key::stream:
              ev.stream = as_integer(arg.value());
              break;
            case kin::Key::correlation:
              ev.correlation = as_integer(arg.value());
              break;
            case kin::Key::device:
              ev.device = as_integer(arg.value());
              break;
            case kin::Key::bytes:
              ev.bytes = as_integer(arg.value());
              break;
            default:
              break;
          }
        }
        break;
      }
      default:
        break;
    }
    if (error) return error;
  }
  out.push_back(ev);
  return simdjson::SUCCESS;
}

// simdjson On-Demand over the same document: traceEvents element by element, into SimdEvents
// (builder:0, the parse alone) or into a TraceBuilder exactly as the fast scanner feeds it
// (builder:1, what an integration would run). The other top-level members are skipped unread.
void BM_V100ScanSimdjson(benchmark::State& state) {
  const stepscope::detail::WholeDocument* document = import_bench::v100_document(state);
  if (document == nullptr) return;
  const bool into_builder = state.range(0) != 0;
  const simdjson::padded_string_view json(document->begin(), document->size(),
                                          document->size() + stepscope::detail::WholeDocument::kPadding);
  const stepscope::ImportOptions options;
  od::parser parser;  // reused: its buffers are allocated once, as a product parser would keep them
  std::vector<SimdEvent> events;
  kin::EventFields fields;
  std::size_t kept = 0;
  for (auto _ : state) {
    kin::TraceBuilder builder(options);
    events.clear();
    simdjson::error_code error = simdjson::SUCCESS;
    od::document doc;
    od::object top;
    if (!(error = parser.iterate(json).get(doc)) && !(error = doc.get_object().get(top))) {
      for (auto member : top) {
        od::field field;
        if ((error = std::move(member).get(field))) break;
        if (field_key(field, error) != "traceEvents" || error) continue;
        od::array list;
        if ((error = field.value().get_array().get(list))) break;
        for (auto element : list) {
          od::object event;
          if ((error = std::move(element).get_object().get(event))) break;
          if ((error = into_builder ? build_event(event, builder, fields) : read_event(event, events))) break;
        }
        if (error) break;
      }
    }
    if (error) {
      state.SkipWithError(simdjson::error_message(error));
      return;
    }
    kept = into_builder ? builder.events().size() : events.size();
    benchmark::DoNotOptimize(kept);
    benchmark::DoNotOptimize(events.data());
  }
  import_bench::count_document(state, document->size(), kept);
  state.SetLabel(kOnDemandKernel);
}
BENCHMARK(BM_V100ScanSimdjson)->Arg(0)->Arg(1)->ArgName("builder")->Unit(benchmark::kMillisecond);
}  // namespace

#endif  // STEPSCOPE_BENCH_SIMDJSON

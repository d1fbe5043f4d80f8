// The fast scanner against the exact (nlohmann) parser: on every input, the
// importer's answer must not depend on which parser produced it. Real traces
// must take the fast path; anything unusual or broken must come out exactly
// as the nlohmann path words it.
#include <zlib.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <dirent.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "import/byte_source.hpp"
#include "import/kineto_fast_scanner.hpp"
#include "import/kineto_reader_internal.hpp"
#include "import/trace_import.hpp"
#include "test_bytes.hpp"

using namespace stepscope;
using stepscope::detail::ImportDiagnostics;
using stepscope::detail::KinetoParser;

namespace {

using stepscope::test::gzip;
using stepscope::test::read_file;

const std::string kCorpus = STEPSCOPE_SOURCE_DIR "/tests/import/corpus/";
const std::string kTraces = STEPSCOPE_TEST_DATA_DIR "/";

// Every gzipped trace in tests/data: the GPU traces from HTA (traces/) and the
// legacy traces of PyTorch 1.13 (pytorch/), as paths relative to tests/data.
std::vector<std::string> repository_traces() {
  std::vector<std::string> files;
  for (const char* sub : {"traces/", "pytorch/"}) {
    if (DIR* dir = opendir((kTraces + sub).c_str())) {
      while (dirent* entry = readdir(dir)) {
        const std::string name = entry->d_name;
        if (name.size() > 8 && name.compare(name.size() - 8, 8, ".json.gz") == 0) files.push_back(sub + name);
      }
      closedir(dir);
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Everything an import produces, one fact per line, so two results compare
// as text and a difference is reported at its first line.
std::vector<std::string> describe(const ImportResult& r) {
  std::vector<std::string> lines;
  std::ostringstream line;
  const auto emit = [&] {
    lines.push_back(line.str());
    line.str("");
  };
  line << "ok " << r.ok << " error " << r.error;
  emit();
  const ImportStats& s = r.stats;
  line << "stats " << s.compressed_bytes << ' ' << s.uncompressed_bytes << ' ' << s.events_seen << ' '
       << s.complete_events << ' ' << s.events_dropped_after_last_step << ' ' << s.gzip << ' '
       << s.fractional_timestamps << ' ' << s.legacy_format << ' ' << s.events_without_category;
  emit();
  const timeline::Timeline& tl = r.trace;
  line << "meta " << tl.rank << ' ' << tl.world_size << ' ' << tl.has_distributed_info << ' ' << tl.distributed_backend;
  emit();
  for (const auto& d : tl.devices) {
    line << "device " << d.id << ' ' << d.name << ' ' << d.total_memory_bytes << ' ' << d.compute_major << ' '
         << d.compute_minor << ' ' << d.multiprocessor_count;
    emit();
  }
  for (std::size_t i = 0; i < tl.names.size(); ++i) {
    line << "name " << i << ' ' << tl.names[i];
    emit();
  }
  for (const auto& d : tl.device_ops) {
    line << "dev " << d.start_ns << ' ' << d.end_ns << ' ' << d.stream << ' ' << d.correlation << ' ' << d.device << ' '
         << d.name << ' ' << int(d.kind) << ' ' << int(d.cls) << ' ' << int(d.direction) << ' ' << int(d.host_memory)
         << ' ' << d.bytes;
    emit();
  }
  for (const auto& h : tl.host_ops) {
    line << "host " << h.start_ns << ' ' << h.end_ns << ' ' << h.pid << ' ' << h.tid << ' ' << h.correlation << ' '
         << h.name << ' ' << int(h.kind);
    emit();
  }
  for (const auto& st : tl.steps) {
    line << "step " << st.number << ' ' << st.start_ns << ' ' << st.end_ns;
    emit();
  }
  for (const auto& p : tl.phases) {
    line << "phase " << p.name << ' ' << p.start_ns << ' ' << p.end_ns << ' ' << p.tid << ' ' << p.on_device;
    emit();
  }
  return lines;
}

// Fails with the first differing line.
void require_same(const ImportResult& expected, const ImportResult& actual, const std::string& what) {
  const auto a = describe(expected);
  const auto b = describe(actual);
  std::size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  INFO(what);
  INFO("line " << i << " of " << a.size() << "/" << b.size());
  INFO("exact: " << (i < a.size() ? a[i].substr(0, 300) : std::string("<end>")));
  INFO("fast:  " << (i < b.size() ? b[i].substr(0, 300) : std::string("<end>")));
  REQUIRE((i == a.size() && i == b.size()));
}

// The automatic importer's answer equals the exact parser's, whichever way
// the fast path reads the input: whole (the default for small inputs),
// streamed in chunks (inputs above the in-memory limit), and whole on two
// threads with the split searched from `split_from` (default: the middle).
// Returns whether the fast path produced the default answer.
bool check_same_as_exact(const std::string& bytes, const std::string& what, ImportOptions options = {},
                         std::int64_t split_from = -1) {
  const ImportResult exact = detail::import_kineto_buffer_with(bytes, options, KinetoParser::exact);
  ImportDiagnostics how;
  const ImportResult automatic = detail::import_kineto_buffer_with(bytes, options, KinetoParser::automatic, &how);
  require_same(exact, automatic, what);
  ImportOptions streaming = options;
  streaming.max_in_memory_json_bytes = 0;
  require_same(exact, detail::import_kineto_buffer_with(bytes, streaming, KinetoParser::automatic),
               what + " (streamed)");
  detail::ImportTuning split;
  split.min_split_bytes = 0;
  split.split_search_from = split_from >= 0 ? split_from : static_cast<std::int64_t>(bytes.size() / 2);
  require_same(exact, detail::import_kineto_buffer_with(bytes, options, KinetoParser::automatic, nullptr, split),
               what + " (split)");
  return how.fast_path_used;
}

std::string trace_of(const std::string& events) {
  return R"({"traceEvents": [)" + events + "]}";
}

}  // namespace

TEST_CASE("fast scanner and exact parser build identical timelines from every trace in tests/data", "[import][fast]") {
  const auto files = repository_traces();
  REQUIRE(files.size() >= 9);  // 6 GPU traces, 3 legacy ones
  for (const auto& file : files) {
    ImportOptions defaults;
    ImportOptions exact_ns;
    exact_ns.hta_rounding = false;
    exact_ns.drop_last_profiler_step = false;
    for (const ImportOptions& options : {defaults, exact_ns}) {
      const ImportResult exact = detail::import_kineto_trace_with(kTraces + file, options, KinetoParser::exact);
      const ImportResult fast = detail::import_kineto_trace_with(kTraces + file, options, KinetoParser::fast_only);
      INFO(file << ": " << fast.error);
      REQUIRE(exact.ok);
      REQUIRE(fast.ok);  // real Kineto output never needs the fallback
      require_same(exact, fast, file);
    }
    // The public entry point takes the fast path, on two threads when the JSON is over 1 MiB.
    ImportDiagnostics how;
    const ImportResult automatic = detail::import_kineto_trace_with(kTraces + file, {}, KinetoParser::automatic, &how);
    CHECK(automatic.ok);
    CHECK(how.fast_path_used);
    CHECK(how.fast_path_gave_up.empty());
    // Read whole when the build inflates gzip in one piece (libdeflate), else streamed.
    const bool whole = detail::WholeDocumentLoader::inflates_gzip();
    CHECK(how.whole_document == whole);
    CHECK(how.split_parse == (whole && automatic.stats.uncompressed_bytes >= (1u << 20)));
    // Streamed (as above the in-memory limit) and parsed on one thread: the same again.
    ImportOptions streaming;
    streaming.max_in_memory_json_bytes = 0;
    ImportOptions one_thread;
    one_thread.pipelined_decompression = false;
    const ImportResult exact = detail::import_kineto_trace_with(kTraces + file, {}, KinetoParser::exact);
    for (const ImportOptions& options : {streaming, one_thread}) {
      ImportDiagnostics other;
      require_same(exact, detail::import_kineto_trace_with(kTraces + file, options, KinetoParser::fast_only, &other),
                   file + (options.max_in_memory_json_bytes == 0 ? " streamed" : " one thread"));
      CHECK(other.whole_document == (whole && options.max_in_memory_json_bytes != 0));
      CHECK_FALSE(other.split_parse);
    }
  }
}

TEST_CASE("a split parse equals the exact parser wherever the split falls", "[import][fast][split]") {
  // The helper thread starts at the first "}, {" after the search offset;
  // try every offset. Strings and nested values holding "}, {" make the
  // helper start where no event begins: the main scanner then carries on
  // alone. Metadata or a second traceEvents after the split is left to it too.
  const std::string kernel =
      R"("ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "args": {"stream": 7, "correlation": 1})";
  const std::vector<std::pair<std::string, std::string>> documents = {
      {"minimal", read_file(kCorpus + "minimal.json")},
      {"float timestamps", read_file(kCorpus + "float_ts.json")},
      {"array format", read_file(kCorpus + "array_format.json")},
      {"'}, {' in strings and nested values",
       trace_of(R"({"name": "a}, {b", "ts": 1, "dur": 2, )" + kernel +
                R"(}, {"name": "x},{", "ts": 3, "dur": 1, "ph": "X",)"
                R"( "cat": "cpu_op", "args": {"shapes": [{"a": 1}, {"b": 2}], "s": "}, {"ph": "X"}"}},)"
                R"( {"name": "c", "ts": 5, "dur": 1, )" +
                kernel + "}")},
      {"members after traceEvents",
       R"({"traceEvents": [{"name": "a", "ts": 1, "dur": 2, )" + kernel + R"(}, {"name": "b", "ts": 2, "dur": 2, )" +
           kernel +
           R"(}], "traceName": "x", "other": [{"a": 1}, {"b": 2}], "distributedInfo": {"rank": 3},)"
           R"( "deviceProperties": [{"id": 0, "name": "G"}, {"id": 1}], "z": {}})"},
      {"two traceEvents arrays", R"({"traceEvents": [{"name": "a", "ts": 1, "dur": 2, )" + kernel +
                                     R"(}, {"name": "b", "ts": 1, "dur": 2, )" + kernel +
                                     R"(}], "traceEvents": [{"name": "c", "ts": 3, "dur": 2, )" + kernel +
                                     R"(}, {"name": "a", "ts": 4,)"
                                     R"( "dur": 1, )" +
                                     kernel + "}]}"},
      {"names first met after the split",
       trace_of(R"({"name": "a", "ts": 1, "dur": 2, )" + kernel + R"(}, {"name": "b", "ts": 3, "dur": 2, )" + kernel +
                R"(}, {"name": "a", "ts": 5, "dur": 2, "ph": "X", "cat": "cpu_op"}, )"
                R"({"name": "c", "ts": 7, "dur": 2.5, "ph": "X", "cat": "user_annotation"})")},
      {"broken after the split",
       trace_of(R"({"name": "a", "ts": 1, "dur": 2, )" + kernel + R"(}, {"name": "b", "ts": 3, "dur": 2, )" + kernel +
                R"(}, {"name": "c", "ts": "late", "dur": 2, "ph": "X", "cat": "kernel"})")},
      {"trailing data after the split", trace_of(R"({"name": "a", "ts": 1, "dur": 2, )" + kernel +
                                                 R"(}, {"name": "b", "ts": 3,)"
                                                 R"( "dur": 2, )" +
                                                 kernel + "}") +
                                            " x"},
  };
  int handed_over = 0;
  for (const auto& [what, json] : documents) {
    REQUIRE(!json.empty());
    ImportOptions exact_ns;
    exact_ns.hta_rounding = false;
    for (std::size_t from = 0; from <= json.size(); ++from) {
      const std::string label = what + ", split searched from " + std::to_string(from);
      for (const ImportOptions& options : {ImportOptions{}, exact_ns}) {
        const ImportResult exact = detail::import_kineto_buffer_with(json, options, KinetoParser::exact);
        detail::ImportTuning tuning;
        tuning.min_split_bytes = 0;
        tuning.split_search_from = static_cast<std::int64_t>(from);
        ImportDiagnostics how;
        const ImportResult split =
            detail::import_kineto_buffer_with(json, options, KinetoParser::automatic, &how, tuning);
        require_same(exact, split, label);
        handed_over += how.split_parse ? 1 : 0;
      }
    }
  }
  CHECK(handed_over > 100);
}

TEST_CASE("corpus seeds and every prefix of them: same answer from both parsers", "[import][fast]") {
  for (const char* seed : {"minimal.json", "float_ts.json", "array_format.json", "truncated.json", "wrong_type.json"}) {
    const std::string bytes = read_file(kCorpus + seed);
    REQUIRE(!bytes.empty());
    check_same_as_exact(bytes, seed);
    ImportOptions exact_ns;
    exact_ns.hta_rounding = false;
    check_same_as_exact(bytes, std::string(seed) + " (ns)", exact_ns);
    for (std::size_t cut = 0; cut < bytes.size(); ++cut)
      check_same_as_exact(bytes.substr(0, cut), std::string(seed) + " cut at " + std::to_string(cut));
  }
}

TEST_CASE("valid but unusual JSON takes the fast path and matches the exact parser", "[import][fast]") {
  const std::string kernel =
      R"("ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "args": {"stream": 7, "correlation": 1})";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"escapes in a name", trace_of(R"({"name": "a\"b\\c\/d\b\f\n\r\t\u0000", "ts": 1, "dur": 2, )" + kernel + "}")},
      {"unicode escapes and surrogate pairs",
       trace_of(R"({"name": "\u00e9\u4E2D\ud83d\ude00", "ts": 1, "dur": 2, )" + kernel + "}")},
      {"raw UTF-8", trace_of("{\"name\": \"\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80\xEF\xBF\xBF\xF4\x8F\xBF\xBF\", "
                             "\"ts\": 1, \"dur\": 2, " +
                             kernel + "}")},
      {"escaped keys", trace_of(R"({"p\u0068": "X", "c\u0061t": "kernel", "n\u0061me": "k", "\u0074s": 5, "dur": 1,)"
                                R"( "args": {"str\u0065am": 3, "correlation": 2}})")},
      {"number forms",
       trace_of(R"({"name": "k", "ts": 1E2, "dur": 2.5e-1, )" + kernel + R"(}, {"name": "k", "ts": -0, "dur": 0.0, )" +
                kernel + R"(}, {"name": "k", "ts": 1234567890123456, "dur": 1e0, )" + kernel +
                R"(}, {"name": "k", "ts": 4203669604595.407, "dur": 0.0000001, )" + kernel + "}")},
      {"pid and tid of every type",
       trace_of(R"({"ph": "X", "cat": "cpu_op", "name": "a", "pid": "Spans", "td": 3.9, "ts": 1, "dur": 1},)"
                R"({"ph": "X", "cat": "cpu_op", "name": "b", "pid": null, "tid": true, "ts": 1, "dur": 1},)"
                R"({"ph": "X", "cat": "cpu_op", "name": "c", "pid": [1], "tid": {"a": 1}, "ts": 1, "dur": 1},)"
                R"({"ph": "X", "cat": "cpu_op", "name": "d", "pid": 18446744073709551615, "ts": 1, "dur": 1},)"
                R"({"ph": "X", "cat": "cpu_op", "name": "e", "pid": -9223372036854775808, "ts": 1, "dur": 1})")},
      {"args of every shape",
       trace_of(
           R"({"name": "k1", "ts": 1, "dur": 2, "ph": "X", "cat": "kernel", "args": {"stream": "7", "correlation": [1], "device": {"x": [1, {"y": null}]}, "bytes": 1.9e3}},)"
           R"({"name": "k2", "ts": 1, "dur": 2, "ph": "X", "cat": "kernel", "args": [1, 2]},)"
           R"({"name": "k3", "ts": 1, "dur": 2, "ph": "X", "cat": "kernel", "args": "none"},)"
           R"({"name": "k4", "ts": 1, "dur": 2, "ph": "X", "cat": "gpu_memcpy", "args": {"stream": 4294967295, "correlation": 3, "bytes": 4096, "grid": [1, 2, 3], "flag": false}})")},
      {"duplicate keys",
       trace_of(
           R"({"name": "a", "name": "b", "ts": 1, "ts": 2.5, "dur": 3, "cat": "kernel", "cat": null, "ph": "X", "args": {"stream": 1, "stream": 2, "correlation": 5}})")},
      {"null cat and dur, Trace, and odd non-complete events",
       trace_of(R"({"ph": "X", "cat": null, "name": "a", "ts": 1, "dur": 1},)"
                R"({"ph": "X", "cat": "cpu_op", "name": "b", "ts": 1, "dur": null},)"
                R"({"ph": "X", "cat": "Trace", "name": "c", "ts": 1, "dur": 1},)"
                R"({"ph": "i", "cat": "x", "name": "d", "ts": "soon", "dur": [1], "s": "g"},)"
                R"({"ph": "X", "cat": "cpu_op", "name": "e", "ts": 5, "dur": 1, "args": null},)"
                R"({}, {"ph": "M", "name": "process_name", "args": {"name": "python"}})")},
      {"whitespace of every kind",
       "\r\n\t {\t\"traceEvents\"\r:\n[\n\t{ \"ph\" :\"X\" , \"cat\":\"kernel\",\"name\":\"k\","
       "\"ts\"\t:\t1 ,\"dur\":2,\"args\":{ \"stream\" : 1 , \"correlation\" : 2 } } ] } \n\t\r "},
      {"no whitespace at all",
       R"({"traceEvents":[{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":2,"args":{"stream":1,"correlation":2}}]})"},
      {"metadata of every shape",
       R"({"schemaVersion": 1, "distributedInfo": {"backend": 5, "rank": 3, "world_size": 8, "pg": {"a": [1]}, "x": null},)"
       R"( "deviceProperties": [1, "x", [2], {"id": 1.5, "name": 7, "totalGlobalMem": "big", "numSms": 80, "props": {"a": 1}}, {"name": "G\u00e9"}],)"
       R"( "traceEvents": [], "other": {"deep": [[[[{"k": [true, false, null]}]]]]}, "deviceProperties2": 1})"},
      {"metadata of the wrong shape is skipped",
       R"({"distributedInfo": [1, 2], "deviceProperties": {"id": 1}, "traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2}]})"},
      {"the array format",
       R"([{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2, "args": {"stream": 1, "correlation": 2}}])"},
      {"empty traceEvents", R"({"traceEvents": []})"},
      {"two traceEvents arrays",
       R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "a", "ts": 1, "dur": 2}], "traceEvents": [{"ph": "X", "cat": "kernel", "name": "b", "ts": 3, "dur": 2}]})"},
  };
  for (const auto& [what, json] : cases) {
    ImportOptions exact_ns;
    exact_ns.hta_rounding = false;
    for (const ImportOptions& options : {ImportOptions{}, exact_ns}) {
      const ImportResult exact = detail::import_kineto_buffer_with(json, options, KinetoParser::exact);
      INFO(what << ": " << exact.error);
      REQUIRE(exact.ok);
      CHECK(check_same_as_exact(json, what, options));
    }
  }
}

TEST_CASE("malformed or unsupported input falls back and gives the exact parser's error", "[import][fast]") {
  const std::string ok_event = R"({"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2})";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"empty", ""},
      {"whitespace only", " \n\t "},
      {"not JSON", "hello"},
      {"a bare scalar", "42"},
      {"a byte order mark", "\xEF\xBB\xBF" + trace_of(ok_event)},
      {"invalid escape", trace_of(R"({"name": "a\x", "ph": "X"})")},
      {"lone low surrogate", trace_of(R"({"name": "\udc00", "ph": "X"})")},
      {"high surrogate without its pair", trace_of(R"({"name": "\ud800x", "ph": "X"})")},
      {"high surrogate with a bad pair", trace_of(R"({"name": "\ud800\u0041", "ph": "X"})")},
      {"short unicode escape", trace_of(R"({"name": "\u12", "ph": "X"})")},
      {"overlong UTF-8", trace_of("{\"name\": \"\xC0\x80\", \"ph\": \"X\"}")},
      {"UTF-8 surrogate", trace_of("{\"name\": \"\xED\xA0\x80\", \"ph\": \"X\"}")},
      {"UTF-8 beyond U+10FFFF", trace_of("{\"name\": \"\xF4\x90\x80\x80\", \"ph\": \"X\"}")},
      {"truncated UTF-8", trace_of("{\"name\": \"\xE4\xB8\", \"ph\": \"X\"}")},
      {"stray continuation byte", trace_of("{\"name\": \"\x80\", \"ph\": \"X\"}")},
      {"control character in a string", trace_of("{\"name\": \"a\nb\", \"ph\": \"X\"}")},
      {"leading zero", trace_of(R"({"ph": "X", "cat": "kernel", "name": "k", "ts": 01, "dur": 2})")},
      {"bare minus", trace_of(R"({"ph": "X", "cat": "kernel", "name": "k", "ts": -, "dur": 2})")},
      {"dot without digits", trace_of(R"({"ph": "X", "cat": "kernel", "name": "k", "ts": 1., "dur": 2})")},
      {"exponent without digits", trace_of(R"({"ph": "X", "cat": "kernel", "name": "k", "ts": 1e+, "dur": 2})")},
      {"plus sign", trace_of(R"({"ph": "X", "cat": "kernel", "name": "k", "ts": +1, "dur": 2})")},
      {"NaN", trace_of(R"({"ph": "X", "cat": "kernel", "name": "k", "ts": NaN, "dur": 2})")},
      {"double overflow", trace_of(R"({"ph": "X", "cat": "kernel", "name": "k", "ts": 1e400, "dur": 2})")},
      {"double overflow in a skipped value", trace_of(R"({"ph": "i", "args": {"x": -2E+999}})")},
      {"double underflow", trace_of(R"({"ph": "X", "cat": "kernel", "name": "k", "ts": 1e-400, "dur": 2})")},
      {"huge integer",
       trace_of(
           R"({"ph": "X", "cat": "cpu_op", "name": "k", "pid": 123456789012345678901234567890, "ts": 1, "dur": 2})")},
      {"very long number",
       trace_of(R"({"ph": "X", "cat": "cpu_op", "name": "k", "ts": 1.)" + std::string(100, '5') + R"(, "dur": 2})")},
      {"out-of-range timestamp", trace_of(R"({"ph": "X", "cat": "kernel", "name": "k", "ts": 1e300, "dur": 1})")},
      {"ts of the wrong type", trace_of(R"({"ph": "X", "cat": "kernel", "name": "k", "ts": "1", "dur": 1})")},
      {"ts too large for int64",
       trace_of(R"({"ph": "X", "cat": "kernel", "name": "k", "ts": 18446744073709551615, "dur": 1})")},
      {"ph of the wrong type", trace_of(R"({"ph": 1, "name": "k"})")},
      {"cat of the wrong type", trace_of(R"({"ph": "X", "cat": ["kernel"], "name": "k", "ts": 1, "dur": 2})")},
      {"name of the wrong type", trace_of(R"({"ph": "X", "cat": "kernel", "name": 5, "ts": 1, "dur": 2})")},
      {"no ts", trace_of(R"({"ph": "X", "cat": "kernel", "name": "k", "dur": 2})")},
      {"event not an object", trace_of("[1]")},
      {"event a number", trace_of("1, 2")},
      {"traceEvents an object", R"({"traceEvents": {"a": 1}})"},
      {"traceEvents a number", R"({"traceEvents": 3})"},
      {"no traceEvents", R"({"schemaVersion": 1})"},
      {"bad rank", R"({"distributedInfo": {"rank": -1}, "traceEvents": []})"},
      {"bad world size", R"({"distributedInfo": {"world_size": "8"}, "traceEvents": []})"},
      {"trailing comma in an array", trace_of(ok_event + ",")},
      {"trailing comma in an object", trace_of(R"({"ph": "X",})")},
      {"missing colon", trace_of(R"({"ph" "X"})")},
      {"missing comma", trace_of(R"({"ph": "X" "cat": "k"})")},
      {"single quotes", trace_of(R"({'ph': 'X'})")},
      {"unquoted key", trace_of(R"({ph: "X"})")},
      {"bad literal", trace_of(R"({"ph": "X", "x": tru})")},
      {"literal with junk", trace_of(R"({"ph": "X", "x": nullx})")},
      {"trailing data", trace_of(ok_event) + " {}"},
      {"two documents", trace_of(ok_event) + trace_of(ok_event)},
      {"unterminated string", R"({"traceEvents": [{"name": "abc)"},
      {"unbalanced", R"({"traceEvents": [{"ph": "X"}})"},
      {"NUL byte", std::string("{\"traceEvents\": [") + '\0' + "]}"},
      {"deep nesting", R"({"traceEvents": [], "x": )" + std::string(300, '[') + std::string(300, ']') + "}"},
      {"deeper nesting, broken", R"({"traceEvents": [], "x": )" + std::string(300, '[') + "}"},
  };
  for (const auto& [what, json] : cases) {
    check_same_as_exact(json, what);
    // The fast path never claims these: each fails or is left to the exact parser.
    ImportDiagnostics how;
    const ImportResult fast = detail::import_kineto_buffer_with(json, {}, KinetoParser::fast_only, &how);
    if (fast.ok) {
      const ImportResult exact = detail::import_kineto_buffer_with(json, {}, KinetoParser::exact);
      INFO(what);
      CHECK(exact.ok);  // accepted by both (e.g. deep nesting within the limit)
    } else {
      CHECK(!how.fast_path_gave_up.empty());
    }
  }
  // An event near max_event_bytes goes to the exact parser, which decides.
  const std::string big = trace_of(R"({"ph": "X", "cat": "kernel", "name": ")" + std::string(200, 'k') +
                                   R"(", "ts": 1, "dur": 2, "args": {"stream": 1, "correlation": 1}})");
  for (std::size_t limit = 150; limit < 300; limit += 3) {
    ImportOptions options;
    options.max_event_bytes = limit;
    check_same_as_exact(big, "max_event_bytes " + std::to_string(limit), options);
  }
  // Gzip damage: the decoder's error, worded by the exact path.
  const std::string gz = gzip(read_file(kCorpus + "minimal.json"));
  check_same_as_exact(gz.substr(0, gz.size() / 2), "truncated gzip");
  check_same_as_exact(gz.substr(0, gz.size() - 4), "gzip without its size trailer");
  std::string corrupt = gz;
  corrupt[corrupt.size() - 6] = static_cast<char>(corrupt[corrupt.size() - 6] ^ 0x20);  // CRC
  check_same_as_exact(corrupt, "gzip with a bad CRC");
}

TEST_CASE("tokens split across chunk boundaries", "[import][fast]") {
  // Plain input reaches the scanner in 256 KiB chunks, gzip input in 256 KiB
  // of inflated output: put every kind of token across a boundary at every
  // offset, in both.
  const std::size_t chunk = stepscope::detail::Decoder::kChunkBytes;
  const std::vector<std::string> tricky = {
      R"("name": "\u00e9\ud83d\ude00\"\\ tail")",
      "\"name\": \"\xE4\xB8\xAD\xF0\x9F\x98\x80 tail\"",
      R"("ts": 4203669604595.407)",
      R"("dur": 2.5e-1)",
      R"("pid": -9223372036854775808)",
      R"("args": {"stream": 4294967295, "correlation": 12, "grid": [1, 2, 3], "n": null, "t": true, "f": false})",
      R"("na\u006de": "k")"};
  int fast_runs = 0;
  for (const std::string& token : tricky) {
    for (std::size_t shift = 0; shift < token.size() + 2; ++shift) {
      const std::string head = R"({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": ")";
      const std::string middle = R"(", "ts": 1, "dur": 1}, {"ph": "X", "cat": "kernel", "ts": 5, "dur": 1, )";
      // Filler sized so that the token starts `shift` bytes before the boundary.
      const std::size_t filler = chunk - head.size() - middle.size() - token.size() + shift;
      const std::string json = head + std::string(filler, 'a') + middle + token + R"(, "tid": 1}]})";
      const std::string what = token + " shifted " + std::to_string(shift);
      CHECK(check_same_as_exact(json, what));
      // Inflated chunks end at the same offsets; a sample keeps the test short.
      if (shift % 4 == 0) CHECK(check_same_as_exact(gzip(json), what + " (gzip)"));
      ++fast_runs;
    }
  }
  CHECK(fast_runs > 100);
  // One string longer than a chunk, with escapes on both sides of the boundaries.
  std::string long_name;
  while (long_name.size() < 3 * chunk) long_name += "abc\\u00e9\\\"def\xC3\xA9" + std::string(997, 'x');
  const std::string json = trace_of(R"({"ph": "X", "cat": "kernel", "name": ")" + long_name +
                                    R"(", "ts": 1, "dur": 2, "args": {"stream": 1, "correlation": 1}})");
  CHECK(check_same_as_exact(json, "a name of three chunks"));
  ImportOptions inline_inflate;
  inline_inflate.pipelined_decompression = false;
  CHECK(check_same_as_exact(gzip(json), "a name of three chunks (gzip, inline)", inline_inflate));
}

TEST_CASE("mutated traces: same answer from both parsers", "[import][fast][mutation]") {
  // A fixed-seed mutation loop over the seeds: each mutant must import to the
  // same result (or the same error) either way.
  std::mt19937 random(20240611);
  std::string interesting = "\"\\{}[],:0919-.eEuX \n\t\x80\xC3\xA9\xFF";
  interesting.push_back('\0');
  int runs = 0;
  for (const char* seed : {"minimal.json", "float_ts.json"}) {
    const std::string original = read_file(kCorpus + seed);
    for (int i = 0; i < 1500; ++i) {
      std::string mutant = original;
      const int edits = 1 + static_cast<int>(random() % 3);
      for (int e = 0; e < edits && !mutant.empty(); ++e) {
        const std::size_t at = random() % mutant.size();
        switch (random() % 4) {
          case 0:
            mutant[at] = interesting[random() % interesting.size()];
            break;
          case 1:
            mutant.erase(at, 1 + random() % 4);
            break;
          case 2:
            mutant.insert(at, 1, interesting[random() % interesting.size()]);
            break;
          default: {
            const std::size_t from = random() % mutant.size();
            mutant.insert(at, mutant.substr(from, 1 + random() % 24));
            break;
          }
        }
      }
      ImportOptions options;
      options.hta_rounding = (i % 3) != 0;
      options.max_event_bytes = (i % 5) == 0 ? 120 : options.max_event_bytes;
      check_same_as_exact(mutant, std::string(seed) + " mutant " + std::to_string(i), options);
      ++runs;
    }
  }
  CHECK(runs == 3000);
}

TEST_CASE("numbers read exactly as nlohmann reads them", "[import][fast][numbers]") {
  using stepscope::detail::kineto::NumberRead;
  using stepscope::detail::kineto::read_json_number;
  using stepscope::detail::kineto::Scalar;
  using stepscope::detail::kineto::ValueType;
  std::mt19937_64 random(7);
  std::vector<std::string> tokens = {"0",
                                     "-0",
                                     "0.0",
                                     "-0.0",
                                     "1",
                                     "-1",
                                     "9",
                                     "10",
                                     "1.5",
                                     "63.813",
                                     "0.1",
                                     "4203669604595.407",
                                     "1712195495519689.047",
                                     "1e2",
                                     "1E+2",
                                     "1e-2",
                                     "-1.25e-3",
                                     "9007199254740993",
                                     "9007199254740993.0",
                                     "0.30000000000000004",
                                     "123456789012345.6",
                                     "1234567890123456.7",
                                     "999999999999999.9",
                                     "18446744073709551615",
                                     "9223372036854775807",
                                     "-9223372036854775808",
                                     "4294967295",
                                     "1.7976931348623157e308",
                                     "2.2250738585072014e-308",
                                     "5e-324",
                                     "0.000000000000000000000000001",
                                     "12345678.12345678"};
  // Kineto-like timestamps and durations, plus random digit strings.
  for (int i = 0; i < 20000; ++i) {
    const std::uint64_t whole = random() % 10000000000000000ull;
    const unsigned fraction = static_cast<unsigned>(random() % 1000);
    char text[64];
    std::snprintf(text, sizeof text, "%llu.%03u", static_cast<unsigned long long>(whole), fraction);
    tokens.emplace_back(text);
    std::snprintf(text, sizeof text, "%u.%03u", static_cast<unsigned>(random() % 100000), fraction);
    tokens.emplace_back(text);
    std::string digits = std::to_string(random() % 10 + 1);
    const std::size_t length = random() % 22;
    while (digits.size() < length) digits += static_cast<char>('0' + random() % 10);
    if (random() % 2 != 0 && digits.size() > 1) digits.insert(1 + random() % (digits.size() - 1), ".");
    if (random() % 4 == 0) digits = "-" + digits;
    tokens.push_back(digits);
  }
  int compared = 0;
  for (const std::string& token : tokens) {
    INFO(token);
    Scalar s;
    const NumberRead read = read_json_number(token.data(), token.data() + token.size(), true, s);
    const nlohmann::json reference = nlohmann::json::parse(token, nullptr, false);
    REQUIRE(!reference.is_discarded());
    if (read.status == NumberRead::give_up) continue;  // left to nlohmann itself
    REQUIRE(read.status == NumberRead::ok);
    REQUIRE(read.end == token.data() + token.size());
    if (reference.is_number_float()) {
      REQUIRE(s.type == ValueType::number_float);
      const double expected = reference.get<double>();
      REQUIRE(std::memcmp(&expected, &s.floating, sizeof expected) == 0);  // bit for bit, -0.0 included
    } else if (reference.is_number_unsigned()) {
      REQUIRE(s.type == ValueType::number_unsigned);
      REQUIRE(s.unsigned_value == reference.get<std::uint64_t>());
    } else {
      REQUIRE(s.type == ValueType::number_integer);
      REQUIRE(s.integer == reference.get<std::int64_t>());
    }
    // The scanner's variant (8 readable bytes after the end): the same
    // reading whatever follows, digits included (they are not the token's).
    for (const char* after : {"99999999", "\"0000000", ",       "}) {
      const std::string padded = token + after;
      Scalar p;
      const NumberRead read_padded = read_json_number<true>(padded.data(), padded.data() + token.size(), true, p);
      REQUIRE(read_padded.status == NumberRead::ok);
      REQUIRE(read_padded.end == padded.data() + token.size());
      REQUIRE(p.type == s.type);
      REQUIRE(std::memcmp(&p.floating, &s.floating, sizeof p.floating) == 0);
      REQUIRE(p.unsigned_value == s.unsigned_value);
      REQUIRE(p.integer == s.integer);
    }
    ++compared;
  }
  CHECK(compared > 50000);
}

TEST_CASE("decimals of 16 to 19 digits convert as strtod does", "[import][fast][numbers]") {
  // The 128-bit path of read_json_number (timestamps with nanoseconds), bit
  // for bit against the C library, near powers of two and at random.
  using stepscope::detail::kineto::decimal_to_double;
  std::mt19937_64 random(11);
  std::vector<std::uint64_t> mantissas = {1,
                                          9,
                                          10,
                                          9007199254740991ull,
                                          9007199254740992ull,
                                          9007199254740993ull,
                                          9999999999999999999ull,
                                          1000000000000000000ull,
                                          18014398509481985ull};
  for (int bits = 53; bits < 64; ++bits)
    for (std::uint64_t delta = 0; delta < 4; ++delta) {
      mantissas.push_back((1ull << bits) - delta);
      mantissas.push_back((1ull << bits) + delta);
    }
  for (int i = 0; i < 200000; ++i) mantissas.push_back(random() % 10000000000000000000ull);
  int compared = 0;
  for (const std::uint64_t mantissa : mantissas) {
    const std::string digits = std::to_string(mantissa);
    const int fraction_digits = static_cast<int>(random() % 19);
    // Leading zeros where the fraction is longer than the digits: 9 and 3 make "0.009".
    const int zeros = std::max(0, fraction_digits + 1 - static_cast<int>(digits.size()));
    std::string text = std::string(static_cast<std::size_t>(zeros), '0') + digits;
    text.insert(text.size() - static_cast<std::size_t>(fraction_digits), ".");
    if (text.back() == '.') text.pop_back();
    const double expected = std::strtod(text.c_str(), nullptr);
    const double actual = decimal_to_double(mantissa, fraction_digits);
    INFO(text);
    REQUIRE(std::memcmp(&expected, &actual, sizeof expected) == 0);
    ++compared;
  }
  CHECK(compared > 150000);
}

TEST_CASE("Kineto timestamps convert as strtod does, ties included", "[import][fast][numbers]") {
  // decimal_to_double's 64-bit path: an integer part of 1 to 53 bits and a
  // fraction whose scaled remainder rounds. Near a microsecond timestamp
  // (2^50 < 1712195495519695 < 2^51, a quarter microsecond apart) the
  // fractions .125/.375/.625/.875 are exact ties, and around powers of two
  // the shift changes.
  using stepscope::detail::kineto::decimal_to_double;
  std::vector<std::pair<std::uint64_t, int>> cases;
  const std::uint64_t integers[] = {1ull,
                                    3ull,
                                    1712195495519695ull,
                                    (1ull << 50) - 1,
                                    1ull << 50,
                                    (1ull << 51) - 1,
                                    1ull << 51,
                                    (1ull << 52) - 1,
                                    1ull << 52,
                                    (1ull << 53) - 1,
                                    1ull << 53};
  for (const std::uint64_t integer : integers)
    for (std::uint64_t fraction = 0; fraction < 1000; ++fraction)
      if (integer <= (~0ull - fraction) / 1000) cases.emplace_back(integer * 1000 + fraction, 3);
  std::mt19937_64 random(29);
  for (int i = 0; i < 100000; ++i) {
    const int fraction_digits = 1 + static_cast<int>(random() % 6);
    std::uint64_t scale = 1;
    for (int d = 0; d < fraction_digits; ++d) scale *= 10;
    const std::uint64_t integer = random() >> (11 + random() % 50);  // 1 to 53 bits, mostly
    if (integer <= (~0ull - scale) / scale) cases.emplace_back(integer * scale + random() % scale, fraction_digits);
  }
  int compared = 0;
  for (const auto& [mantissa, fraction_digits] : cases) {
    std::string digits = std::to_string(mantissa);
    if (digits.size() <= static_cast<std::size_t>(fraction_digits))
      digits.insert(0, static_cast<std::size_t>(fraction_digits) + 1 - digits.size(), '0');
    digits.insert(digits.size() - static_cast<std::size_t>(fraction_digits), ".");
    const double expected = std::strtod(digits.c_str(), nullptr);
    const double actual = decimal_to_double(mantissa, fraction_digits);
    INFO(digits);
    REQUIRE(std::memcmp(&expected, &actual, sizeof expected) == 0);
    ++compared;
  }
  CHECK(compared > 100000);
}

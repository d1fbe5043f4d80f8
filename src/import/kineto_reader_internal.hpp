// Internal entry points of the Kineto importer, for tests and benchmarks:
// choose the parser and learn which one produced the result.
//
//   stepscope::detail::ImportDiagnostics how;
//   auto r = stepscope::detail::import_kineto_trace_with(path, {}, KinetoParser::automatic, &how);
//   // how.fast_path_used, how.fast_path_gave_up
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "import/trace_import.hpp"
#include "stepscope/export.hpp"

namespace stepscope {
inline namespace v1 {
namespace detail {

class Worker;  // import/worker.hpp

enum class KinetoParser : std::uint8_t {
  automatic,  // fast scanner; on anything it does not handle, the exact parser from the start
  exact,      // nlohmann's SAX parser only (the reference; gives every error message)
  fast_only,  // fast scanner only: fails with "fast path gave up: <reason>" instead of falling back
};

struct ImportDiagnostics {
  bool fast_path_used = false;    // the result came from the fast scanner
  std::string fast_path_gave_up;  // why it handed over, when it did
  bool whole_document = false;    // the fast scanner read the JSON whole (not streamed)
  bool split_parse = false;       // ... and a helper thread parsed its second part
};

// How the two-thread parse of a whole document runs: where it splits (tests
// move it) and on which thread.
struct ImportTuning {
  // Smaller documents are parsed on one thread: starting one costs more than it saves.
  std::size_t min_split_bytes = 1u << 20;
  // Byte offset where the search for the split point starts; -1: the middle.
  std::int64_t split_search_from = -1;
  // The thread of the split parse, started before the document is inflated
  // (analyze_trace_file keeps it for the report); null: the import has its own.
  Worker* worker = nullptr;
};

// The errors of ImportOptions::max_events and max_json_bytes (both parsers).
std::string too_many_events(std::uint64_t max_events);
std::string too_many_bytes(std::uint64_t max_json_bytes);

STEPSCOPE_API ImportResult import_kineto_trace_with(const std::string& path, const ImportOptions& options,
                                                    KinetoParser parser, ImportDiagnostics* diagnostics = nullptr,
                                                    const ImportTuning& tuning = {}) noexcept;
STEPSCOPE_API ImportResult import_kineto_buffer_with(std::string_view bytes, const ImportOptions& options,
                                                     KinetoParser parser, ImportDiagnostics* diagnostics = nullptr,
                                                     const ImportTuning& tuning = {}) noexcept;

}  // namespace detail
}  // namespace v1
}  // namespace stepscope

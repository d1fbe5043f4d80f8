// Guards in front of the JSON parser for files the CLI is handed: a report or
// a Chrome trace may be anything on disk (a 540 MB checkpoint, /dev/zero, a
// document nested 100k levels deep), and reading must stay bounded in memory
// and never overflow the stack:
//
//   std::string text, error;
//   if (!read_json_input(path, JsonInput::report, text, error)) return fail(error);
//   if (const auto shape = scan_json(text, kMaxJsonDepth, 0); shape.too_deep) ...
//
// nlohmann's parser and destructor are iterative, but dump() and every
// recursive walk over a DOM are not: depth is checked on the bytes before
// parsing. Limits and their reasons: docs/cli.md ("Inputs the tool refuses").
#pragma once

#include <stepscope/export.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace stepscope {
inline namespace v1 {
namespace detail {

// Deepest nesting of arrays/objects accepted. A report nests 6 levels
// (ranks.steps[i].wall_ms.min), a Kineto trace about 5 (traceEvents[i].args.x);
// 256 leaves room for nested config values while keeping recursive walks far
// from the default 8 MiB stack (a dump() frame is well under 1 KiB).
inline constexpr std::size_t kMaxJsonDepth = 256;

// Largest decompressed input read whole. A report grows with its phases
// (about 1.5 KB each: a 100,000-phase report is 154 MB, docs/cli.md), so
// 256 MiB holds ~170,000 phases. `show` on the 154 MB report peaked at 684 MB
// resident (the DOM is ~4.4x the text): the cap bounds the tool to ~1.2 GB.
inline constexpr std::size_t kMaxJsonInputBytes = std::size_t{256} << 20;

// How much of a file is looked at before anything is read whole.
inline constexpr std::size_t kJsonPrefixBytes = std::size_t{1} << 20;

// What a byte scan of (a prefix of) a JSON text found. The scan tracks
// strings and escapes but does not validate the grammar: the parser does.
struct JsonShape {
  bool empty = true;                        // nothing but whitespace (and a UTF-8 BOM)
  char first = 0;                           // else: the first byte that is not
  std::size_t max_depth = 0;                // deepest nesting seen (stops at limit + 1)
  bool too_deep = false;                    // nesting went past the limit
  std::size_t too_deep_at = 0;              // byte offset where it did
  std::vector<std::string> top_level_keys;  // keys of a top-level object, in order (raw, unescaped)
};

// `max_keys`: how many top-level keys to collect (0: none).
STEPSCOPE_API JsonShape scan_json(std::string_view text, std::size_t max_depth, std::size_t max_keys);

enum class JsonInput { report, chrome_trace };

// Reads `path` (gzip recognised by its magic bytes) into `out` after checking
// its first bytes look like the expected kind of document and that it is not
// larger than kMaxJsonInputBytes (plain files by their size, before reading
// them; gzip while decompressing). Memory: at most the cap plus one buffer.
// An empty file reads as "" (the caller says so). Never throws.
STEPSCOPE_API bool read_json_input(const std::string& path, JsonInput kind, std::string& out,
                                   std::string& error) noexcept;

// "nests deeper than 256 levels (at byte 1234)", or "" when within the limit.
STEPSCOPE_API std::string depth_problem(std::string_view text);

}  // namespace detail
}  // namespace v1
}  // namespace stepscope

// Text that came from users or input files (phase names, hosts, config
// values, file names, parser messages) made safe to print on a terminal:
//
//   line(fmt::format("  {:<20} ...", stepscope::detail::printable(p.name, 20)));
//
// A phase name is whatever the program passed to STEPSCOPE_PHASE; a report
// file is whatever is on disk. Printed raw, "\x1b]0;owned\a" retitles the
// terminal, "\x1b[2J" clears it, a newline forges a summary line, and a cut
// by bytes leaves half a UTF-8 character. So: control characters (C0, DEL,
// C1) become visible escapes (\n, \t, \x1b, \u009b), bidirectional overrides
// (U+202A-U+202E, U+2066-U+2069: "Trojan source") become \u escapes, bytes
// that are not UTF-8 become \xHH, and a cut never splits a character or an
// escape. The result is printable, valid UTF-8 and idempotent: printing it
// again changes nothing. Not a reversible encoding (a backslash stays as is).
#pragma once

#include <stepscope/export.hpp>

#include <cstddef>
#include <string>
#include <string_view>

namespace stepscope {
inline namespace v1 {
namespace detail {

inline constexpr std::size_t kNoCut = static_cast<std::size_t>(-1);

// One line of text: every control character escaped, newlines included.
// `max_chars`: at most this many characters (code points; an escape counts as
// its length) are kept, cut on a character boundary, without a marker.
STEPSCOPE_API std::string printable(std::string_view text, std::size_t max_chars = kNoCut);

// Several lines: like printable() but '\n' is kept as a line break.
STEPSCOPE_API std::string printable_lines(std::string_view text);

// At most `max_bytes` bytes of `text`, cut on a UTF-8 character boundary and
// ended by `marker` (within the bytes) when cut: a column of kernel names,
// hundreds of characters long, stays a column. Does not escape anything.
std::string shortened(std::string_view text, std::size_t max_bytes, std::string_view marker = "...");

// An exception as one printable line: "type: message", or "type" when there
// is no message (the report's `exception`, in the summary, the page and a
// merge's warnings).
inline std::string printable_exception(std::string_view type, std::string_view message) {
  std::string out = printable(type, 200);
  if (!message.empty()) out += ": " + printable(message, 400);
  return out;
}

}  // namespace detail
}  // namespace v1
}  // namespace stepscope

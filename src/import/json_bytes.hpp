// Byte-level helpers of the Kineto importer's fast scanner
// (kineto_fast_scanner.hpp), free of its state: JSON whitespace, two-byte
// compares, the vector search for the bytes that need attention inside a
// string, UTF-8 validation as nlohmann does it, and the \u escape's hex
// digits and UTF-8 encoding. Internal; used by FastScanner only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "stepscope/export.hpp"

namespace stepscope {
inline namespace v1 {
namespace detail::kineto {

STEPSCOPE_DETAIL_ALWAYS_INLINE bool is_whitespace(char c) {
  // ' ' is 0x20, the others below it: one compare rejects most bytes.
  return static_cast<unsigned char>(c) <= 0x20 && (c == ' ' || c == '\n' || c == '\r' || c == '\t');
}

// Whether the two bytes at q are a then b, with one 16-bit compare (the
// caller made them readable).
STEPSCOPE_DETAIL_ALWAYS_INLINE bool bytes_are(const char* q, char a, char b) {
  std::uint16_t two;
  std::memcpy(&two, q, 2);
  const auto want = static_cast<std::uint16_t>(static_cast<unsigned char>(a) |
                                               static_cast<unsigned>(static_cast<unsigned char>(b)) << 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  return two == static_cast<std::uint16_t>(want << 8 | want >> 8);
#else
  return two == want;
#endif
}

// First byte in [q, end) that needs attention inside a string: '"', '\\',
// a control character (< 0x20) or the start of a multi-byte UTF-8 sequence.
inline const char* find_special(const char* q, const char* end) {
#if defined(__SSE2__)
  const __m128i quote = _mm_set1_epi8('"');
  const __m128i backslash = _mm_set1_epi8('\\');
  // Signed compare: bytes 0x80..0xFF are negative, so one compare flags
  // both control characters and non-ASCII bytes.
  const __m128i space = _mm_set1_epi8(0x20);
  while (end - q >= 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
    const __m128i hits =
        _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)), _mm_cmplt_epi8(v, space));
    const int mask = _mm_movemask_epi8(hits);
    if (mask != 0) return q + __builtin_ctz(static_cast<unsigned>(mask));
    q += 16;
  }
#endif
  while (q < end) {
    const auto c = static_cast<unsigned char>(*q);
    if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) return q;
    ++q;
  }
  return q;
}

// Length of the well-formed UTF-8 sequence at q (RFC 3629, as nlohmann
// checks it: no overlongs, no surrogates, nothing above U+10FFFF), or 0.
inline int utf8_length(const char* q, const char* end) {
  const auto at = [&](std::ptrdiff_t i) { return static_cast<unsigned char>(q[i]); };
  const auto in = [](unsigned char c, unsigned lo, unsigned hi) { return c >= lo && c <= hi; };
  const std::ptrdiff_t avail = end - q;
  const unsigned char c = at(0);
  if (in(c, 0xC2, 0xDF)) return avail >= 2 && in(at(1), 0x80, 0xBF) ? 2 : 0;
  if (c == 0xE0) return avail >= 3 && in(at(1), 0xA0, 0xBF) && in(at(2), 0x80, 0xBF) ? 3 : 0;
  if (in(c, 0xE1, 0xEC) || c == 0xEE || c == 0xEF)
    return avail >= 3 && in(at(1), 0x80, 0xBF) && in(at(2), 0x80, 0xBF) ? 3 : 0;
  if (c == 0xED) return avail >= 3 && in(at(1), 0x80, 0x9F) && in(at(2), 0x80, 0xBF) ? 3 : 0;
  if (c == 0xF0) return avail >= 4 && in(at(1), 0x90, 0xBF) && in(at(2), 0x80, 0xBF) && in(at(3), 0x80, 0xBF) ? 4 : 0;
  if (in(c, 0xF1, 0xF3))
    return avail >= 4 && in(at(1), 0x80, 0xBF) && in(at(2), 0x80, 0xBF) && in(at(3), 0x80, 0xBF) ? 4 : 0;
  if (c == 0xF4) return avail >= 4 && in(at(1), 0x80, 0x8F) && in(at(2), 0x80, 0xBF) && in(at(3), 0x80, 0xBF) ? 4 : 0;
  return 0;
}

inline int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
// Four hex digits at q (bounds checked by the caller), or -1.
inline long hex4(const char* q) {
  long value = 0;
  for (int i = 0; i < 4; ++i) {
    const int digit = hex_value(q[i]);
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

// Appends code point cp (at most U+10FFFF, not a surrogate) as UTF-8.
inline void append_utf8(std::string& out, unsigned long cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace detail::kineto
}  // namespace v1
}  // namespace stepscope

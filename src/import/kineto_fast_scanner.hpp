// The fast path of the Kineto importer: a hand-written streaming scanner
// specialised for Chrome-trace JSON. It walks the document once over a
// ChunkWindow, decodes only the values the importer uses (ph, cat, name, ts,
// dur, pid, tid and four args) and skips everything else at vector speed,
// while still validating it as strictly as nlohmann does (string escapes,
// UTF-8, control characters, number grammar, literals, nesting).
//
// Contract with kineto_reader.cpp: run() returns true only for a document
// nlohmann would accept and that imports without error; the TraceBuilder then
// holds exactly what the nlohmann SAX path builds, because every value that
// matters goes through the same TraceBuilder calls in the same order. For
// anything else (malformed JSON, a field of the wrong kind that makes the
// import fail, numbers nlohmann parses differently, very deep nesting, an
// event near max_event_bytes, a decoder error) it gives up with a reason and
// the caller re-imports with the nlohmann parser, which produces the precise
// error message or result. Internal; included by kineto_reader.cpp only.
#pragma once

#include <atomic>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "import/byte_source.hpp"
#include "import/kineto_semantics.hpp"
#include "import/trace_import.hpp"
#include "stepscope/export.hpp"

namespace stepscope {
inline namespace v1 {
namespace detail::kineto {

// --- numbers -----------------------------------------------------------------

struct NumberRead {
  enum Status : std::uint8_t { ok, invalid, give_up } status = ok;
  const char* end = nullptr;  // just past the number (ok)
  const char* reason = "";    // give_up: why
};

// Numbers longer than this are left to nlohmann (it accepts any length;
// Kineto never writes them). Callers make kMaxNumberChars + 1 bytes available
// when the stream has them, so a shorter number is never cut by the window.
constexpr std::ptrdiff_t kMaxNumberChars = 64;

constexpr double kPowersOfTen[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                     1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

inline bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// Eight ASCII digits (the first in the lowest byte, bytes already minus '0')
// as their value: combine pairs, then quads, then both halves.
STEPSCOPE_DETAIL_ALWAYS_INLINE std::uint64_t eight_digits_value(std::uint64_t chunk) {
  chunk = (chunk * 10) + (chunk >> 8);
  return (((chunk & 0x000000FF000000FFull) * (100 + (1000000ull << 32))) +
          (((chunk >> 16) & 0x000000FF000000FFull) * (1 + (10000ull << 32)))) >>
         32;
}

// Per byte of `chunk`: zero where the byte is '0'..'9' (high nibble 3, and
// adding 6 does not carry into it), non-zero elsewhere. A carry out of a
// non-digit byte may disturb the bytes above it, never the digits below it,
// so the lowest non-zero byte is the first non-digit.
STEPSCOPE_DETAIL_ALWAYS_INLINE std::uint64_t non_digit_bytes(std::uint64_t chunk) {
  return ((chunk & 0xF0F0F0F0F0F0F0F0ull) | (((chunk + 0x0606060606060606ull) & 0xF0F0F0F0F0F0F0F0ull) >> 4)) ^
         0x3333333333333333ull;
}

// Consumes the digits at q, folding them into value (value * 10 + digit,
// wrapping past 19 digits: callers check the count). Eight at a time while
// eight bytes are available (SWAR; a Kineto timestamp has 16 integer digits).
// With Padded (at least 8 readable bytes after `end`, as the scanner's
// window guarantees), the last 1-7 digits are folded from one 8-byte load
// too, instead of a byte loop whose exit the branch predictor misses for
// every number of a new length (pids, durations, the 3 fraction digits).
template <bool Padded = false>
STEPSCOPE_DETAIL_ALWAYS_INLINE const char* fold_digits(const char* q, const char* end, std::uint64_t& value) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  while (Padded || end - q >= 8) {
    std::uint64_t chunk;
    std::memcpy(&chunk, q, 8);
    const std::uint64_t others = non_digit_bytes(chunk);
    if (others != 0) {
      if constexpr (Padded) {
        std::ptrdiff_t digits = __builtin_ctzll(others) / 8;
        if (digits > end - q) digits = end - q;  // bytes past the end are not the number's
        if (digits == 0) return q;
        // The digits into the high bytes, zeros (leading zeros) below them.
        // Digit bytes minus '0' borrow nothing: the bytes below them are digits.
        chunk = (chunk - 0x3030303030303030ull) << (8 * (8 - digits));
        static constexpr std::uint64_t kScale[8] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000};
        value = value * kScale[digits] + eight_digits_value(chunk);
        return q + digits;
      }
      break;
    }
    if (Padded && end - q < 8) break;  // eight digits straddling the end: the byte loop below
    value = value * 100000000ull + eight_digits_value(chunk - 0x3030303030303030ull);
    q += 8;
  }
#endif
  while (q < end && is_digit(*q)) {
    value = value * 10 + static_cast<unsigned>(*q - '0');
    ++q;
  }
  return q;
}

// The double nearest to mantissa / 10^fraction_digits (ties to even), for a
// mantissa of at most 19 digits and no exponent: what strtod returns for a
// decimal like 1712195495519695.812 (19 digits, beyond Clinger's fast path),
// computed with integer divisions instead of a general conversion. The
// quotient gets 53 (or 54) significant bits; the remainder decides the rounding.
inline double decimal_to_double(std::uint64_t mantissa, int fraction_digits) {
  if (mantissa == 0) return 0.0;
  static constexpr std::uint64_t kPow10[20] = {1ull,
                                               10ull,
                                               100ull,
                                               1000ull,
                                               10000ull,
                                               100000ull,
                                               1000000ull,
                                               10000000ull,
                                               100000000ull,
                                               1000000000ull,
                                               10000000000ull,
                                               100000000000ull,
                                               1000000000000ull,
                                               10000000000000ull,
                                               100000000000000ull,
                                               1000000000000000ull,
                                               10000000000000000ull,
                                               100000000000000000ull,
                                               1000000000000000000ull,
                                               10000000000000000000ull};
  const std::uint64_t power = kPow10[fraction_digits];
  // Kineto's timestamps (16 integer digits, 3 of fraction) in 64 bits: the
  // integer part I (1 to 53 bits) shifted left by `shift` fills 53 bits, and
  // the fraction R / power, scaled by the same 2^shift, adds below it. R <
  // power, so R << shift fits in 64 bits when power's bits plus the shift
  // do; then mantissa * 2^shift / power = (I << shift) + (R << shift) /
  // power exactly, and the remainder of that division rounds. Two 64-bit
  // divisions instead of a 128-bit one (a libgcc call, ~30 instructions).
  const std::uint64_t integer = mantissa / power;
  if (integer != 0 && integer >> 53 == 0) {
    const int shift = 53 - (64 - __builtin_clzll(integer));  // 0..52
    const int power_bits = 64 - __builtin_clzll(power);
    if (power_bits + shift <= 64) {
      const std::uint64_t scaled = (mantissa - integer * power) << shift;
      std::uint64_t quotient = (integer << shift) + scaled / power;  // < 2^53
      const std::uint64_t remainder = scaled % power;
      const std::uint64_t to_next = power - remainder;  // remainder * 2 might not fit
      if (remainder > to_next || (remainder == to_next && (quotient & 1) != 0)) ++quotient;
      int exponent = 52 - shift;  // quotient in [2^52, 2^53]: value = quotient * 2^-shift
      if (quotient >> 53 != 0) {
        quotient >>= 1;  // exactly 2^53: rounded up to the next power of two
        ++exponent;
      }
      const std::uint64_t bits = static_cast<std::uint64_t>(exponent + 1023) << 52 | (quotient & ((1ull << 52) - 1));
      double value;
      std::memcpy(&value, &bits, sizeof value);
      return value;
    }
  }
  // Anything else (an integer part of 0 or above 2^53, long fractions): one
  // 128-bit division. The quotient gets 53 or 54 significant bits.
  __extension__ typedef unsigned __int128 u128;  // GCC and Clang; __extension__ keeps -Wpedantic quiet
  const int mantissa_bits = 64 - __builtin_clzll(mantissa);
  const int power_bits = 64 - __builtin_clzll(power);
  // mantissa * 2^shift / power lies in (2^52, 2^54).
  int shift = 53 - mantissa_bits + power_bits;
  const u128 numerator = shift >= 0 ? static_cast<u128>(mantissa) << shift : static_cast<u128>(mantissa);
  const u128 denominator = shift >= 0 ? static_cast<u128>(power) : static_cast<u128>(power) << -shift;
  std::uint64_t quotient = static_cast<std::uint64_t>(numerator / denominator);
  const u128 remainder = numerator % denominator;
  bool round_up = false;
  if (quotient >> 53 != 0) {
    // 54 bits: the dropped bit and the remainder are the fraction beyond the last kept bit.
    const bool half = (quotient & 1) != 0;
    quotient >>= 1;
    --shift;
    round_up = half && (remainder != 0 || (quotient & 1) != 0);
  } else {
    const u128 twice = remainder * 2;
    round_up = twice > denominator || (twice == denominator && (quotient & 1) != 0);
  }
  if (round_up && ++quotient >> 53 != 0) {
    quotient >>= 1;
    --shift;
  }
  // quotient in [2^52, 2^53): value = quotient * 2^-shift = 1.f * 2^(52 - shift).
  const std::uint64_t bits = static_cast<std::uint64_t>(52 - shift + 1023) << 52 | (quotient & ((1ull << 52) - 1));
  double value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// Reads the JSON number at [begin, end) (the grammar of RFC 8259; what
// follows it is the caller's business). With want_value, `out` gets
// nlohmann's reading of it: negative integers as int64 (number_integer),
// other integers as uint64 (number_unsigned), anything with a fraction or
// exponent as the correctly rounded double (number_float), the value strtod
// gives. Gives up on what nlohmann reads differently or refuses: integers
// that overflow (nlohmann turns them into doubles), exponents out of double
// range (an error there), and very long numbers.
// Padded: at least 8 readable bytes follow `end` (whatever they hold).
template <bool Padded = false>
STEPSCOPE_DETAIL_ALWAYS_INLINE NumberRead read_json_number(const char* begin, const char* end, bool want_value,
                                                           Scalar& out) {
  NumberRead read;
  const char* q = begin;
  const bool negative = q < end && *q == '-';
  if (negative) ++q;
  if (q == end) {
    read.status = NumberRead::invalid;
    return read;
  }
  std::uint64_t mantissa = 0;  // all digits, integer and fraction (exact when 19 or fewer)
  const char* const integer_begin = q;
  if (*q == '0') {
    ++q;
  } else if (*q >= '1' && *q <= '9') {
    q = fold_digits<Padded>(q, end, mantissa);
  } else {
    read.status = NumberRead::invalid;
    return read;
  }
  const std::uint64_t integer_value = mantissa;
  const std::ptrdiff_t integer_digits = q - integer_begin;
  std::ptrdiff_t fraction_digits = 0;
  bool fraction = false, exponent = false;
  if (q < end && *q == '.') {
    ++q;
    if (q == end || !is_digit(*q)) {
      read.status = NumberRead::invalid;
      return read;
    }
    const char* const fraction_begin = q;
    q = fold_digits<Padded>(q, end, mantissa);
    fraction_digits = q - fraction_begin;
    fraction = true;
  }
  if (q < end && (*q == 'e' || *q == 'E')) {
    ++q;
    if (q < end && (*q == '+' || *q == '-')) ++q;
    if (q == end || !is_digit(*q)) {
      read.status = NumberRead::invalid;
      return read;
    }
    while (q < end && is_digit(*q)) ++q;
    exponent = true;
  }
  if (q - begin > kMaxNumberChars) {
    read.status = NumberRead::give_up;
    read.reason = "very long number";
    return read;
  }
  read.end = q;
  if (fraction || exponent) {
    // Without an exponent a number this short is finite and nlohmann accepts
    // it; with one it may overflow (an error there) or underflow.
    if (!want_value && !exponent) return read;
    double value = 0;
    if (!exponent && integer_digits + fraction_digits <= 15) {
      // Clinger's fast path: the digits as an integer (< 10^15 < 2^53) and the
      // power of ten (<= 10^22) are exact doubles, so one IEEE division is
      // correctly rounded: durations like 63.813 take this path.
      value = static_cast<double>(mantissa) / kPowersOfTen[fraction_digits];
      if (negative) value = -value;
    } else if (!exponent && integer_digits + fraction_digits <= 19) {
      // Kineto's nanosecond timestamps (16 + 3 digits).
      value = decimal_to_double(mantissa, static_cast<int>(fraction_digits));
      if (negative) value = -value;
    } else {
      const auto [end_of_number, ec] = std::from_chars(begin, q, value);
      if (ec != std::errc() || end_of_number != q) {
        read.status = NumberRead::give_up;
        read.reason = "number out of double range";
        return read;
      }
    }
    out.type = ValueType::number_float;
    out.floating = value;
    out.number_text = std::string_view(begin, static_cast<std::size_t>(q - begin));
    return read;
  }
  if (!want_value) return read;
  // 19 digits always fit in uint64 (the folded value is exact); 20 may. nlohmann
  // reads larger integers, and negative ones beyond int64, as doubles: leave
  // those to it.
  std::uint64_t magnitude = integer_value;
  bool fits = integer_digits <= 19;
  if (integer_digits == 20) {
    const auto [end_of_number, ec] = std::from_chars(integer_begin, q, magnitude);
    fits = ec == std::errc() && end_of_number == q;
  }
  if (negative && magnitude > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) + 1) fits = false;
  if (!fits) {
    read.status = NumberRead::give_up;
    read.reason = "integer out of range";
    return read;
  }
  if (negative) {
    out.type = ValueType::number_integer;
    out.integer = static_cast<std::int64_t>(0 - magnitude);
  } else {
    out.type = ValueType::number_unsigned;
    out.unsigned_value = magnitude;
  }
  return read;
}

// Parsing a whole document on two threads. A helper scanner starts at a
// split point S, the '{' of what a byte search takes for an element of
// traceEvents, and parses from there to the end of the document into its own
// TraceBuilder; the main scanner parses from the start. When the main scanner
// reaches S exactly at the start of an element of its traceEvents array, S
// really was one, so the helper parsed what the main scanner would have
// parsed from there, in the same state: the main scanner stops and its
// caller appends the helper's result. When it passes S without landing on it
// (the search matched text inside a string or a nested value) or the helper
// failed, the main scanner carries on alone. Either way the answer is the
// main scanner's own, never a guess.
class SplitHandoff {
 public:
  virtual ~SplitHandoff() = default;
  // The main scanner is at S, at the start of an element: true when the
  // helper parsed the rest of the document (waits for it to finish).
  virtual bool take_over() = 0;
  // The main scanner went past S: stop the helper, its work is not used.
  virtual void abandon() = 0;
};

class FastScanner {
 public:
  FastScanner(const ImportOptions& options, ChunkWindow& window, TraceBuilder& builder)
      : window_(window),
        builder_(builder),
        // KinetoSax checks an event's size at each of its keys, measured from
        // just after '{' to just after the key; staying 16 bytes under the
        // limit leaves any borderline event to the exact parser.
        event_size_limit_(options.max_event_bytes > kEventSizeMargin ? options.max_event_bytes - kEventSizeMargin : 0),
        max_events_(options.max_events),
        whole_document_(window.whole_document()) {
    p_ = window_.begin();
    end_ = window_.end();
  }
  FastScanner(const FastScanner&) = delete;
  FastScanner& operator=(const FastScanner&) = delete;

  // Main scanner of a split parse: hand over to `handoff` on reaching the
  // stream offset `split` at the start of a traceEvents element.
  void set_split(std::uint64_t split, SplitHandoff* handoff) {
    split_offset_ = split;
    split_ = handoff;
  }
  // True after run() when the rest of the document, from the split on, is
  // the helper's (the builder holds only what came before it).
  bool handed_over() const { return handed_over_; }

  // Helper scanner of a split parse: `start` is the '{' of a traceEvents
  // element; parses the rest of that array and of the document (the
  // top-level object when object_document, else the array was the
  // document). Gives up on anything that would need the main scanner's
  // state: another traceEvents array or trace metadata after the split.
  // Checks `cancel` after every event.
  bool run_from_split(const char* start, bool object_document, const std::atomic<bool>& cancel) {
    p_ = start;
    for (;;) {
      if (*p_ != '{') return give_up("a traceEvents element is not an object");
      if (!event()) return false;
      if (cancel.load(std::memory_order_relaxed)) return give_up("cancelled");
      if (!skip_whitespace()) return invalid();
      if (*p_ == ',') {
        ++p_;
        if (!skip_whitespace()) return invalid();
        continue;
      }
      if (*p_ != ']') return invalid();
      ++p_;
      break;
    }
    if (object_document) {
      // The members after traceEvents, as top_object() reads them.
      for (;;) {
        if (!skip_whitespace()) return invalid();
        if (*p_ == '}') {
          ++p_;
          break;
        }
        if (*p_ != ',') return invalid();
        ++p_;
        if (!skip_whitespace() || *p_ != '"') return invalid();
        ++p_;
        std::string_view key;
        if (!short_string(key)) return false;
        if (top_key(key) != Key::other) return give_up("traceEvents or trace metadata after the split");
        if (!expect(':') || !skip_whitespace()) return invalid();
        if (!skip_value(1)) return false;
      }
    }
    if (skip_whitespace()) return give_up("data after the JSON document");
    return true;
  }

  // True: the whole document was read and the builder holds the trace.
  // False: give_up_reason() says why; the builder's state is then garbage.
  bool run() {
    if (!skip_whitespace()) return give_up("no JSON value");
    if (*p_ == '{') {
      if (!top_object()) return false;
    } else if (*p_ == '[') {
      // The Chrome "JSON Array Format": the document is the event list.
      saw_trace_events_ = true;
      if (!events_array()) return false;
    } else {
      return give_up("the document is not an object or array");
    }
    if (handed_over_) return true;  // the helper read the rest
    if (skip_whitespace()) return give_up("data after the JSON document");
    return true;
  }

  const char* give_up_reason() const { return reason_; }
  // It gave up at ImportOptions::max_events: the import's answer, not a
  // reason to try the exact parser.
  bool over_limit() const { return over_limit_; }
  bool saw_trace_events() const { return saw_trace_events_; }
  std::uint64_t events_seen() const { return events_seen_; }
  // Uncompressed bytes consumed (the whole stream after a successful run).
  std::uint64_t position() const { return window_.offset_of(p_); }

 private:
  static constexpr std::size_t kEventSizeMargin = 16;
  // Deeper nesting goes to nlohmann, which has no recursion limit.
  static constexpr int kMaxDepth = 200;

  bool give_up(const char* reason) {
    if (reason_ == nullptr) reason_ = reason;
    return false;
  }
  bool invalid() { return give_up("invalid JSON"); }

  // --- window ----------------------------------------------------------------
  bool refill() {
    const bool more = window_.refill(p_);
    end_ = window_.end();
    return more;
  }
  // At least n bytes at p_, unless the stream ends first.
  void ensure(std::ptrdiff_t n) {
    while (end_ - p_ < n && refill()) {
    }
  }

  STEPSCOPE_DETAIL_ALWAYS_INLINE static bool is_whitespace(char c) {
    // ' ' is 0x20, the others below it: one compare rejects most bytes.
    return static_cast<unsigned char>(c) <= 0x20 && (c == ' ' || c == '\n' || c == '\r' || c == '\t');
  }

  // Skips JSON whitespace; false at the end of the stream, else p_ < end_.
  // Inlined: called between every two tokens, and usually finds none or one.
  STEPSCOPE_DETAIL_ALWAYS_INLINE bool skip_whitespace() {
    // Kineto's layout: nothing or one space after ':' and ',', else a newline
    // and indentation. A byte above 0x20 is never whitespace; the padding
    // after end_ makes p_[1] readable.
    if (p_ < end_) {
      const auto c = static_cast<unsigned char>(*p_);
      if (c > 0x20) return true;
      if (c == ' ' && static_cast<unsigned char>(p_[1]) > 0x20 && end_ - p_ >= 2) {
        ++p_;
        return true;
      }
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
      // A newline and up to 7 spaces of indentation (Kineto's layout after
      // '{', '[' and at the end of a line): one 8-byte load counts them.
      if (c == '\n' && end_ - p_ >= 9) {
        std::uint64_t next;
        std::memcpy(&next, p_ + 1, 8);
        const std::uint64_t not_space = next ^ 0x2020202020202020ull;
        if (not_space != 0) {
          const int spaces = __builtin_ctzll(not_space) / 8;
          if (static_cast<unsigned char>(p_[1 + spaces]) > 0x20) {
            p_ += 1 + spaces;
            return true;
          }
        }
      }
#endif
    }
    return skip_whitespace_run();
  }
  STEPSCOPE_DETAIL_NOINLINE bool skip_whitespace_run() {
    for (;;) {
#if defined(__SSE2__)
      while (end_ - p_ >= 16) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p_));
        const __m128i blank =
            _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8(' ')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\n'))),
                         _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('\r')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\t'))));
        const unsigned other = ~static_cast<unsigned>(_mm_movemask_epi8(blank)) & 0xFFFFu;
        if (other != 0) {
          p_ += __builtin_ctz(other);
          return true;
        }
        p_ += 16;
      }
#endif
      while (p_ < end_) {
        if (!is_whitespace(*p_)) return true;
        ++p_;
      }
      if (!refill()) return false;
    }
  }
  // Whether the two bytes at q are a then b, with one 16-bit compare (the
  // caller made them readable).
  STEPSCOPE_DETAIL_ALWAYS_INLINE static bool bytes_are(const char* q, char a, char b) {
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

  // Skips whitespace and one expected structural character.
  STEPSCOPE_DETAIL_ALWAYS_INLINE bool expect(char c) {
    if (!skip_whitespace() || *p_ != c) return false;
    ++p_;
    return true;
  }

  // --- strings ---------------------------------------------------------------
  // First byte in [q, end) that needs attention inside a string: '"', '\\',
  // a control character (< 0x20) or the start of a multi-byte UTF-8 sequence.
  static const char* find_special(const char* q, const char* end) {
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
  static int utf8_length(const char* q, const char* end) {
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

  static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  // Four hex digits at q (bounds checked by the caller), or -1.
  static long hex4(const char* q) {
    long value = 0;
    for (int i = 0; i < 4; ++i) {
      const int digit = hex_value(q[i]);
      if (digit < 0) return -1;
      value = value * 16 + digit;
    }
    return value;
  }

  void append_utf8(std::string& out, unsigned long cp) {
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

  // One escape sequence at p_ ('\\'); appends its text when Keep. The caller
  // made 12 bytes available when the stream has them.
  template <bool Keep>
  bool escape() {
    if (end_ - p_ < 2) return invalid();
    char decoded = 0;
    switch (p_[1]) {
      case '"':
        decoded = '"';
        break;
      case '\\':
        decoded = '\\';
        break;
      case '/':
        decoded = '/';
        break;
      case 'b':
        decoded = '\b';
        break;
      case 'f':
        decoded = '\f';
        break;
      case 'n':
        decoded = '\n';
        break;
      case 'r':
        decoded = '\r';
        break;
      case 't':
        decoded = '\t';
        break;
      case 'u': {
        if (end_ - p_ < 6) return invalid();
        long cp = hex4(p_ + 2);
        if (cp < 0) return invalid();
        p_ += 6;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          // A high surrogate must be followed by an escaped low surrogate.
          if (end_ - p_ < 6 || p_[0] != '\\' || p_[1] != 'u') return invalid();
          const long low = hex4(p_ + 2);
          if (low < 0xDC00 || low > 0xDFFF) return invalid();
          cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          p_ += 6;
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
          return invalid();
        }
        if constexpr (Keep) append_utf8(scratch_, static_cast<unsigned long>(cp));
        return true;
      }
      default:
        return invalid();
    }
    if constexpr (Keep) scratch_.push_back(decoded);
    p_ += 2;
    return true;
  }

  // p_ just past an opening quote; on success p_ is past the closing quote.
  // Keep: *out is the decoded text, a view into the window (no copy) unless
  // the string had escapes or straddled a refill; valid until the next scan.
  template <bool Keep>
  bool string(std::string_view* out) {
    bool in_scratch = false;
    if constexpr (Keep) scratch_.clear();
    const char* start = p_;
    const char* q = p_;
    for (;;) {
      q = find_special(q, end_);
      if (q == end_) {
        if constexpr (Keep) {
          scratch_.append(start, q);
          in_scratch = true;
        }
        p_ = q;
        if (!refill()) return invalid();  // unterminated string
        q = start = p_;
        continue;
      }
      const auto c = static_cast<unsigned char>(*q);
      if (c == '"') {
        if constexpr (Keep) {
          if (in_scratch) {
            scratch_.append(start, q);
            *out = scratch_;
          } else {
            *out = std::string_view(start, static_cast<std::size_t>(q - start));
          }
        }
        p_ = q + 1;
        return true;
      }
      if (c == '\\') {
        if constexpr (Keep) {
          scratch_.append(start, q);
          in_scratch = true;
        }
        p_ = q;
        ensure(12);  // may move the window: everything before p_ is flushed
        if (!escape<Keep>()) return false;
        q = start = p_;
        continue;
      }
      if (c < 0x20) return invalid();  // control characters must be escaped
      if (end_ - q < 4) {
        if constexpr (Keep) {
          scratch_.append(start, q);
          in_scratch = true;
        }
        p_ = q;
        ensure(4);
        q = start = p_;
      }
      const int length = utf8_length(q, end_);
      if (length == 0) return invalid();
      q += length;
    }
  }

  // A string that is usually short and plain (p_ past its opening quote):
  // keys, and the values of ph, cat and most names. When the closing quote
  // is within the next 16 bytes with nothing special before it, one vector
  // compare finds it; anything else takes string<true>.
  STEPSCOPE_DETAIL_ALWAYS_INLINE bool short_string(std::string_view& out) {
#if defined(__SSE2__)
    if (end_ - p_ >= 16) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p_));
      const __m128i hits =
          _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))),
                       _mm_cmplt_epi8(v, _mm_set1_epi8(0x20)));
      const int mask = _mm_movemask_epi8(hits);
      if (mask != 0) {
        const int at = __builtin_ctz(static_cast<unsigned>(mask));
        if (p_[at] == '"') {
          out = std::string_view(p_, static_cast<std::size_t>(at));
          p_ += at + 1;
          return true;
        }
      }
    }
#endif
    return string<true>(&out);
  }

  // --- scalars ---------------------------------------------------------------
  // A number at p_ (see read_json_number). Inlined so that want_value is a
  // constant and the skipping variant drops the value arithmetic.
  STEPSCOPE_DETAIL_ALWAYS_INLINE bool number(Scalar& s, bool want_value) {
    if (end_ - p_ <= kMaxNumberChars) ensure(kMaxNumberChars + 1);
    // The window keeps kPadding readable bytes after end_.
    static_assert(ChunkWindow::kPadding >= 8, "fold_digits<true> loads 8 bytes at the end");
    const NumberRead read = read_json_number<true>(p_, end_, want_value, s);
    if (read.status == NumberRead::invalid) return invalid();
    if (read.status == NumberRead::give_up) return give_up(read.reason);
    p_ = read.end;
    return true;
  }

  bool literal(Scalar& s) {
    ensure(5);
    const std::ptrdiff_t avail = end_ - p_;
    if (avail >= 4 && std::memcmp(p_, "true", 4) == 0) {
      s.type = ValueType::boolean;
      p_ += 4;
      return true;
    }
    if (avail >= 5 && std::memcmp(p_, "false", 5) == 0) {
      s.type = ValueType::boolean;
      p_ += 5;
      return true;
    }
    if (avail >= 4 && std::memcmp(p_, "null", 4) == 0) {
      s.type = ValueType::null;
      p_ += 4;
      return true;
    }
    return invalid();
  }

  // A scalar at p_ (not '{' or '['). Strings are decoded only with want_string.
  STEPSCOPE_DETAIL_ALWAYS_INLINE bool scalar(Scalar& s, bool want_string) {
    const char c = *p_;
    if (c == '"') {
      ++p_;
      s.type = ValueType::string;
      if (!want_string) return string<false>(nullptr);
      if (!short_string(s.string_value)) return false;
      // A whole document never moves; only a string with escapes lives in scratch_.
      s.stable_string = whole_document_ && s.string_value.data() != scratch_.data();
      return true;
    }
    if (c == '-' || is_digit(c)) return number(s, true);
    return literal(s);
  }

  // Validates and skips one value at p_ (after whitespace).
  bool skip_value(int depth) {
    const char c = *p_;
    if (c == '"') {
      ++p_;
      return string<false>(nullptr);
    }
    if (c == '{' || c == '[') return skip_container(depth);
    Scalar ignored;
    if (c == '-' || is_digit(c)) return number(ignored, false);
    return literal(ignored);
  }

  bool skip_container(int depth) {
    if (depth > kMaxDepth) return give_up("deep nesting");
    const char close = *p_ == '{' ? '}' : ']';
    const bool is_object = close == '}';
    ++p_;
    if (!skip_whitespace()) return invalid();
    if (*p_ == close) {
      ++p_;
      return true;
    }
    for (;;) {
      if (is_object) {
        if (*p_ != '"') return invalid();
        ++p_;
        if (!string<false>(nullptr) || !expect(':')) return invalid();
        if (!skip_whitespace()) return invalid();
      }
      if (!skip_value(depth + 1)) return false;
      if (!skip_whitespace()) return invalid();
      if (*p_ == ',') {
        ++p_;
        if (!skip_whitespace()) return invalid();
        continue;
      }
      if (*p_ == close) {
        ++p_;
        return true;
      }
      return invalid();
    }
  }

  // Walks the members of the object at p_ ('{'): for each, value(key_of(key))
  // with p_ at the value (after whitespace); value must consume it.
  template <typename KeyOf, typename Value>
  bool object(KeyOf key_of, Value value) {
    ++p_;
    if (!skip_whitespace()) return invalid();
    if (*p_ == '}') {
      ++p_;
      return true;
    }
    for (;;) {
      if (*p_ != '"') return invalid();
      ++p_;
      std::string_view key;
      if (!short_string(key)) return false;
      const Key current = key_of(key);
      // Kineto writes `"key": value`: one compare of the two bytes after
      // the key and a look at the third stands for expect(':') and both
      // whitespace skips.
      if (end_ - p_ >= 3 && bytes_are(p_, ':', ' ') && static_cast<unsigned char>(p_[2]) > 0x20) {
        p_ += 2;
      } else if (!expect(':') || !skip_whitespace()) {
        return invalid();
      }
      if (!value(current)) return false;
      if (handed_over_) return true;  // only ever in the top-level object
      // And `, "` between members on one line.
      if (end_ - p_ >= 3 && bytes_are(p_, ',', ' ') && p_[2] == '"') {
        p_ += 2;
        continue;
      }
      if (!skip_whitespace()) return invalid();
      if (*p_ == ',') {
        ++p_;
        if (!skip_whitespace()) return invalid();
        continue;
      }
      if (*p_ == '}') {
        ++p_;
        return true;
      }
      return invalid();
    }
  }

  // Same for the elements of the array at p_ ('[').
  template <typename Element>
  bool array(Element&& element) {
    ++p_;
    if (!skip_whitespace()) return invalid();
    if (*p_ == ']') {
      ++p_;
      return true;
    }
    for (;;) {
      if (!element()) return false;
      if (handed_over_) return true;  // only ever in traceEvents
      if (!skip_whitespace()) return invalid();
      if (*p_ == ',') {
        ++p_;
        if (!skip_whitespace()) return invalid();
        continue;
      }
      if (*p_ == ']') {
        ++p_;
        return true;
      }
      return invalid();
    }
  }

  // --- the document ------------------------------------------------------------
  bool top_object() {
    return object([](std::string_view k) { return top_key(k); },
                  [this](Key current) {
                    const char c = *p_;
                    switch (current) {
                      case Key::trace_events:
                        if (c != '[') return give_up("\"traceEvents\" is not an array");
                        saw_trace_events_ = true;
                        return events_array();
                      case Key::distributed_info:
                        return c == '{' ? distributed_info() : skip_value(1);
                      case Key::device_properties:
                        return c == '[' ? device_properties() : skip_value(1);
                      default:
                        return skip_value(1);
                    }
                  });
  }

  bool events_array() {
    return array([this] {
      if (window_.offset_of(p_) >= split_offset_ && reached_split()) return true;
      if (*p_ != '{') return give_up("a traceEvents element is not an object");
      return event();
    });
  }

  // At or past the split, at the start of a traceEvents element. True: the
  // helper has the rest.
  STEPSCOPE_DETAIL_NOINLINE bool reached_split() {
    const bool exact = window_.offset_of(p_) == split_offset_;
    split_offset_ = kNoSplit;
    SplitHandoff* const handoff = split_;
    split_ = nullptr;
    if (exact && handoff->take_over()) {
      handed_over_ = true;
      return true;
    }
    if (!exact) handoff->abandon();
    return false;
  }

  bool event() {
    if (events_seen_ >= max_events_) {
      over_limit_ = true;
      return give_up("more events than max_events");
    }
    const std::uint64_t event_start = window_.offset_of(p_) + 1;  // just after '{', as KinetoSax measures
    event_.reset();
    const bool ok = object(
        [](std::string_view k) { return event_key(k); },
        [this](Key current) {
          if (current == Key::other) return skip_value(1);
          const char c = *p_;
          if (c == '{' || c == '[') return builder_.event_container(event_, current, c == '{') ? args() : skip_value(1);
          // tid strings are decoded too: a legacy trace may write "tid": "1".
          return scalar_member(current == Key::ph || current == Key::cat || current == Key::name || current == Key::tid,
                               1, [&](const Scalar& v) {
                                 builder_.event_scalar(event_, current, v);
                                 return true;
                               });
        });
    if (!ok) return false;
    // KinetoSax measures the event at each of its keys; every key lies
    // before the closing brace, so an event whose brace is within the limit
    // (minus the margin) passed all those checks. One check per event
    // instead of one per key; it may give up on an event the exact parser
    // takes (a long last value), which is allowed.
    if (window_.offset_of(p_) - event_start > event_size_limit_) return give_up("event near max_event_bytes");
    ++events_seen_;
    switch (builder_.finish_event(event_)) {
      case EventVerdict::kept:
      case EventVerdict::ignored:
        return true;
      default:
        return give_up("an event the importer rejects");
    }
  }

  // The scalar value at p_ (a string decoded when `text`) handed to take;
  // a nested object or array is skipped (`depth`: how deep it may nest).
  template <typename Take>
  bool scalar_member(bool text, int depth, Take take) {
    if (*p_ == '{' || *p_ == '[') return skip_value(depth);
    Scalar value;
    return scalar(value, text) && take(value);
  }

  bool args() {
    return object([](std::string_view k) { return args_key(k); },
                  [this](Key current) {
                    if (current == Key::other) return skip_value(2);
                    return scalar_member(false, 2, [&](const Scalar& v) {
                      TraceBuilder::args_scalar(event_, current, v);
                      return true;
                    });
                  });
  }

  bool distributed_info() {
    return object([](std::string_view k) { return distributed_key(k); },
                  [this](Key current) {
                    return scalar_member(current == Key::backend, 2, [&](const Scalar& v) {
                      const char* field = nullptr;
                      return builder_.distributed_scalar(current, v, field) || give_up("bad distributedInfo");
                    });
                  });
  }

  bool device_properties() {
    const auto member = [this](Key current) {
      return scalar_member(current == Key::device_name, 3, [&](const Scalar& v) {
        builder_.device_scalar(current, v);
        return true;
      });
    };
    return array([&] {
      // Junk entries are tolerated; past kMaxDevices, entries are skipped.
      if (*p_ != '{' || !builder_.begin_device()) return skip_value(2);
      return object([](std::string_view k) { return device_key(k); }, member);
    });
  }

  static constexpr std::uint64_t kNoSplit = ~std::uint64_t{0};

  ChunkWindow& window_;
  TraceBuilder& builder_;
  const std::uint64_t event_size_limit_;
  const std::uint64_t max_events_;
  const bool whole_document_;  // the window is the whole document: views into it stay valid
  std::uint64_t split_offset_ = kNoSplit;
  SplitHandoff* split_ = nullptr;
  bool handed_over_ = false;
  const char* p_ = nullptr;
  const char* end_ = nullptr;
  std::string scratch_;  // decoded text of strings with escapes or split by a refill
  EventFields event_;
  std::uint64_t events_seen_ = 0;
  bool saw_trace_events_ = false;
  bool over_limit_ = false;
  const char* reason_ = nullptr;
};

}  // namespace detail::kineto
}  // namespace v1
}  // namespace stepscope

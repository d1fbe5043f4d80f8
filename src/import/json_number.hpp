// JSON numbers for the Kineto importer's fast scanner (kineto_fast_scanner.hpp):
// read_json_number() checks a number against the grammar of RFC 8259 and
// reads it as nlohmann does (int64, uint64 or the correctly rounded double),
// or says when to leave it to nlohmann. Its helpers fold digits eight at a
// time (SWAR) and turn Kineto's 19-digit timestamps into doubles with integer
// divisions (decimal_to_double). Internal; used by FastScanner::number() and
// tested directly by tests/import/fast_path_test.cpp.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string_view>
#include <system_error>

#include "import/kineto_semantics.hpp"
#include "stepscope/export.hpp"

namespace stepscope {
inline namespace v1 {
namespace detail::kineto {

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

}  // namespace detail::kineto
}  // namespace v1
}  // namespace stepscope

// Safe printing of untrusted text (see printable.hpp for why).
#include "text/printable.hpp"

#include <cstdint>

namespace stepscope {
inline namespace v1 {
namespace detail {

namespace {

// Length of the UTF-8 sequence starting at text[i] and its code point, or 0
// when the bytes there are not valid UTF-8 (overlong forms, surrogates and
// values above U+10FFFF are not valid either).
std::size_t decode_utf8(std::string_view text, std::size_t i, std::uint32_t& code_point) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  std::size_t length = 0;
  std::uint32_t min_value = 0;
  if (lead < 0x80) {
    code_point = lead;
    return 1;
  } else if ((lead & 0xE0) == 0xC0) {
    length = 2, code_point = lead & 0x1F, min_value = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3, code_point = lead & 0x0F, min_value = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4, code_point = lead & 0x07, min_value = 0x10000;
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  for (std::size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    code_point = (code_point << 6) | (byte(i + k) & 0x3F);
  }
  if (code_point < min_value || code_point > 0x10FFFF || (code_point >= 0xD800 && code_point <= 0xDFFF)) return 0;
  return length;
}

bool needs_escape(std::uint32_t c) {
  return c < 0x20 || c == 0x7F || (c >= 0x80 && c <= 0x9F)  // C0, DEL, C1 (0x9B is CSI on many terminals)
         || (c >= 0x202A && c <= 0x202E) || (c >= 0x2066 && c <= 0x2069);  // bidirectional overrides
}

std::string escape_of(std::uint32_t c) {
  static const char* const kHex = "0123456789abcdef";
  switch (c) {
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    default:
      break;
  }
  if (c < 0x80) return std::string{'\\', 'x', kHex[c >> 4], kHex[c & 0xF]};
  std::string out = "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(c >> shift) & 0xF];
  return out;
}

std::string escape_text(std::string_view text, std::size_t max_chars, bool keep_newlines) {
  std::string out;
  out.reserve(text.size() < max_chars ? text.size() : max_chars);
  std::size_t chars = 0;
  for (std::size_t i = 0; i < text.size();) {
    std::uint32_t c = 0;
    const std::size_t length = decode_utf8(text, i, c);
    std::string_view piece;
    std::string escaped;
    std::size_t width = 1;
    if (length == 0) {  // not UTF-8: the byte's value, visibly
      escaped = std::string{'\\', 'x', "0123456789abcdef"[static_cast<unsigned char>(text[i]) >> 4],
                            "0123456789abcdef"[static_cast<unsigned char>(text[i]) & 0xF]};
      width = escaped.size();
    } else if (needs_escape(c) && !(keep_newlines && c == '\n')) {
      escaped = escape_of(c);
      width = escaped.size();
    } else {
      piece = text.substr(i, length);
    }
    if (max_chars != kNoCut && chars + width > max_chars) break;
    chars += width;
    if (escaped.empty())
      out.append(piece.data(), piece.size());
    else
      out += escaped;
    i += length == 0 ? 1 : length;
  }
  return out;
}

}  // namespace

std::string printable(std::string_view text, std::size_t max_chars) {
  return escape_text(text, max_chars, false);
}

std::string printable_lines(std::string_view text) {
  return escape_text(text, kNoCut, true);
}

std::string shortened(std::string_view text, std::size_t max_bytes, std::string_view marker) {
  if (text.size() <= max_bytes) return std::string(text);
  std::size_t cut = max_bytes > marker.size() ? max_bytes - marker.size() : 0;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 sequence
  return std::string(text.substr(0, cut)).append(marker);
}

}  // namespace detail
}  // namespace v1
}  // namespace stepscope

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
//
// Its stateless parts live beside it: json_number.hpp (reading numbers) and
// json_bytes.hpp (whitespace, string bytes, UTF-8, escapes); the field
// meanings and key tables are kineto_semantics.hpp's.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "import/byte_source.hpp"
#include "import/json_bytes.hpp"  // and, with SSE2, <emmintrin.h> for the vector code here too
#include "import/json_number.hpp"
#include "import/kineto_semantics.hpp"
#include "import/trace_import.hpp"
#include "stepscope/export.hpp"

namespace stepscope {
inline namespace v1 {
namespace detail::kineto {

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

  // Skips whitespace and one expected structural character.
  STEPSCOPE_DETAIL_ALWAYS_INLINE bool expect(char c) {
    if (!skip_whitespace() || *p_ != c) return false;
    ++p_;
    return true;
  }

  // --- strings ---------------------------------------------------------------
  // (find_special, utf8_length, hex4 and append_utf8: json_bytes.hpp.)
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

// Bounded, stack-safe reading of untrusted JSON inputs (see json_guard.hpp).
#include "report/json_guard.hpp"

#include "text/printable.hpp"

#include <fmt/format.h>
#include <zlib.h>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

namespace stepscope {
inline namespace v1 {
namespace detail {

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

// The top-level fields a stepscope report has (docs/report-schema.md).
// Written sorted, so "bottleneck" comes first; readers of the prefix accept
// any one of them, so a field added later does not break the check.
constexpr const char* kReportTopLevel[] = {"bottleneck",    "device",   "dropped_records", "findings", "phases",
                                           "ranks",         "run",      "schema_version",  "steps",    "system",
                                           "total_records", "warnings", "what_if"};

std::string hex_bytes(std::string_view bytes) {
  std::string out;
  for (std::size_t i = 0; i < bytes.size() && i < 8; ++i)
    out += fmt::format("{}{:02x}", i ? " " : "", static_cast<unsigned char>(bytes[i]));
  return out;
}

std::string key_list(const std::vector<std::string>& keys) {
  std::string out;
  for (std::size_t i = 0; i < keys.size() && i < 4; ++i) out += (i ? ", " : "") + printable(keys[i], 40);
  if (keys.size() > 4) out += ", ...";
  return out;
}

// Why the first bytes are not the start of `kind`, or "".
std::string prefix_problem(std::string_view prefix, bool whole_file, JsonInput kind) {
  const JsonShape shape = scan_json(prefix, kMaxJsonDepth, 64);
  const char* what = kind == JsonInput::report ? "a stepscope report" : "a Chrome trace";
  if (shape.empty) return "";  // the caller or the parser says so
  const bool object = shape.first == '{';
  if (!object && !(kind == JsonInput::chrome_trace && shape.first == '[')) {
    const auto start = prefix.find_first_not_of(" \t\r\n");
    const std::string first_bytes = hex_bytes(prefix.substr(start == std::string_view::npos ? 0 : start));
    // A JSON value starts with one of these; anything else is not JSON at all.
    const std::string_view rest = prefix.substr(start == std::string_view::npos ? 0 : start);
    const bool json_value = std::string_view("[{\"-0123456789").find(shape.first) != std::string_view::npos ||
                            rest.substr(0, 4) == "true" || rest.substr(0, 5) == "false" || rest.substr(0, 4) == "null";
    if (!json_value) return fmt::format("is not valid JSON, so not {} (first bytes: {})", what, first_bytes);
    return fmt::format("is not {}: it does not start with a JSON {} (first bytes: {})", what,
                       kind == JsonInput::report ? "object" : "object or array", first_bytes);
  }
  if (kind != JsonInput::report || !object) return "";
  const auto& keys = shape.top_level_keys;
  if (std::find(keys.begin(), keys.end(), "traceEvents") != keys.end())
    return "is a Chrome / PyTorch-profiler trace, not a stepscope report ('stepscope analyze' makes a report of it)";
  // A report's first fields are all within the prefix; a big document whose
  // first fields are none of a report's is something else.
  const bool known = std::any_of(keys.begin(), keys.end(), [](const std::string& k) {
    return std::any_of(std::begin(kReportTopLevel), std::end(kReportTopLevel), [&](const char* r) { return k == r; });
  });
  if (!whole_file && !keys.empty() && !known)
    return fmt::format("is not a stepscope report: its first top-level fields ({}) are not a report's", key_list(keys));
  return "";
}

}  // namespace

JsonShape scan_json(std::string_view text, std::size_t max_depth, std::size_t max_keys) {
  JsonShape shape;
  std::size_t i = 0;
  if (text.substr(0, 3) == "\xEF\xBB\xBF") i = 3;
  while (i < text.size() && is_space(text[i])) ++i;
  if (i < text.size()) {
    shape.empty = false;
    shape.first = text[i];
  }
  const bool top_object = shape.first == '{';
  std::size_t depth = 0;
  bool in_string = false, escaped = false;
  bool expect_key = top_object;  // at depth 1 of the top object, the next string is a key
  std::size_t string_start = 0;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
        if (expect_key && depth == 1 && shape.top_level_keys.size() < max_keys) {
          shape.top_level_keys.emplace_back(text.substr(string_start, i - string_start));
          expect_key = false;
        }
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        string_start = i + 1;
        break;
      case '{':
      case '[':
        if (++depth > max_depth) {
          shape.too_deep = true;
          shape.too_deep_at = i;
          shape.max_depth = depth;
          return shape;
        }
        shape.max_depth = std::max(shape.max_depth, depth);
        break;
      case '}':
      case ']':
        if (depth > 0) --depth;
        break;
      case ',':
        if (depth == 1 && top_object) expect_key = true;
        break;
      default:
        break;
    }
  }
  return shape;
}

std::string depth_problem(std::string_view text) {
  const JsonShape shape = scan_json(text, kMaxJsonDepth, 0);
  if (!shape.too_deep) return "";
  return fmt::format("nests deeper than {} levels (at byte {}); refused rather than risk a stack overflow",
                     kMaxJsonDepth, shape.too_deep_at);
}

bool read_json_input(const std::string& path, JsonInput kind, std::string& out, std::string& error) noexcept {
  try {
    out.clear();
    const std::string name = "'" + printable(path) + "'";
    struct stat st {};
    const bool have_size = ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
    // gzread passes plain files through unchanged.
    std::unique_ptr<gzFile_s, int (*)(gzFile)> f(gzopen(path.c_str(), "rb"), gzclose);
    if (f == nullptr) {
      error = "cannot open " + name + ": " + std::strerror(errno);
      return false;
    }
    auto fail_read = [&]() {
      int errnum = 0;
      const char* message = gzerror(f.get(), &errnum);
      error = "cannot read " + name + ": " + (errnum == Z_BUF_ERROR ? "truncated gzip data" : message);
      return false;
    };
    const auto too_big = [&](const std::string& size) {
      error = fmt::format("{} {} the {} MiB this tool reads whole", name, size, kMaxJsonInputBytes >> 20);
      return false;
    };
    // The prefix first: most non-inputs are refused after one read.
    std::string buffer(kJsonPrefixBytes, '\0');
    std::size_t filled = 0;
    while (filled < buffer.size()) {
      const int n = gzread(f.get(), &buffer[filled], static_cast<unsigned>(buffer.size() - filled));
      if (n < 0) return fail_read();
      if (n == 0) break;
      filled += static_cast<std::size_t>(n);
    }
    buffer.resize(filled);
    int errnum = 0;
    gzerror(f.get(), &errnum);
    if (errnum != Z_OK && errnum != Z_BUF_ERROR) return fail_read();
    const bool whole = gzeof(f.get()) != 0 || filled < kJsonPrefixBytes;
    if (const std::string why = prefix_problem(buffer, whole, kind); !why.empty()) {
      error = name + " " + why;
      return false;
    }
    if (gzdirect(f.get()) && have_size && static_cast<std::uint64_t>(st.st_size) > kMaxJsonInputBytes)
      return too_big(fmt::format("is {} MiB, more than", static_cast<std::uint64_t>(st.st_size) >> 20));
    out = std::move(buffer);
    char chunk[1 << 16];
    int n = 0;
    while (!whole && (n = gzread(f.get(), chunk, sizeof chunk)) > 0) {
      if (out.size() + static_cast<std::size_t>(n) > kMaxJsonInputBytes) {
        out.clear();
        out.shrink_to_fit();
        return too_big("decompresses to more than");
      }
      out.append(chunk, static_cast<std::size_t>(n));
    }
    gzerror(f.get(), &errnum);
    if (n < 0 || errnum != Z_OK) {
      out.clear();
      return fail_read();
    }
    return true;
  } catch (const std::exception& e) {
    out.clear();
    error = std::string("cannot read '") + path + "': " + e.what();
    return false;
  }
}

}  // namespace detail
}  // namespace v1
}  // namespace stepscope

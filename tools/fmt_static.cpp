// Part of the static `stepscope` binary (tools/CMakeLists.txt,
// STEPSCOPE_STATIC_CLI): Debian ships fmt as a shared library only, and the
// one function of it that the library and the tool call out of line is
// fmt::vformat. fmt's header-only mode defines it inline; taking its address
// here emits it once, for every object compiled against the shared fmt.
#undef FMT_SHARED
#define FMT_HEADER_ONLY 1
#include <fmt/format.h>

#include <string>

namespace stepscope_cli {
extern std::string (*const kFmtVformat)(fmt::string_view, fmt::format_args);
std::string (*const kFmtVformat)(fmt::string_view, fmt::format_args) = &fmt::vformat;
}  // namespace stepscope_cli

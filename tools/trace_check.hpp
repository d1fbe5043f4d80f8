// Structural check of a Chrome-trace JSON file (what `stepscope trace
// validate` runs): the checks a viewer such as Perfetto UI relies on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stepscope {
inline namespace v1 {
namespace tools {

struct TraceCheck {
  bool readable = false;  // the file could be read and parsed as JSON
  std::string read_error;
  std::vector<std::string> problems;  // empty: valid
  std::uint64_t events = 0, complete_events = 0, metadata_events = 0, instant_events = 0;
  std::uint64_t step_events = 0;  // complete events with cat "step"
  std::uint64_t processes = 0, threads = 0;
  double span_ms = 0;  // first start to last end of complete events
  bool sorted = true;  // complete events in non-decreasing ts order
};

// Reads `path` (gzip recognised by its magic bytes). `require_steps`: a trace
// written by stepscope marks its steps; other producers need not.
TraceCheck check_chrome_trace(const std::string& path, bool require_steps);

}  // namespace tools
}  // namespace v1
}  // namespace stepscope

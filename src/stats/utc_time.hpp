// The one clock-to-string helper: the wall-clock time as the report writes it
// (run.time_utc, snapshot_time_utc), ISO 8601 UTC to the second.
#pragma once

#include <string>

namespace stepscope {
inline namespace v1 {
namespace detail {

// "2026-12-01T22:33:06Z". Allocates (a std::string): not for the hot path.
std::string utc_now_iso();

}  // namespace detail
}  // namespace v1
}  // namespace stepscope

// Name rules (name_rules.cpp) the importer shares with the analyses: what a
// Kineto event's name says about it.
#pragma once

#include <string_view>

#include "timeline/timeline.hpp"

namespace stepscope {
inline namespace v1 {
namespace detail {

// Direction and host memory kind from a Kineto memcpy name such as
// "Memcpy HtoD (Pageable -> Device)".
void describe_memcpy(std::string_view name, timeline::MemcpyDirection& direction,
                     timeline::HostMemoryKind& host_memory);

}  // namespace detail
}  // namespace v1
}  // namespace stepscope

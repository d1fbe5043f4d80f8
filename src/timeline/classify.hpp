// Internal helpers shared by the importer and the analyses.
#pragma once

#include <string_view>

#include "stepscope/timeline.hpp"

namespace stepscope::detail {

// Direction and host memory kind from a Kineto memcpy name such as
// "Memcpy HtoD (Pageable -> Device)".
void describe_memcpy(std::string_view name, timeline::MemcpyDirection& direction,
                     timeline::HostMemoryKind& host_memory);

}  // namespace stepscope::detail

// The run's settings, as the run time (src/run/runtime.cpp, which defines
// this) read them on the collector thread. Kept for the CUDA backend until it
// takes its settings through DeviceBackend::configure(); nothing else in core
// or below may read them this way: settings are passed down.
#pragma once

#include "core/env.hpp"

namespace stepscope {
inline namespace v1 {
namespace detail {

// Defaults until the collector thread has read the environment.
const Settings& settings();

}  // namespace detail
}  // namespace v1
}  // namespace stepscope

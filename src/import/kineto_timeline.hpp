// src/import/kineto_timeline.hpp (internal) — the Kineto importer's last
// pass (kineto_timeline.cpp), shared by its two parsers in kineto_reader.cpp:
// from the raw events a TraceBuilder holds to the Timeline.
#pragma once

#include "import/kineto_semantics.hpp"
#include "import/trace_import.hpp"

namespace stepscope {
inline namespace v1 {
namespace detail::kineto {

// Fills result.trace from the builder's events, dropping what HTA drops
// (events without a category in a Kineto trace; with
// options.drop_last_profiler_step, the last step on) and counting it in
// result.stats. Takes the builder's meta, events and names.
void build_timeline(TraceBuilder& builder, const ImportOptions& options, ImportResult& result);

}  // namespace detail::kineto
}  // namespace v1
}  // namespace stepscope

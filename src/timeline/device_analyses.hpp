// src/timeline/device_analyses.hpp (internal) — the analyses that both
// device_facts() and HTA's tables (src/import/hta_tables.cpp) run over the
// whole device timeline, computed once when a caller wants both:
// report_from_timeline builds the verdict's facts and device.hta from one
// SharedDeviceAnalyses. Each field equals what the public analysis of the
// same name returns for the same timeline.
#pragma once

#include <vector>

#include "timeline/timeline.hpp"

namespace stepscope {
inline namespace v1 {
namespace timeline {

struct SharedDeviceAnalyses {
  CommComputeOverlap overlap;             // comm_compute_overlap()
  std::vector<StreamIdleBreakdown> idle;  // idle_time_breakdown() at its default threshold
  LaunchStats cuda_launches;              // launch_statistics() with the default options (HTA's pairing)
  LaunchStats launches_with_hip;          // the same with include_hip_launches (the facts')
};

// The launch statistics are computed once when no name in the timeline is a
// ROCm launch call: both pairings then find the same pairs.
SharedDeviceAnalyses shared_device_analyses(const Timeline& timeline);

// device_facts(timeline, options) from analyses already computed.
DeviceFacts device_facts(const Timeline& timeline, const AttributionOptions& options,
                         const SharedDeviceAnalyses& shared);

}  // namespace timeline
}  // namespace v1
}  // namespace stepscope

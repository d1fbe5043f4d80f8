// Hand-built timelines for the timeline tests: device ops with the runtime
// call that launched them, host ops on a thread. Times in microseconds.
#pragma once

#include "timeline/timeline.hpp"

namespace stepscope {
inline namespace v1 {
namespace test {

using namespace stepscope::timeline;

constexpr std::int64_t us(std::int64_t v) {
  return v * 1000;
}

struct Builder {
  Timeline tl;
  std::int64_t next_correlation = 1;

  // A device op launched by a runtime call that started at `launch_at`.
  DeviceInterval& device(const char* name, std::int64_t start, std::int64_t end, std::int64_t stream = 7,
                         DeviceOpKind kind = DeviceOpKind::kernel, std::int64_t launch_at = -1,
                         std::int64_t launch_end = -1) {
    DeviceInterval d;
    d.start_ns = us(start);
    d.end_ns = us(end);
    d.stream = stream;
    d.kind = kind;
    d.name = tl.intern(name);
    d.cls = classify_kernel(name);
    d.correlation = next_correlation++;
    if (launch_at >= 0) {
      const char* launcher = kind == DeviceOpKind::memcpy   ? "cudaMemcpyAsync"
                             : kind == DeviceOpKind::memset ? "cudaMemsetAsync"
                                                            : "cudaLaunchKernel";
      host(launcher, launch_at, launch_end >= 0 ? launch_end : launch_at + 5, HostOpKind::runtime_launch).correlation =
          d.correlation;
    }
    tl.device_ops.push_back(d);
    return tl.device_ops.back();
  }
  HostInterval& host(const char* name, std::int64_t start, std::int64_t end, HostOpKind kind, std::int64_t tid = 1) {
    HostInterval h;
    h.start_ns = us(start);
    h.end_ns = us(end);
    h.kind = kind;
    h.tid = tid;
    h.name = tl.intern(name);
    tl.host_ops.push_back(h);
    return tl.host_ops.back();
  }
};

}  // namespace test
}  // namespace v1
}  // namespace stepscope

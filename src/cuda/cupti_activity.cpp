// CUPTI activity and callbacks -> timeline::Timeline -> device facts.
//
// Threads: CUPTI calls buffer_requested/buffer_completed from its own worker
// thread or from inside cuptiActivityFlushAll (collector thread). The
// runtime-API callbacks are in cupti_callbacks.cpp.
#include "cuda/cupti_activity.hpp"

#include <stepscope/phase.hpp>

#include <cuda_runtime_api.h>
#include <cupti.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string_view>

namespace stepscope {
inline namespace v1 {
namespace detail::cuda {
namespace {

// Activity buffers: 4 MiB each, 8-byte aligned as CUPTI requires. CUPTI asks
// for a new one whenever one fills; a flush every ~100 ms hands them back, so
// a few buffers are in flight at a time.
constexpr std::size_t kBufferBytes = 4u << 20;
constexpr std::int64_t kFlushIntervalNs = 100'000'000;

CuptiActivity* g_activity = nullptr;  // set once in start(), before any callback is enabled
// Records CUPTI dropped for want of buffer space (cuptiActivityGetNumDroppedRecords).
std::atomic<std::uint64_t> g_cupti_dropped{0};

std::uint64_t CUPTIAPI monotonic_timestamp() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

// Buffers ready for CUPTI: zeroed and their pages touched by the collector
// (refill_buffers), so a request made on a training thread is one atomic
// exchange. In CUDA 13 CUPTI keeps a buffer per thread (act:
// PER_THREAD_ACTIVITY_BUFFER defaults to 1) and requests it from inside the
// thread's CUDA call; and unless ZEROED_OUT_ACTIVITY_BUFFER is 1 "CUPTI will
// zero out the buffer in the main thread" (review S4). stepscope sets that
// attribute and hands over zeroed buffers: 4 MiB of zeroing, and the page
// faults of a fresh allocation, move off the application's threads.
constexpr std::size_t kReadyBuffers = 4;  // 16 MiB held while CUPTI runs
std::array<std::atomic<std::uint8_t*>, kReadyBuffers> g_ready_buffers{};

std::uint8_t* zeroed_buffer() noexcept {
  auto* b = static_cast<std::uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  if (b != nullptr) std::memset(b, 0, kBufferBytes);  // zeroes and touches every page, here
  return b;
}

// Collector thread (poll; a snapshot() caller's thread too): tops the ready buffers up.
void refill_buffers() noexcept {
  for (auto& slot : g_ready_buffers) {
    if (slot.load(std::memory_order_acquire) != nullptr) continue;
    std::uint8_t* b = zeroed_buffer();
    if (b == nullptr) return;
    std::uint8_t* expected = nullptr;
    if (!slot.compare_exchange_strong(expected, b, std::memory_order_acq_rel)) std::free(b);
  }
}

void free_ready_buffers() noexcept {
  for (auto& slot : g_ready_buffers) std::free(slot.exchange(nullptr, std::memory_order_acq_rel));
}

void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
  std::uint8_t* b = nullptr;
  for (auto& slot : g_ready_buffers) {
    b = slot.exchange(nullptr, std::memory_order_acq_rel);
    if (b != nullptr) break;
  }
  if (b == nullptr) {
    // None ready (a burst of requests between two collector ticks): calloc
    // gives zeroed memory (fresh pages for a block this size), as promised.
    b = static_cast<std::uint8_t*>(std::calloc(1, kBufferBytes));
  }
  *buffer = b;
  *size = b != nullptr ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext context, std::uint32_t stream, std::uint8_t* buffer, std::size_t,
                               std::size_t valid_size) {
  if (g_activity != nullptr && buffer != nullptr) g_activity->consume_buffer(buffer, valid_size);
  std::free(buffer);
  // act: "The number of dropped records can be read using cuptiActivityGetNumDroppedRecords" (C10).
  std::size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(context, stream, &dropped) == CUPTI_SUCCESS && dropped > 0)
    g_cupti_dropped.fetch_add(dropped, std::memory_order_relaxed);
}

// stepscope's own runtime calls (event records and queries, capture checks,
// device and memory queries): left out of the RUNTIME activity, or the
// collector's polling would fill the host-op budget and count as host work
// in the idle attribution (C9). The application's own calls of these go too.
constexpr CUpti_CallbackId kOwnRuntimeCalls[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaEventQuery_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventElapsedTime_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventElapsedTime_v12080,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventCreateWithFlags_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventDestroy_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamIsCapturing_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamIsCapturing_ptsz_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaThreadExchangeStreamCaptureMode_v10010,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamGetDevice_v12080,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemGetInfo_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaSetDevice_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaGetDeviceProperties_v12000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGetLastError_v3020,
};

constexpr CUpti_ActivityKind kActivityKinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,  // not KIND_KERNEL: that one serialises kernels
    CUPTI_ACTIVITY_KIND_MEMCPY,
    CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
    CUPTI_ACTIVITY_KIND_RUNTIME,
};

std::string cupti_error(CUptiResult result) {
  const char* text = nullptr;
  if (cuptiGetResultString(result, &text) != CUPTI_SUCCESS || text == nullptr)
    return "CUPTI error " + std::to_string(result);
  return text;
}

// "cudaLaunchKernel_v7000" -> "cudaLaunchKernel" (the names the timeline's
// classify_runtime_call matches exactly); CUDA 13's <<<>>> entry point
// "__cudaLaunchKernel_v13000" -> "cudaLaunchKernel" too.
std::string_view strip_version(std::string_view name) {
  if (name.substr(0, 2) == "__") name.remove_prefix(2);
  const std::size_t v = name.rfind("_v");
  if (v != std::string_view::npos && v + 2 < name.size() &&
      std::all_of(name.begin() + static_cast<std::ptrdiff_t>(v + 2), name.end(),
                  [](char c) { return c >= '0' && c <= '9'; }))
    name = name.substr(0, v);
  if (name.size() > 5 && name.substr(name.size() - 5) == "_ptsz") name = name.substr(0, name.size() - 5);
  return name;
}

timeline::MemcpyDirection direction_of(std::uint8_t copy_kind) {
  switch (copy_kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA:
      return timeline::MemcpyDirection::host_to_device;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH:
      return timeline::MemcpyDirection::device_to_host;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA:
      return timeline::MemcpyDirection::device_to_device;
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
      return timeline::MemcpyDirection::peer_to_peer;
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
      return timeline::MemcpyDirection::host_to_host;
    default:
      return timeline::MemcpyDirection::unknown;
  }
}

// A device record with a zero timestamp: work still running when a forced
// flush handed it back, or an invalid record.
bool incomplete(const CUpti_Activity* record) {
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      return k->start == 0 || k->end == 0;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      return m->start == 0 || m->end == 0;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      return m->start == 0 || m->end == 0;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY2: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpyPtoP4*>(record);
      return m->start == 0 || m->end == 0;
    }
    default:
      return false;
  }
}

// Kineto-style copy names ("Memcpy HtoD (Pageable -> Device)"), so the
// timeline classifies live and imported copies the same way.
const char* memcpy_name(timeline::MemcpyDirection d, timeline::HostMemoryKind host) {
  using D = timeline::MemcpyDirection;
  const bool pageable = host == timeline::HostMemoryKind::pageable;
  switch (d) {
    case D::host_to_device:
      return pageable ? "Memcpy HtoD (Pageable -> Device)" : "Memcpy HtoD (Pinned -> Device)";
    case D::device_to_host:
      return pageable ? "Memcpy DtoH (Device -> Pageable)" : "Memcpy DtoH (Device -> Pinned)";
    case D::device_to_device:
      return "Memcpy DtoD (Device -> Device)";
    case D::peer_to_peer:
      return "Memcpy PtoP (Device -> Device)";
    case D::host_to_host:
      return "Memcpy HtoH";
    default:
      return "Memcpy";
  }
}

// The fields every device record (kernel, copy, peer copy, memset) has.
template <typename DeviceRecord, typename ToNs>
timeline::DeviceInterval interval_of(const DeviceRecord* r, ToNs ns) {
  timeline::DeviceInterval d;
  d.start_ns = ns(r->start);
  d.end_ns = std::max(d.start_ns, ns(r->end));
  d.stream = r->streamId;
  d.correlation = r->correlationId;
  d.device = static_cast<std::int32_t>(r->deviceId);
  return d;
}

}  // namespace

// Releases CUPTI for the next client (torch.profiler, Nsight, the user's own
// tool): cb: "Only a single subscriber can be registered at a time" (C5).
void CuptiActivity::stop_callbacks() noexcept {
  if (subscriber_ == nullptr) return;
  unsubscribe_callbacks(subscriber_);
  subscriber_ = nullptr;
}

void CuptiActivity::set_collecting(bool on) noexcept {
  if (!active_ || finished_.load(std::memory_order_acquire)) return;
  if (on) {
    for (CUpti_ActivityKind k : kActivityKinds) (void)cuptiActivityEnable(k);
    (void)cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY2);
  } else {
    for (CUpti_ActivityKind k : kActivityKinds) (void)cuptiActivityDisable(k);
    (void)cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY2);
  }
}

bool CuptiActivity::start(std::string& status, std::string& reason, bool collect) noexcept {
  try {
    g_activity = this;
    int subscribed = CUPTI_SUCCESS;
    subscriber_ = subscribe_callbacks(subscribed);
    CUptiResult r = static_cast<CUptiResult>(subscribed);
    if (subscriber_ == nullptr) {
      status = "cupti_unavailable";
      reason = r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
                   ? "CUPTI is held by another profiler (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED); "
                     "phase device times are still measured with CUDA events"
                   : "cuptiSubscribe failed (" + cupti_error(r) +
                         "); phase device times are still measured with CUDA events";
      return false;
    }
    // Same clock as the host records (CLOCK_MONOTONIC ns). Without the
    // timestamp callback, CUPTI uses CLOCK_REALTIME: convert with an offset.
    if (cuptiActivityRegisterTimestampCallback(monotonic_timestamp) != CUPTI_SUCCESS) {
      std::uint64_t cupti_now = 0;
      if (cuptiGetTimestamp(&cupti_now) == CUPTI_SUCCESS)
        clock_offset_ns_ = static_cast<std::int64_t>(monotonic_timestamp()) - static_cast<std::int64_t>(cupti_now);
    }
    // Our buffers come zeroed (S4); set before the first request. The ready
    // buffers are made by the collector's first poll, not here: start() may
    // run on the application's first scope (until then requests calloc).
    std::uint8_t zeroed = 1;
    std::size_t zeroed_size = sizeof(zeroed);
    (void)cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER, &zeroed_size, &zeroed);
    r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r != CUPTI_SUCCESS) {
      status = "cupti_unavailable";
      reason = "cuptiActivityRegisterCallbacks failed (" + cupti_error(r) + ")";
      stop_callbacks();
      return false;
    }
    // Every kind is enabled once here, so that a kind this CUPTI lacks is
    // found now; windowed collection then switches them off until its first
    // window (set_collecting).
    for (CUpti_ActivityKind kind : kActivityKinds) {
      r = cuptiActivityEnable(kind);
      if (r != CUPTI_SUCCESS) {
        for (CUpti_ActivityKind k : kActivityKinds) (void)cuptiActivityDisable(k);
        status = "cupti_unavailable";
        reason = "cuptiActivityEnable failed (" + cupti_error(r) + ")";
        stop_callbacks();
        return false;
      }
    }
    // Peer-to-peer copies come only as MEMCPY2 records (act: "For peer to
    // peer memory copy, use the kind CUPTI_ACTIVITY_KIND_MEMCPY2"), C14.
    // Optional: without it the other kinds still work.
    (void)cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY2);
    for (CUpti_CallbackId cbid : kOwnRuntimeCalls) (void)cuptiActivityEnableRuntimeApi(cbid, 0);
    active_ = true;
    if (!collect) set_collecting(false);
    return true;
  } catch (...) {
    status = "cupti_unavailable";
    reason = "out of memory while starting CUPTI";
    stop_callbacks();
    return false;
  }
}

void CuptiActivity::poll(std::int64_t now_ns) noexcept {
  if (!active_ || finished_) return;
  bool over = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    over = over_limit_;
  }
  if (over) {
    // Enough for the analyses: stop paying for collection.
    for (CUpti_ActivityKind k : kActivityKinds) (void)cuptiActivityDisable(k);
    (void)cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY2);
    (void)cuptiActivityFlushAll(0);
    finished_.store(true, std::memory_order_release);
    free_ready_buffers();
    return;
  }
  refill_buffers();
  if (now_ns - last_flush_ns_ < kFlushIntervalNs) return;
  last_flush_ns_ = now_ns;
  (void)cuptiActivityFlushAll(0);  // completed buffers only: never waits for the device
}

void CuptiActivity::add_step(std::int64_t number, std::int64_t start_ns, std::int64_t end_ns) noexcept {
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    if (steps_.size() < kMaxSteps) steps_.push_back(timeline::Step{number, start_ns, end_ns});
  } catch (...) {
  }
}

void CuptiActivity::add_phase(const char* name, bool input_kind, std::int64_t start_ns, std::int64_t end_ns) noexcept {
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    if (timeline_.phases.size() >= kMaxPhases) return;
    // Input phases are marked so the attribution finds them whatever the user named them.
    const std::string label = input_kind ? std::string("[stepscope-input] ") + name : std::string(name);
    const timeline::NameId id = timeline_.intern(label);
    timeline_.phases.push_back(timeline::Phase{id, start_ns, end_ns, -1, false});
    // The attribution reads host annotations (as the Kineto reader gives
    // them): without this a live run's input phases never explain idle
    // device time and no live run can be io-bound (C2).
    if (timeline_.host_ops.size() < kMaxHostOps) {
      timeline::HostInterval h;
      h.start_ns = start_ns;
      h.end_ns = end_ns;
      h.name = id;
      h.kind = timeline::HostOpKind::annotation;
      timeline_.host_ops.push_back(h);
    }
  } catch (...) {
  }
}

void CuptiActivity::consume_buffer(std::uint8_t* buffer, std::size_t valid_size) noexcept {
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    // Our callbacks still receive buffers: launches so far are accounted for (S3).
    launches_at_last_buffer_ = api_counts().launch_calls;
    CUpti_Activity* record = nullptr;
    const std::int64_t off = clock_offset_ns_;
    auto ns = [off](std::uint64_t t) { return static_cast<std::int64_t>(t) + off; };
    while (cuptiActivityGetNextRecord(buffer, valid_size, &record) == CUPTI_SUCCESS) {
      if (timeline_.device_ops.size() >= kMaxDeviceOps || timeline_.host_ops.size() >= kMaxHostOps) {
        over_limit_ = true;
        ++dropped_records_;
        continue;
      }
      if (incomplete(record)) {
        ++incomplete_records_;  // act: records "may contain invalid (0) timestamps" (C10)
        continue;
      }
      switch (record->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
          const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
          timeline::DeviceInterval d = interval_of(k, ns);
          const char* name = k->name != nullptr ? k->name : "kernel";
          d.name = timeline_.intern(name);
          d.kind = timeline::DeviceOpKind::kernel;
          d.cls = timeline::classify_kernel(name);  // nccl* kernels -> communication
          if (d.cls == timeline::KernelClass::communication) ++nccl_kernels_;
          timeline_.device_ops.push_back(d);
          ++kernels_;
          ++per_device(k->deviceId).kernels;
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
          timeline::DeviceInterval d = interval_of(m, ns);
          d.kind = timeline::DeviceOpKind::memcpy;
          d.direction = direction_of(m->copyKind);
          const std::uint8_t host_side =
              d.direction == timeline::MemcpyDirection::device_to_host ? m->dstKind : m->srcKind;
          d.host_memory = host_side == CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE ? timeline::HostMemoryKind::pageable
                          : host_side == CUPTI_ACTIVITY_MEMORY_KIND_PINNED ? timeline::HostMemoryKind::pinned
                                                                           : timeline::HostMemoryKind::unknown;
          if (d.host_memory == timeline::HostMemoryKind::pageable) ++pageable_memcpys_;
          d.bytes = static_cast<std::int64_t>(m->bytes);
          const char* name = memcpy_name(d.direction, d.host_memory);
          d.name = timeline_.intern(name);
          d.cls = timeline::classify_kernel(name);
          timeline_.device_ops.push_back(d);
          ++memcpys_;
          ++per_device(m->deviceId).memcpys;
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY2: {
          // A peer copy: device work of the device that runs it (deviceId).
          const auto* m = reinterpret_cast<const CUpti_ActivityMemcpyPtoP4*>(record);
          timeline::DeviceInterval d = interval_of(m, ns);
          d.kind = timeline::DeviceOpKind::memcpy;
          d.direction = timeline::MemcpyDirection::peer_to_peer;
          d.bytes = static_cast<std::int64_t>(m->bytes);
          const char* name = memcpy_name(d.direction, timeline::HostMemoryKind::unknown);
          d.name = timeline_.intern(name);
          d.cls = timeline::classify_kernel(name);
          timeline_.device_ops.push_back(d);
          ++memcpys_;
          ++peer_memcpys_;
          PerDevice& pd = per_device(m->deviceId);
          ++pd.peer_memcpys;
          pd.peer_bytes += m->bytes;
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
          timeline::DeviceInterval d = interval_of(m, ns);
          d.kind = timeline::DeviceOpKind::memset;
          d.bytes = static_cast<std::int64_t>(m->bytes);
          d.name = timeline_.intern("Memset (Device)");
          d.cls = timeline::classify_kernel("Memset (Device)");
          timeline_.device_ops.push_back(d);
          ++memsets_;
          ++per_device(m->deviceId).memsets;
          break;
        }
        case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
          // Host-side waits: counted, not device work (the runtime call
          // records below carry them into the idle attribution).
          const auto* s = reinterpret_cast<const CUpti_ActivitySynchronization2*>(record);
          ++syncs_;
          if (s->end > s->start) sync_ns_ += static_cast<std::int64_t>(s->end - s->start);
          break;
        }
        case CUPTI_ACTIVITY_KIND_RUNTIME: {
          const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(record);
          const char* raw = nullptr;
          if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid, &raw) != CUPTI_SUCCESS || raw == nullptr)
            break;
          const std::string_view name = strip_version(raw);
          timeline::HostInterval h;
          h.start_ns = ns(a->start);
          h.end_ns = std::max(h.start_ns, ns(a->end));
          h.pid = a->processId;
          h.tid = a->threadId;
          h.correlation = a->correlationId;
          h.name = timeline_.intern(name);
          h.kind = timeline::classify_runtime_call(name);
          timeline_.host_ops.push_back(h);
          ++api_records_;
          break;
        }
        default:
          break;
      }
    }
  } catch (...) {
    // Out of memory: the records of this buffer are lost, the run goes on.
  }
}

CuptiActivity::PerDevice& CuptiActivity::per_device(std::uint32_t device) {
  for (auto& [id, counts] : per_device_)
    if (id == device) return counts;
  per_device_.emplace_back(device, PerDevice{});
  return per_device_.back().second;
}

namespace {

// The runtime-API call counts of the callbacks.
void count_api_calls(DeviceFactsSection& m, const ApiCounts& c, std::uint64_t measured_steps) {
  m.sync_calls = static_cast<double>(c.sync_calls);
  m.sync_calls_in_steps = static_cast<double>(c.sync_calls_in_steps);
  m.cuda_malloc_calls = static_cast<double>(c.malloc_calls);
  m.cuda_free_calls = static_cast<double>(c.free_calls);
  if (measured_steps > 0) {
    m.cuda_malloc_calls_per_step = static_cast<double>(c.malloc_calls_measured) / static_cast<double>(measured_steps);
    m.cuda_free_calls_per_step = static_cast<double>(c.free_calls_measured) / static_cast<double>(measured_steps);
  }
  m.kernel_launch_calls = static_cast<double>(c.launch_calls);
  m.graph_launch_calls = static_cast<double>(c.graph_launch_calls);
}

}  // namespace

void CuptiActivity::finish(DeviceInfo& info, std::uint64_t warmup_steps, std::uint64_t measured_steps,
                           std::uint64_t step_devices, std::uint64_t timed_devices) noexcept {
  DeviceFactsSection& m = info.facts;
  // Counts only when the callbacks ran: "not measured" is not "measured zero" (C11).
  if (subscriber_ == nullptr) return;
  m.cupti_callbacks = 1.0;
  const ApiCounts c = api_counts();
  count_api_calls(m, c, measured_steps);
  if (!active_) {
    stop_callbacks();
    return;
  }
  try {
    // Everything recorded so far, including buffers not yet full.
    (void)cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    for (CUpti_ActivityKind k : kActivityKinds) (void)cuptiActivityDisable(k);
    (void)cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY2);
    (void)cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    finished_.store(true, std::memory_order_release);
    stop_callbacks();
    free_ready_buffers();
    std::lock_guard<std::mutex> lock(mutex_);
    count_records(m);
    // cuptiActivityRegisterCallbacks is process-global: a second activity
    // client (one that never subscribes, so cuptiSubscribe's one-subscriber
    // rule does not stop it) that registers its own callbacks takes every
    // later buffer. Then even the final forced flush hands nothing back,
    // and the launches since our last buffer have no records here (S3). A
    // few launches from other threads racing the final flush are not that.
    const std::uint64_t launches = c.launch_calls;
    const std::uint64_t gap = launches > launches_at_last_buffer_ ? launches - launches_at_last_buffer_ : 0;
    if (!over_limit_ && gap >= 2 && gap * 10 >= launches) info.cupti_launches_unrecorded = gap;
    keep_measured_steps(warmup_steps);
    m.cupti_steps = static_cast<double>(timeline_.steps.size());
    analyse_devices(info, step_devices != 0 ? step_devices : timed_devices);
  } catch (...) {
    m.cupti_analysis_failed = 1.0;
  }
}

void CuptiActivity::count_records(DeviceFactsSection& m) const {
  m.cupti_kernels = static_cast<double>(kernels_);
  m.cupti_nccl_kernels = static_cast<double>(nccl_kernels_);
  m.cupti_memcpys = static_cast<double>(memcpys_);
  m.cupti_pageable_memcpys = static_cast<double>(pageable_memcpys_);
  m.cupti_memsets = static_cast<double>(memsets_);
  m.cupti_sync_records = static_cast<double>(syncs_);
  m.cupti_sync_ms = static_cast<double>(sync_ns_) * 1e-6;
  m.cupti_runtime_records = static_cast<double>(api_records_);
  m.cupti_over_limit = over_limit_ ? 1.0 : 0.0;
  m.cupti_records_not_kept = static_cast<double>(dropped_records_);
  m.cupti_records_dropped = static_cast<double>(g_cupti_dropped.load(std::memory_order_relaxed));
  m.cupti_records_incomplete = static_cast<double>(incomplete_records_);
}

void CuptiActivity::keep_measured_steps(std::uint64_t warmup_steps) {
  // Analyse the measured steps only (warm-up steps are left out, as on the host side).
  std::sort(steps_.begin(), steps_.end(),
            [](const timeline::Step& a, const timeline::Step& b) { return a.start_ns < b.start_ns; });
  timeline_.steps.clear();
  for (const auto& s : steps_)
    if (s.number > static_cast<std::int64_t>(warmup_steps)) timeline_.steps.push_back(s);
  // Steps whose activity was not collected (over the limit) would read as idle.
  if (over_limit_ && !timeline_.device_ops.empty()) {
    std::int64_t last = 0;
    for (const auto& d : timeline_.device_ops) last = std::max(last, d.end_ns);
    auto& st = timeline_.steps;
    st.erase(std::remove_if(st.begin(), st.end(), [last](const timeline::Step& s) { return s.end_ns > last; }),
             st.end());
  }
}

void CuptiActivity::analyse_devices(DeviceInfo& info, std::uint64_t candidates) {
  DeviceFactsSection& m = info.facts;
  // Each device on its own (C14): the attribution takes every device op
  // of the timeline as "the device", so it is run on one device's ops at
  // a time.
  std::vector<timeline::DeviceInterval> all_ops;
  all_ops.swap(timeline_.device_ops);
  timeline::AttributionOptions options;
  options.input_phase_markers = {"[stepscope-input]"};
  auto facts_of = [&](int device, timeline::DeviceFacts& out) {
    timeline_.device_ops.clear();
    for (const auto& d : all_ops)
      if (device < 0 || d.device == device) timeline_.device_ops.push_back(d);
    if (timeline_.device_ops.empty()) return false;
    out = timeline::device_facts(timeline_, options);
    return out.has_device_activity;
  };
  auto entry = [&info](int id) -> DeviceUsage& {
    for (auto& u : info.devices)
      if (u.id == id) return u;
    info.devices.push_back(DeviceUsage{});
    info.devices.back().id = id;
    return info.devices.back();
  };
  int best = -1;
  double best_busy = -1;
  timeline::DeviceFacts best_facts;
  for (const auto& [id, counts] : per_device_) {
    DeviceUsage& u = entry(static_cast<int>(id));
    u.kernels = counts.kernels;
    u.memcpys = counts.memcpys;
    u.peer_memcpys = counts.peer_memcpys;
    u.peer_memcpy_mb = static_cast<double>(counts.peer_bytes) / (1024.0 * 1024.0);
    u.memsets = counts.memsets;
    timeline::DeviceFacts f;
    if (!facts_of(static_cast<int>(id), f)) continue;
    u.busy_fraction = f.device_busy_fraction;
    u.busy_ms = f.device_busy_fraction * f.step_time_mean_ns * 1e-6;
    const bool candidate = id < 64 && ((candidates >> id) & 1u) != 0;
    if (candidate && f.device_busy_fraction > best_busy) {
      best = static_cast<int>(id);
      best_busy = f.device_busy_fraction;
      best_facts = f;
    }
  }
  std::sort(info.devices.begin(), info.devices.end(),
            [](const DeviceUsage& a, const DeviceUsage& b) { return a.id < b.id; });
  timeline::DeviceFacts f;
  bool have = false;
  if (best >= 0) {
    f = best_facts;
    have = true;
  } else if (candidates == 0) {
    have = facts_of(-1, f);  // no device attached: all activity, as one device
  }
  info.facts_device = best;
  std::uint64_t other = 0;
  for (const auto& d : all_ops) other += d.device != best;
  if (candidates != 0) m.cupti_other_device_ops = static_cast<double>(other);
  all_ops.clear();
  timeline_.device_ops.clear();
  if (!have) return;
  // Same keys as the Kineto import (src/import/trace_report.cpp), so the
  // analyzer reads live and imported runs alike.
  timeline::add_device_facts(f, info.facts);
}

}  // namespace detail::cuda
}  // namespace v1
}  // namespace stepscope

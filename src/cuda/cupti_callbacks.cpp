// CUPTI callbacks (the runtime-API and resource domains): launch, sync and
// allocation counts, stream-capture tracking, the context-destroy hand-off.
// The runtime-API callback runs on whichever thread makes the CUDA call (the
// training thread), so it only updates relaxed atomics.
#include "cuda/cupti_activity.hpp"

#include <stepscope/phase.hpp>

#include <cuda_runtime_api.h>
#include <cupti.h>

#include <atomic>

namespace stepscope {
inline namespace v1 {
namespace detail::cuda {
namespace {

std::atomic<void (*)() noexcept> g_context_destroy_handler{nullptr};

struct Counters {
  std::atomic<std::uint64_t> sync_calls{0}, sync_calls_in_steps{0};
  std::atomic<std::uint64_t> malloc_calls{0}, malloc_calls_measured{0};
  std::atomic<std::uint64_t> free_calls{0}, free_calls_measured{0};
  std::atomic<std::uint64_t> launch_calls{0}, graph_launch_calls{0};
  std::atomic<std::uint64_t> warmup_steps{0};
};
Counters g_counters;
// Captures begun and not ended; -1 until the callbacks are subscribed (and
// after they are released): then nobody counts them.
std::atomic<int> g_captures_open{-1};

void relaxed_add(std::atomic<std::uint64_t>& counter) {
  counter.fetch_add(1, std::memory_order_relaxed);
}

// Capture begin/end: counted up when a capture may begin (before it does),
// down once it ended or failed to begin. True when `cbid` was one of them.
bool count_capture(CUpti_CallbackId cbid, const CUpti_CallbackData* info) {
  const bool enter = info->callbackSite == CUPTI_API_ENTER;
  const auto failed = [info] {
    return info->functionReturnValue != nullptr && *static_cast<const cudaError_t*>(info->functionReturnValue) != 0;
  };
  const auto down = [] {
    int open = g_captures_open.load(std::memory_order_relaxed);
    while (open > 0 && !g_captures_open.compare_exchange_weak(open, open - 1, std::memory_order_acq_rel)) {
    }
  };
  switch (cbid) {
    case CUPTI_RUNTIME_TRACE_CBID_cudaStreamBeginCapture_v10000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaStreamBeginCapture_ptsz_v10000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaStreamBeginCaptureToGraph_v12030:
    case CUPTI_RUNTIME_TRACE_CBID_cudaStreamBeginCaptureToGraph_ptsz_v12030:
      if (enter) {
        int open = g_captures_open.load(std::memory_order_relaxed);
        while (open >= 0 && !g_captures_open.compare_exchange_weak(open, open + 1, std::memory_order_acq_rel)) {
        }
      } else if (failed()) {
        down();
      }
      return true;
    case CUPTI_RUNTIME_TRACE_CBID_cudaStreamEndCapture_v10000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaStreamEndCapture_ptsz_v10000:
      if (!enter) down();
      return true;
    default:
      return false;
  }
}

void CUPTIAPI api_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  if (domain == CUPTI_CB_DOMAIN_RESOURCE) {
    if (cbid == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING)
      if (auto handler = g_context_destroy_handler.load(std::memory_order_acquire)) handler();
    return;
  }
  if (domain != CUPTI_CB_DOMAIN_RUNTIME_API) return;
  const auto* info = static_cast<const CUpti_CallbackData*>(data);
  if (count_capture(cbid, info)) return;
  if (info->callbackSite != CUPTI_API_ENTER) return;
  const ThreadState& ts = t_thread_state;
  const bool in_step = detail::in_step(ts);
  const bool measured = in_step && g_steps_started.load(std::memory_order_relaxed) >
                                       g_counters.warmup_steps.load(std::memory_order_relaxed);
  switch (cbid) {
    case CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_ptsz_v7000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020:
      relaxed_add(g_counters.sync_calls);
      if (in_step) relaxed_add(g_counters.sync_calls_in_steps);
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocPitch_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocManaged_v6000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_ptsz_v11020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_v11020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_ptsz_v11020:
      relaxed_add(g_counters.malloc_calls);
      if (measured) relaxed_add(g_counters.malloc_calls_measured);
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaFreeHost_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_ptsz_v11020:
      relaxed_add(g_counters.free_calls);
      if (measured) relaxed_add(g_counters.free_calls_measured);
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060:
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060:
    case CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000:
    case CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000:
      relaxed_add(g_counters.launch_calls);
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000:
      relaxed_add(g_counters.graph_launch_calls);
      break;
    default:
      break;
  }
}

constexpr CUpti_CallbackId kCountedCallbacks[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocPitch_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocManaged_v6000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_ptsz_v11020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_v11020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_ptsz_v11020,
    CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaFreeHost_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020,
    CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_ptsz_v11020,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
    CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000,
    CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamBeginCapture_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamBeginCapture_ptsz_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamBeginCaptureToGraph_v12030,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamBeginCaptureToGraph_ptsz_v12030,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamEndCapture_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamEndCapture_ptsz_v10000,
};

}  // namespace

ApiCounts api_counts() noexcept {
  ApiCounts c;
  c.sync_calls = g_counters.sync_calls.load(std::memory_order_relaxed);
  c.sync_calls_in_steps = g_counters.sync_calls_in_steps.load(std::memory_order_relaxed);
  c.malloc_calls = g_counters.malloc_calls.load(std::memory_order_relaxed);
  c.malloc_calls_measured = g_counters.malloc_calls_measured.load(std::memory_order_relaxed);
  c.free_calls = g_counters.free_calls.load(std::memory_order_relaxed);
  c.free_calls_measured = g_counters.free_calls_measured.load(std::memory_order_relaxed);
  c.launch_calls = g_counters.launch_calls.load(std::memory_order_relaxed);
  c.graph_launch_calls = g_counters.graph_launch_calls.load(std::memory_order_relaxed);
  return c;
}

int captures_open() noexcept {
  return g_captures_open.load(std::memory_order_acquire);
}

void set_callback_warmup(std::uint64_t warmup_steps) noexcept {
  g_counters.warmup_steps.store(warmup_steps, std::memory_order_relaxed);
}

void set_context_destroy_handler(void (*handler)() noexcept) noexcept {
  g_context_destroy_handler.store(handler, std::memory_order_release);
}

void* subscribe_callbacks(int& result) noexcept {
  CUpti_SubscriberHandle subscriber = nullptr;
  const CUptiResult r = cuptiSubscribe(&subscriber, reinterpret_cast<CUpti_CallbackFunc>(api_callback), nullptr);
  result = static_cast<int>(r);
  if (r != CUPTI_SUCCESS) return nullptr;
  g_captures_open.store(0, std::memory_order_release);
  for (CUpti_CallbackId cbid : kCountedCallbacks)
    (void)cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, cbid);
  (void)cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING);
  return subscriber;
}

void unsubscribe_callbacks(void* subscriber) noexcept {
  g_captures_open.store(-1, std::memory_order_release);  // nobody counts them any more
  (void)cuptiUnsubscribe(static_cast<CUpti_SubscriberHandle>(subscriber));
}

}  // namespace detail::cuda
}  // namespace v1
}  // namespace stepscope

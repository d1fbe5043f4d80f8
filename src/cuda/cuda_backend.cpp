// The CUDA device backend: per-phase device time from CUDA event pairs,
// CUPTI activity for the device timeline facts, NVTX ranges, and a clean
// fallback (host timing only, one stderr line) when any of it is missing.
//
// Hot path (training thread, through g_device_begin / g_device_end): take a
// slot from the thread's own block, cudaStreamIsCapturing, cudaEventRecord.
// No synchronisation, no lock, no allocation after the thread's first timed
// phase. Collector thread: cudaEventQuery on the pending pairs (never
// cudaEventSynchronize), cudaEventElapsedTime, slot back to its block.
#include "core/device_backend.hpp"
#include "cuda/cupti_activity.hpp"
#include "cuda/cupti_windows.hpp"
#include "cuda/event_pool.hpp"
#include "cuda/runtime_helpers.hpp"
#include "stats/clock.hpp"

#include <stepscope/cuda.hpp>
#include <stepscope/phase.hpp>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <nvtx3/nvToolsExt.h>

#include <link.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace stepscope {
inline namespace v1 {
namespace detail {

// Referenced by <stepscope/cuda.hpp>: only this (CUDA-enabled) library defines it.
const int cuda_backend_abi_v1 = 1;

namespace cuda {
namespace {

// How long finish() waits for the device to complete the last phases' events
// before reporting them unresolved (the run is ending; never a hang).
constexpr auto kFinishWait = std::chrono::milliseconds(2000);
// A thread that cannot get a block yet (no CUDA context, pool full) retries
// after this many timed scopes. The retry is a driver query of the primary
// context's state (no allocation), so a context created inside step 1 is
// timed a few steps later (a step is a few scopes).
constexpr std::uint32_t kAttachRetryScopes = 8;

// Hot-path per-thread state. Trivial, so the thread_local needs no guard.
struct ThreadDevice {
  void* stream;  // cudaStream_t, nullptr = legacy default stream (when bound)
  SlotBlock* block;
  std::uint32_t attach_countdown;
  bool bound;   // set_stream() was called
  bool exited;  // past the thread-exit guard
};
thread_local ThreadDevice t_device{};

std::int64_t monotonic_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

bool create_pair(void*, int, void** begin, void** end) noexcept {
  cudaEvent_t b = nullptr, e = nullptr;
  // Default flags: timing enabled, no blocking sync (we only ever query).
  if (cudaEventCreateWithFlags(&b, cudaEventDefault) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  if (cudaEventCreateWithFlags(&e, cudaEventDefault) != cudaSuccess) {
    (void)cudaGetLastError();
    (void)cudaEventDestroy(b);
    return false;
  }
  *begin = b;
  *end = e;
  return true;
}

// Set when the device can no longer be used (a sticky error, or the
// application's cudaDeviceReset destroyed the events): from then on no
// stepscope code makes a CUDA call.
std::atomic<bool> g_device_gone{false};

void destroy_pair(void*, void* begin, void* end) noexcept {
  if (g_device_gone.load(std::memory_order_relaxed)) return;  // destroyed with their context
  (void)cudaEventDestroy(static_cast<cudaEvent_t>(begin));
  (void)cudaEventDestroy(static_cast<cudaEvent_t>(end));
}

class CudaBackend;
CudaBackend* g_backend = nullptr;  // set before the hooks are installed, never reset

using PrimaryCtxGetState = CUresult (*)(CUdevice, unsigned int*, int*);
using DeviceGet = CUresult (*)(CUdevice*, int);

class CudaBackend final : public DeviceBackend {
 public:
  CudaBackend(bool nvtx, bool cupti_wanted, WindowSchedule windows)
      : pool_(create_pair, destroy_pair, nullptr), nvtx_(nvtx) {
    clock_.start();
    set_callback_warmup(warmup_steps_);
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &fn, 12000, cudaEnableDefault, &q) ==
            cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      ctx_state_ = reinterpret_cast<PrimaryCtxGetState>(fn);
    fn = nullptr;
    if (cudaGetDriverEntryPointByVersion("cuDeviceGet", &fn, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      device_get_ = reinterpret_cast<DeviceGet>(fn);
    (void)cudaGetLastError();
    if (nvtx_) {
      domain_ = nvtxDomainCreateA("stepscope");
      for (std::size_t i = 0; i < kPhaseKindCount; ++i)
        kind_names_[i] = nvtxDomainRegisterStringA(domain_, kPhaseKindNames[i]);
      kind_names_[kPhaseKindCount] = nvtxDomainRegisterStringA(domain_, "step");
    }
    if (!cupti_wanted) {
      cupti_status_ = "cupti_disabled";
      cupti_reason_ = "CUPTI activity turned off by STEPSCOPE_CUPTI=0; phase device times from CUDA events only";
    } else if (cupti_.start(cupti_status_, cupti_reason_, windows.always())) {
      windows_.start(windows, windows.always(), &CuptiActivity::set_collecting_of, &cupti_);
    }
    set_context_destroy_handler(&on_context_destroy);
  }

  void configure(const DeviceSettings& settings) noexcept override {
    warmup_steps_ = settings.warmup_steps;
    quiet_ = settings.quiet;
    set_callback_warmup(warmup_steps_);
    windows_.set_warmup(warmup_steps_);
  }

  // CUPTI resource callback, on the thread calling cudaDeviceReset (or
  // destroying the context), before the context goes: from then on no
  // stepscope code touches its events. Waits for a poll in progress, for a
  // bounded time only: the driver may hold a lock that the poll's current
  // call needs, and a hang in the user's teardown is worse than the race.
  static void on_context_destroy() noexcept {
    if (g_backend == nullptr) return;
    g_backend->context_destroyed_ = true;
    g_device_gone.store(true, std::memory_order_relaxed);  // resolve() stops at its next pair
    for (int i = 0; i < 100; ++i) {
      if (g_backend->device_calls_.try_lock()) {
        g_backend->device_calls_.unlock();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  // ---- hot path -------------------------------------------------------------
  std::uint16_t begin(const PhaseSite* site) noexcept {
    windows_.follow(g_steps_started.load(std::memory_order_relaxed));
    ThreadDevice& td = t_device;
    const ThreadState& ts = t_thread_state;
    if (!td.bound && ts.step_depth == 0) return nvtx_ ? nvtx_only(site) : 0;
    if (g_device_gone.load(std::memory_order_relaxed)) return nvtx_ ? nvtx_only(site) : 0;
    SlotBlock* block = td.block;
    if (STEPSCOPE_DETAIL_UNLIKELY(block == nullptr)) {
      block = attach(td);
      if (block == nullptr) return nvtx_ ? nvtx_only(site) : 0;
    }
    const std::uint16_t id = block->take();
    if (id == 0) return nvtx_ ? nvtx_only(site) : 0;
    Slot& s = block->slots[(id - 1u) % kBlockSlots];
    // Unbound phases are timed on this thread's per-thread default stream,
    // not the legacy stream: no device-wide barrier at every phase edge, and
    // never caught by another thread's capture of a blocking stream (C3, S1).
    s.stream = td.bound ? td.stream : cudaStreamPerThread;
    s.state = 0;
    if (nvtx_) {
      nvtx_push(site);
      s.state |= kSlotNvtxOpen;
    }
    const auto stream = static_cast<cudaStream_t>(s.stream);
    if (!capture_allows_record(stream, s)) return id;
    if (const cudaError_t e = cudaEventRecord(static_cast<cudaEvent_t>(s.begin_event), stream); e != cudaSuccess) {
      record_failed(e, s);
      return id;
    }
    s.state |= kSlotBeginRecorded;
    return id;
  }

  void end(std::uint16_t id) noexcept {
    if (id == kSlotNvtxOnly) {
      nvtxDomainRangePop(domain_);
      return;
    }
    Slot* s = pool_.slot(id);
    if (s == nullptr) return;
    if (s->state & kSlotNvtxOpen) nvtxDomainRangePop(domain_);
    if (!(s->state & kSlotBeginRecorded)) return;
    if (g_device_gone.load(std::memory_order_relaxed)) return;
    const auto stream = static_cast<cudaStream_t>(s->stream);
    if (!capture_allows_record(stream, *s)) return;  // capture began inside the phase
    if (const cudaError_t e = cudaEventRecord(static_cast<cudaEvent_t>(s->end_event), stream); e != cudaSuccess) {
      record_failed(e, *s);
      return;
    }
    s->state |= kSlotEndRecorded;
  }

  // The record holding `id` was dropped (ring full): its NVTX range is closed
  // already (end ran first); the slot goes back to this thread's block.
  void abandon(std::uint16_t id) noexcept {
    if (id == kSlotNvtxOnly) return;
    if (!pool_.abandon(id, t_device.block)) abandon_foreign_.fetch_add(1, std::memory_order_relaxed);
  }

  // ---- collector --------------------------------------------------------------
  void on_record(const PhaseRecord& r) override {
    // Every step and phase reaches the CUPTI timeline, whether or not it got
    // an event slot (pool exhausted, thread not attached, NVTX only): C7.
    // Only what ran wholly inside a collection window: the rest has no
    // device activity to explain it (cupti_windows.hpp).
    if (cupti_.active()) {
      const std::int64_t start = clock_.to_ns(r.start_ticks), stop = clock_.to_ns(r.end_ticks);
      const Collected where = windows_.classify(start, stop);
      if (r.flags & kRecordIsStep) {
        if (r.step > warmup_steps_ && !(r.flags & (kRecordOuterStep | kRecordUnendedStep | kRecordEvaluationStep)))
          windows_.add_step(where, stop - start);
        if (where == Collected::yes) cupti_.add_step(r.step, start, stop);
      } else if ((r.flags & kRecordInStep) && r.site != nullptr && where == Collected::yes) {
        cupti_.add_phase(r.site->name, r.site->kind == PhaseKind::input, start, stop);
      }
    }
    if (r.device_slot == 0 || r.device_slot == kSlotNvtxOnly) return;
    Slot* s = pool_.slot(r.device_slot);
    if (s == nullptr) return;
    const std::uint8_t state = s->state;
    if ((state & kSlotBeginRecorded) && s->stream == cudaStreamPerThread) ++unbound_;
    if (g_device_gone.load(std::memory_order_relaxed) && !(state & kSlotCaptured)) {
      ++after_device_gone_;  // never resolved: the events are unusable
      pool_.give_back(r.device_slot);
    } else if (state & kSlotCaptured) {
      ++captured_;
      pool_.give_back(r.device_slot);
    } else if ((state & kSlotRecordFailed) || !(state & kSlotBeginRecorded) || !(state & kSlotEndRecorded)) {
      ++record_failed_;
      pool_.give_back(r.device_slot);
    } else if (r.flags & kRecordOuterStep) {
      pool_.give_back(r.device_slot);  // a loop of steps: the steps in it are the device's steps
    } else {
      pending_.push_back(Pending{r.site, r.step, r.device_slot, (r.flags & kRecordInStep) != 0, r.depth});
      // The devices the steps ran on choose the device the facts describe (C14).
      if (r.flags & kRecordInStep)
        if (const SlotBlock* b = pool_.block_of(r.device_slot)) step_devices_ |= device_bit(b->device);
    }
  }

  bool wants_every_record() const override { return cupti_.active(); }

  void describe_overhead(Overhead& out) const override {
    windows_.describe(out, !cupti_.active() ? "off" : windows_.windowed() ? "windows" : "always");
  }
  // Half a thread's slot block between two drains: the other half absorbs a
  // rate that rose since the wait was chosen.
  std::uint32_t device_records_per_drain() const noexcept override { return kBlockSlots / 2; }

  // Collector thread every tick, or a user thread in snapshot(). No CUDA
  // call before a thread has attached to a device (a CPU-only program gets
  // no context), and then only with that device current (C1, S5).
  void poll(Aggregator& aggregator) override {
    windows_.follow(g_steps_started.load(std::memory_order_relaxed));  // loops whose steps open no device scope
    clock_.recalibrate();
    {
      std::lock_guard<std::mutex> lock(device_calls_);
      const int device = device_.load(std::memory_order_relaxed);
      if (device >= 0 && !g_device_gone.load(std::memory_order_relaxed)) {
        DeviceScope on_device(device, [this](int d) { return context_active(d); });
        if (on_device.ok()) {
          RelaxedCaptureMode relaxed;
          resolve(aggregator);
          const std::uint64_t steps = aggregator.steps_completed();
          if (steps != sampled_steps_) {
            sampled_steps_ = steps;
            sample_memory_all(device);
          }
        }
      }
    }
    pool_.reclaim();
    warn_if_device_gone();
    cupti_.poll(monotonic_now_ns());
  }

  void finish(Aggregator& aggregator, DeviceInfo& info) override {
    {
      std::lock_guard<std::mutex> lock(device_calls_);
      const int device = device_.load(std::memory_order_relaxed);
      if (device >= 0 && !g_device_gone.load(std::memory_order_relaxed)) {
        DeviceScope on_device(device, [this](int d) { return context_active(d); });
        RelaxedCaptureMode relaxed;
        // Bounded wait: the last phases' events complete when the device gets
        // there; poll them (cudaEventQuery) for at most kFinishWait.
        const auto deadline = std::chrono::steady_clock::now() + kFinishWait;
        resolve(aggregator);
        while (!pending_.empty() && std::chrono::steady_clock::now() < deadline &&
               !g_device_gone.load(std::memory_order_relaxed)) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
          resolve(aggregator);
        }
        sample_memory_all(device);
      }
    }
    warn_if_device_gone();
    info.enabled = true;
    info.status = cupti_status_.empty() ? "ok" : cupti_status_;
    info.reason = cupti_status_.empty() ? "phase device times from CUDA events; device timeline from CUPTI activity"
                                        : cupti_reason_;
    if (g_device_gone.load(std::memory_order_relaxed) && !context_destroyed_) {
      info.status = "device_lost";
      info.reason = std::string("the CUDA device failed during the run (") + cudaGetErrorName(gone_error_.load()) +
                    "); device times stop there, host timing is complete";
    }
    DeviceFactsSection& m = info.facts;
    m.device_times_resolved = static_cast<double>(resolved_);
    m.device_times_unresolved = static_cast<double>(pending_.size());
    m.event_pool_exhausted = static_cast<double>(pool_.exhausted());
    // Slots of dropped records, taken back by their thread (not leaked); a
    // non-zero foreign count would be a slot that could not be (a bug).
    m.event_slots_of_dropped_records = static_cast<double>(pool_.abandoned());
    m.event_slots_leaked = static_cast<double>(abandon_foreign_.load(std::memory_order_relaxed));
    m.event_pool_threads = static_cast<double>(pool_.blocks());
    m.phases_in_graph_capture = static_cast<double>(captured_);
    m.event_record_failed = static_cast<double>(record_failed_ + query_failed_);
    m.device_times_unbound_stream = static_cast<double>(unbound_);
    if (g_device_gone.load(std::memory_order_relaxed))
      m.phases_after_device_gone = static_cast<double>(after_device_gone_ + pending_.size());
    if (context_destroyed_) m.device_reset_by_application = 1.0;
    m.nvtx = nvtx_ ? 1.0 : 0.0;
    const std::uint64_t steps = aggregator.steps_completed();
    const std::uint64_t measured = steps > warmup_steps_ ? steps - warmup_steps_ : 0;
    // One entry per device phases were timed on; CUPTI adds the devices it
    // saw work on and picks the device the facts describe.
    const std::uint64_t timed = timed_devices_.load(std::memory_order_relaxed);
    for (int d = 0; d < kMaxDevices; ++d) {
      if (((timed | step_devices_) & device_bit(d)) == 0) continue;
      DeviceUsage u;
      u.id = d;
      u.phases_timed = (timed & device_bit(d)) != 0;
      u.steps_ran_on = (step_devices_ & device_bit(d)) != 0;
      info.devices.push_back(u);
    }
    windows_.stop();
    cupti_.finish(info, warmup_steps_, measured, step_devices_, timed);
    if (info.cupti_launches_unrecorded > 0) {
      try {
        info.reason += "; CUPTI activity of " + std::to_string(info.cupti_launches_unrecorded) +
                       " kernel launches never reached stepscope (another CUPTI activity client registered its "
                       "buffer callbacks): the device timeline facts are incomplete";
      } catch (...) {
      }
      if (!quiet_)
        std::fprintf(stderr,
                     "stepscope: warning: another CUPTI client took the activity buffers; %llu kernel launches have no "
                     "activity records, device timeline facts are incomplete\n",
                     static_cast<unsigned long long>(info.cupti_launches_unrecorded));
    }
    if (info.facts_device < 0) {  // no CUPTI analysis: the first device the steps ran on, else the first timed
      const std::uint64_t candidates = step_devices_ != 0 ? step_devices_ : timed;
      for (int d = 0; d < kMaxDevices && info.facts_device < 0; ++d)
        if (candidates & device_bit(d)) info.facts_device = d;
    }
    if (info.devices.empty() && !context_destroyed_) {  // no thread timed phases: name device 0, as before
      DeviceUsage zero;
      zero.id = 0;
      fill_device_properties(zero);
      info.name = zero.name;
      info.memory_capacity_mb = zero.memory_capacity_mb;
    }
    for (DeviceUsage& u : info.devices) {
      if (!context_destroyed_) fill_device_properties(u);
      if (u.id >= 0 && u.id < kMaxDevices && memory_[u.id].samples > 0) {
        u.memory_peak_mb = memory_[u.id].peak_mb;
        u.memory_capacity_mb = memory_[u.id].capacity_mb;
      }
      // The report's own name and memory figures describe the facts device.
      if (u.id == info.facts_device) {
        info.name = u.name;
        info.memory_capacity_mb = u.memory_capacity_mb;
        info.memory_peak_mb = u.memory_peak_mb;
        if (u.id < kMaxDevices && memory_[u.id].samples > 0) m.memory_in_use_mb_last = memory_[u.id].last_mb;
      }
    }
  }

 private:
  struct Pending {
    const PhaseSite* site;
    std::uint32_t step;
    std::uint16_t slot;
    bool in_step;
    std::uint8_t depth;  // nesting depth on its thread: the device accounting takes the outermost phases of a step
  };

  // False when `s`'s events must not be recorded into `stream` now: it is
  // capturing a CUDA graph (a record would become a node of the user's
  // graph), or the check failed. cudaErrorStreamCaptureImplicit: the legacy
  // stream while a blocking stream captures. Any other error is a failure,
  // not a capture (C13).
  bool capture_allows_record(cudaStream_t stream, Slot& s) noexcept {
    if (captures_open() == 0) return true;  // the callbacks saw no capture begin: nothing to ask
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    const cudaError_t qe = cudaStreamIsCapturing(stream, &capture);
    if (qe == cudaSuccess && capture == cudaStreamCaptureStatusNone) return true;
    if (qe == cudaSuccess || qe == cudaErrorStreamCaptureImplicit) {
      if (qe != cudaSuccess) (void)cudaGetLastError();
      s.state |= kSlotCaptured;
      return false;
    }
    record_failed(qe, s);
    return false;
  }

  void record_failed(cudaError_t e, Slot& s) noexcept {
    (void)cudaGetLastError();
    s.state |= kSlotRecordFailed;
    if (device_failed(e)) device_gone(e);
  }

  // Any thread: the first fatal error stops all device calls; the collector
  // prints the one warning.
  void device_gone(cudaError_t e) noexcept {
    cudaError_t none = cudaSuccess;
    (void)gone_error_.compare_exchange_strong(none, e);  // the first error is the one reported
    g_device_gone.store(true, std::memory_order_relaxed);
  }

  void warn_if_device_gone() noexcept {
    if (!g_device_gone.load(std::memory_order_relaxed) || context_destroyed_ || gone_warned_) return;
    gone_warned_ = true;
    if (!quiet_)
      std::fprintf(stderr,
                   "stepscope: warning: the CUDA device failed (%s); device timing stopped, host timing goes on\n",
                   cudaGetErrorName(gone_error_.load()));
  }

  std::uint16_t nvtx_only(const PhaseSite* site) noexcept {
    nvtx_push(site);
    return kSlotNvtxOnly;
  }

  void nvtx_push(const PhaseSite* site) noexcept {
    nvtxEventAttributes_t a{};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    if (site != nullptr) {
      a.messageType = NVTX_MESSAGE_TYPE_ASCII;
      a.message.ascii = site->name;
    } else {
      // Hook without the call site: name the range after the scope's kind.
      const ThreadState& ts = t_thread_state;
      const std::uint8_t kind = ts.ring != nullptr ? ts.ring->current_kind.load(std::memory_order_relaxed) : kNoPhase;
      a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
      a.message.registered = kind_names_[kind < kPhaseKindCount ? kind : kPhaseKindCount];
    }
    nvtxDomainRangePushEx(domain_, &a);
  }

  // Cold: the thread's first timed phase (or a retry).
  SlotBlock* attach(ThreadDevice& td) noexcept {
    if (td.exited) return nullptr;
    if (td.attach_countdown > 0) {
      --td.attach_countdown;
      return nullptr;
    }
    td.attach_countdown = kAttachRetryScopes;
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    // A bound stream's events live on the stream's device, which need not be
    // this thread's current one (a loader thread that never called
    // cudaSetDevice): C8.
    const auto stream = static_cast<cudaStream_t>(td.stream);
    if (td.bound && stream != nullptr && stream != cudaStreamLegacy && stream != cudaStreamPerThread) {
      int stream_device = -1;
      if (cudaStreamGetDevice(stream, &stream_device) == cudaSuccess && stream_device >= 0)
        device = stream_device;
      else
        (void)cudaGetLastError();
    }
    // A thread that never bound a stream and whose device has no context
    // yet: creating events would create the context (hundreds of MB of
    // device memory) for a program that may not use CUDA at all.
    if (!td.bound && !context_active(device)) return nullptr;
    SlotBlock* block = nullptr;
    {
      DeviceScope on_device(device, [this](int d) { return context_active(d); });
      if (!on_device.ok()) return nullptr;
      block = pool_.acquire_block(device);
    }
    if (block == nullptr) return nullptr;
    try {
      static thread_local ExitGuard guard;
      guard.pool = &pool_;
    } catch (...) {
    }
    td.block = block;
    td.attach_countdown = 0;
    device_.store(device, std::memory_order_relaxed);
    timed_devices_.fetch_or(device_bit(device), std::memory_order_relaxed);
    return block;
  }

  bool context_active(int device) noexcept {
    if (ctx_state_ == nullptr || device_get_ == nullptr) return true;  // cannot tell: assume the program uses CUDA
    CUdevice handle{};
    if (device_get_(&handle, device) != CUDA_SUCCESS) return true;
    unsigned int flags = 0;
    int active = 0;
    if (ctx_state_(handle, &flags, &active) != CUDA_SUCCESS) return true;
    return active != 0;
  }

  struct ExitGuard {
    EventPool* pool = nullptr;
    ~ExitGuard() {
      ThreadDevice& td = t_device;
      if (pool != nullptr && td.block != nullptr) pool->release_block(td.block);
      td.block = nullptr;
      td.exited = true;
    }
  };

  void resolve(Aggregator& aggregator) noexcept {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < pending_.size(); ++i) {
      const Pending p = pending_[i];
      Slot* s = pool_.slot(p.slot);
      if (g_device_gone.load(std::memory_order_relaxed)) {
        pending_[kept++] = p;  // never queried again; counted at finish
        continue;
      }
      const cudaError_t q = cudaEventQuery(static_cast<cudaEvent_t>(s->end_event));
      if (q == cudaErrorNotReady) {
        pending_[kept++] = p;
        continue;
      }
      if (device_failed(q)) device_gone(q);
      float ms = 0;
      if (q == cudaSuccess && cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(s->begin_event),
                                                   static_cast<cudaEvent_t>(s->end_event)) == cudaSuccess) {
        aggregator.add_device_time(p.site, p.in_step, p.step,
                                   static_cast<std::uint64_t>(static_cast<double>(ms) * 1e6 + 0.5), p.depth);
        ++resolved_;
      } else {
        (void)cudaGetLastError();
        ++query_failed_;
      }
      pool_.give_back(p.slot);
    }
    pending_.resize(kept);
  }

  // Device memory in use (all processes on the device) and capacity of
  // every device phases are timed on, once per completed step at most. The
  // caller made `current` current; each other device is made current for
  // its sample (it has a context: a thread timed phases on it).
  void sample_memory_all(int current) noexcept {
    const std::uint64_t timed = timed_devices_.load(std::memory_order_relaxed);
    for (int d = 0; d < kMaxDevices; ++d) {
      if ((timed & device_bit(d)) == 0) continue;
      if (d == current) {
        sample_memory(d);
        continue;
      }
      DeviceScope on_device(d, [this](int x) { return context_active(x); });
      if (on_device.ok()) sample_memory(d);
    }
  }
  void sample_memory(int device) noexcept {
    std::size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess && total_bytes > 0) {
      DeviceMemory& mem = memory_[device];
      mem.last_mb = static_cast<double>(total_bytes - free_bytes) / (1024.0 * 1024.0);
      mem.capacity_mb = static_cast<double>(total_bytes) / (1024.0 * 1024.0);
      if (mem.last_mb > mem.peak_mb) mem.peak_mb = mem.last_mb;
      ++mem.samples;
    } else {
      (void)cudaGetLastError();
    }
  }

  // Name and capacity (no context needed for cudaGetDeviceProperties).
  void fill_device_properties(DeviceUsage& u) noexcept {
    if (u.id < 0) return;
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, u.id) == cudaSuccess) {
      u.name = prop.name;
      u.memory_capacity_mb = static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0);
    } else {
      (void)cudaGetLastError();
    }
  }

  static constexpr int kMaxDevices = 64;  // one bit each in the device masks
  static std::uint64_t device_bit(int device) noexcept {
    return device >= 0 && device < kMaxDevices ? std::uint64_t{1} << device : 0;
  }

  EventPool pool_;
  CuptiActivity cupti_;
  CollectionWindows windows_;
  TickConverter clock_;
  bool nvtx_ = false;
  nvtxDomainHandle_t domain_ = nullptr;
  nvtxStringHandle_t kind_names_[kPhaseKindCount + 1] = {};  // the kinds' names (kPhaseKindNames), then "step"
  PrimaryCtxGetState ctx_state_ = nullptr;
  DeviceGet device_get_ = nullptr;
  std::string cupti_status_, cupti_reason_;
  std::uint64_t warmup_steps_ = kDefaultWarmupSteps;  // until configure()
  bool quiet_ = false;
  std::atomic<int> device_{-1};
  // Held by the collector (or a snapshot) around its CUDA calls, and by the
  // context-destroy callback: a reset never overlaps a poll.
  std::mutex device_calls_;
  std::atomic<bool> context_destroyed_{false};  // set under device_calls_, once
  std::atomic<cudaError_t> gone_error_{cudaSuccess};
  bool gone_warned_ = false;  // collector

  // Collector-only state.
  std::vector<Pending> pending_;
  std::uint64_t resolved_ = 0, captured_ = 0, record_failed_ = 0, query_failed_ = 0;
  std::uint64_t unbound_ = 0, after_device_gone_ = 0;
  std::atomic<std::uint64_t> abandon_foreign_{0};  // recording threads
  std::uint64_t sampled_steps_ = ~std::uint64_t{0};
  struct DeviceMemory {
    double last_mb = 0, peak_mb = 0, capacity_mb = 0;
    std::uint64_t samples = 0;
  };
  DeviceMemory memory_[kMaxDevices];             // by device ordinal
  std::uint64_t step_devices_ = 0;               // bit d: a phase inside a step was timed on device d
  std::atomic<std::uint64_t> timed_devices_{0};  // bit d: a thread attached to device d (any thread)
};

// Hooks. The current DeviceBeginHook takes no argument; a hook that receives
// the call site (for NVTX range names) is installed when phase.hpp offers it.
std::uint16_t begin_hook() noexcept {
  return g_backend->begin(nullptr);
}
std::uint16_t begin_hook_with_site(const PhaseSite* site) noexcept {
  return g_backend->begin(site);
}
void end_hook(std::uint16_t slot) noexcept {
  g_backend->end(slot);
}
void abandon_hook(std::uint16_t slot) noexcept {
  g_backend->abandon(slot);
}

template <typename Hook>
void install_hooks() noexcept {
  if constexpr (std::is_invocable_v<Hook, const PhaseSite*>)
    g_device_begin.store(static_cast<Hook>(&begin_hook_with_site), std::memory_order_release);
  else
    g_device_begin.store(static_cast<Hook>(&begin_hook), std::memory_order_release);
  g_device_end.store(&end_hook, std::memory_order_release);
  g_device_abandon.store(&abandon_hook, std::memory_order_release);
}

}  // namespace
}  // namespace cuda

bool device_in_use() noexcept {
  // dl_iterate_phdr walks the loaded objects without allocating. cudart
  // loads libcuda.so.1 on the program's first CUDA call.
  int found = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) -> int {
        if (info->dlpi_name != nullptr && std::strstr(info->dlpi_name, "libcuda.so") != nullptr) {
          *static_cast<int*>(data) = 1;
          return 1;
        }
        return 0;
      },
      &found);
  return found != 0;
}

std::unique_ptr<DeviceBackend> make_device_backend(const DeviceSwitches& switches, std::string& notice) noexcept {
  notice.clear();
  try {
    if (!switches.cuda) {
      notice = "device timing turned off by STEPSCOPE_CUDA; host timing only";
      return std::make_unique<cuda::FallbackBackend>("disabled", "device timing turned off by STEPSCOPE_CUDA");
    }
    if (switches.forked_child && device_in_use()) {
      // CUDA cannot be used in a child forked after the parent initialised
      // it: the probe would fail, or hang in the driver.
      notice = "a child forked after its parent loaded the CUDA driver: host timing only";
      return std::make_unique<cuda::FallbackBackend>(
          "forked_child", "a child forked after its parent loaded the CUDA driver cannot use CUDA; host timing only");
    }
    int devices = 0;
    auto [status, reason] = cuda::probe_cuda(devices);
    if (!status.empty()) {
      notice = "no GPU timing (" + status + "): " + reason + "; host timing only";
      return std::make_unique<cuda::FallbackBackend>(std::move(status), std::move(reason));
    }
    // One per process (make_device_backend runs once); the collector owns it
    // and the run time keeps the collector alive until exit.
    auto owned = std::make_unique<cuda::CudaBackend>(
        switches.nvtx, switches.cupti, cuda::WindowSchedule{switches.cupti_window_steps, switches.cupti_window_period});
    cuda::g_backend = owned.get();
    cuda::install_hooks<DeviceBeginHook>();
    return owned;
  } catch (...) {
    notice = "device timing could not start (out of memory); host timing only";
    try {
      return std::make_unique<cuda::FallbackBackend>("error", "device backend could not start");
    } catch (...) {
      return nullptr;
    }
  }
}

}  // namespace detail

// ---- public stream API (<stepscope/cuda.hpp>) ---------------------------------

void set_stream(void* cuda_stream) noexcept {
  detail::cuda::t_device.stream = cuda_stream;
  detail::cuda::t_device.bound = true;
}

void* current_stream() noexcept {
  return detail::cuda::t_device.stream;
}

void clear_stream() noexcept {
  detail::cuda::t_device.stream = nullptr;
  detail::cuda::t_device.bound = false;
}

namespace detail {
bool stream_bound() noexcept {
  return cuda::t_device.bound;
}
void restore_stream(void* cuda_stream, bool bound) noexcept {
  cuda::t_device.stream = cuda_stream;
  cuda::t_device.bound = bound;
}
}  // namespace detail

}  // namespace v1
}  // namespace stepscope

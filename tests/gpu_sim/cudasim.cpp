// libstepscope_cudasim.so: a test-only simulated CUDA device. It implements
// the subset of the CUDA runtime and CUPTI that stepscope's backend, its
// probes and examples call, compiled against the real toolkit headers (so
// every struct, enum and record layout is the real one), and is put in front
// of the real libcudart/libcupti with LD_PRELOAD (scripts/gpu-sim). Never
// installed, never linked into the library users get.
//
// Model (docs/gpu.md, "The simulator" lists where it simplifies CUDA):
// - device clock = CLOCK_MONOTONIC ns; each stream is a FIFO whose tail is
//   the device time its last queued operation ends; an operation starts at
//   max(now, tail) and lasts its programmed time (simcuda_set_*, env);
// - the legacy stream waits for every blocking stream of its device and they
//   wait for it; non-blocking streams do not; per-thread default streams are
//   blocking streams, one per (thread, device);
// - an event completes when the clock passes the time its stream reached at
//   cudaEventRecord; cudaEventQuery is cudaErrorNotReady until then;
// - per-thread current device (0 by default); a device's primary context is
//   created by cudaSetDevice and by any call that needs a context, counted
//   per device ("contexts_created_device<N>");
// - stream capture (global / thread-local / relaxed modes, the legacy
//   stream's cudaErrorStreamCaptureImplicit, invalidation by unsafe calls);
// - CUPTI: one subscriber at a time, runtime-API callbacks, activity records
//   (kernel, memcpy, memset, runtime, synchronisation, external correlation)
//   written into the client's buffers on flush in their real layouts, a
//   bounded record queue whose overflow is reported by
//   cuptiActivityGetNumDroppedRecords;
// - NVTX: an injection library (NVTX_INJECTION64_PATH = this library) that
//   counts domain range pushes and pops per thread.
// - what the H200 showed (issue 27): STEPSCOPE_SIM_LAUNCH_QUEUE=N bounds the
//   kernels in flight per stream (queued or running): a launch into a full
//   queue blocks the host until the oldest ends, so a host that runs ahead
//   pays for the backlog in whichever phase launches then;
//   STEPSCOPE_SIM_DRIVER_WAIT=spin makes every host wait (synchronize, a
//   synchronous copy such as loss.item(), a full queue) yield in a loop, as
//   the driver does, so the waits are kernel CPU time; with
//   STEPSCOPE_SIM_DRIVER_WAIT_FAULT_PAGES=N each wait also faults N fresh
//   pages (the driver's own page faults);
// Counters (simcuda_counter, or the file named by STEPSCOPE_SIM_COUNTERS,
// written at exit) let tests check what the backend did to the device.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti.h>
#include <nvtx3/nvToolsExt.h>

#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#define SIM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

constexpr int kMaxDevices = 8;
constexpr std::int64_t kContextBytes = 512ll << 20;        // what a primary context costs on the device
constexpr std::size_t kDeviceBytes = 80ull << 30;          // simulated device memory
constexpr std::uint64_t kDefaultQueueCapacity = 1u << 20;  // CUPTI records held before a flush

std::int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}
std::int64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}
std::uint32_t thread_id() {
  return static_cast<std::uint32_t>(syscall(SYS_gettid));
}

std::int64_t env_int(const char* name, std::int64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoll(v, nullptr, 10) : fallback;
}

// ---- device model -------------------------------------------------------------

struct Op {
  enum Kind { kernel, memcpy, memset } kind = kernel;
  std::int64_t duration_ns = 0;
  const char* name = "kernel";
  std::uint8_t copy_kind = 0, src_kind = 0, dst_kind = 0;
  std::uint64_t bytes = 0;
  int src_device = -1, dst_device = -1;  // peer copies (CUPTI MEMCPY2 records)
};

struct Graph {
  std::vector<Op> ops;
};

struct Stream {
  int device = 0;
  bool legacy = false;
  bool per_thread = false;
  bool blocking = true;
  unsigned flags = 0;
  std::uint32_t id = 0;
  std::int64_t tail_ns = 0;
  std::deque<std::int64_t> in_flight;  // end times of its launched kernels (STEPSCOPE_SIM_LAUNCH_QUEUE)
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cudaStreamCaptureMode capture_mode = cudaStreamCaptureModeGlobal;
  std::uint32_t capture_thread = 0;
  Graph* graph = nullptr;
};

struct Event {
  int device = 0;
  unsigned flags = 0;
  bool recorded = false;
  std::int64_t ts_ns = 0;
};

struct Device {
  bool context_active = false;
  Stream legacy;
  std::int64_t bytes_in_use = 0;
  std::uint32_t context_id = 0;
};

struct Record {  // a CUPTI activity record before it is written to a client buffer
  CUpti_ActivityKind kind{};
  std::int64_t start = 0, end = 0;  // monotonic ns
  std::uint32_t device = 0, context = 0, stream = 0, correlation = 0, thread = 0, cbid = 0;
  const char* name = nullptr;
  std::uint8_t copy_kind = 0, src_kind = 0, dst_kind = 0;
  std::uint64_t bytes = 0, external_id = 0;
  std::uint32_t src_device = 0, dst_device = 0;  // MEMCPY2
  std::uint32_t sync_type = 0, external_kind = 0;
};

struct Sim {
  std::mutex mu;
  int device_count = 1;
  Device devices[kMaxDevices];
  std::unordered_set<const void*> live_streams, live_events;
  std::unordered_map<const void*, std::string> kernel_names;       // host function -> device symbol
  std::vector<std::pair<std::string, std::int64_t>> kernel_times;  // name part -> ns
  std::vector<std::string> time_from_argument;                     // name parts: device time = first argument (ns)
  std::int64_t default_kernel_ns = 10'000;
  std::int64_t next_ns = -1;  // one-shot override
  double pageable_gbps = 4, pinned_gbps = 24, device_gbps = 1000, peer_gbps = 100;
  std::set<std::pair<std::uintptr_t, std::uintptr_t>> pinned;  // [begin, end) host ranges
  std::uint32_t next_stream_id = 16, next_context_id = 1;
  cudaError_t sticky = cudaSuccess;
  std::int64_t lose_after_launches = -1;
  pid_t pid = getpid();
  std::map<std::string, std::uint64_t> counters;

  // CUPTI
  bool subscribed = false;
  CUpti_CallbackFunc callback = nullptr;
  void* callback_userdata = nullptr;
  std::set<std::pair<int, std::uint32_t>> enabled_callbacks;  // (domain, cbid)
  std::set<int> enabled_domains;
  std::set<int> enabled_kinds;
  std::set<std::uint32_t> runtime_records_off;  // cuptiActivityEnableRuntimeApi(cbid, 0)
  CUpti_BuffersCallbackRequestFunc buffer_request = nullptr;
  CUpti_BuffersCallbackCompleteFunc buffer_complete = nullptr;
  CUpti_TimestampCallbackFunc timestamp_callback = nullptr;
  std::int64_t realtime_offset = realtime_ns() - now_ns();
  std::deque<Record> queue;
  // Per-thread activity buffers (CUDA 13 default, act: PER_THREAD_ACTIVITY_BUFFER
  // = 1): a thread whose runtime call produces a record requests its buffer
  // itself, inside that call; CUPTI zeroes it there unless the client set
  // ZEROED_OUT_ACTIVITY_BUFFER (review S4). The buffers wait here until a
  // flush fills them.
  std::uint8_t zeroed_out_attr = 0, per_thread_attr = 1;
  std::vector<std::pair<std::uint8_t*, std::size_t>> thread_buffers;
  std::uint64_t queue_capacity = kDefaultQueueCapacity;
  std::uint64_t dropped = 0;
  std::atomic<std::uint32_t> correlation{0};
  std::deque<std::string> names;  // kernel names handed out in records (stable pointers)
  // What CUPTI kernel activity costs the launching thread, per launch, while
  // enabled (STEPSCOPE_SIM_CUPTI_LAUNCH_NS; the H200 showed +50% on a
  // launch-bound loop): lets tests see collection windows and the run's
  // self-measured overhead.
  std::int64_t cupti_launch_ns = 0;

  Sim() {
    device_count = static_cast<int>(std::clamp<std::int64_t>(env_int("STEPSCOPE_SIM_DEVICES", 1), 0, kMaxDevices));
    default_kernel_ns = env_int("STEPSCOPE_SIM_DEFAULT_KERNEL_NS", default_kernel_ns);
    lose_after_launches = env_int("STEPSCOPE_SIM_LOSE_DEVICE_AFTER_LAUNCHES", -1);
    cupti_launch_ns = std::max<std::int64_t>(0, env_int("STEPSCOPE_SIM_CUPTI_LAUNCH_NS", 0));
    queue_capacity = static_cast<std::uint64_t>(
        env_int("STEPSCOPE_SIM_CUPTI_CAPACITY", static_cast<std::int64_t>(kDefaultQueueCapacity)));
    if (const char* gbps = std::getenv("STEPSCOPE_SIM_PAGEABLE_GBPS")) pageable_gbps = std::max(0.001, std::atof(gbps));
    for (int d = 0; d < kMaxDevices; ++d) {
      devices[d].legacy.device = d;
      devices[d].legacy.legacy = true;
      devices[d].legacy.id = 7;  // CUPTI's stream id of the legacy stream is per context
    }
    // "spin_kernel,forward_kernel": kernels that take their device time (ns,
    // unsigned long long) as their first argument, like the GPU probe's spin.
    if (const char* spec = std::getenv("STEPSCOPE_SIM_KERNEL_NS_FROM_ARG")) {
      std::string s(spec);
      for (std::size_t pos = 0; pos < s.size();) {
        std::size_t comma = s.find(',', pos);
        if (comma == std::string::npos) comma = s.size();
        if (comma > pos) time_from_argument.push_back(s.substr(pos, comma - pos));
        pos = comma + 1;
      }
    }
    // "name=ns,name=ns": device time per kernel symbol (substring match).
    if (const char* spec = std::getenv("STEPSCOPE_SIM_KERNEL_NS")) {
      std::string s(spec);
      std::size_t pos = 0;
      while (pos < s.size()) {
        std::size_t comma = s.find(',', pos);
        if (comma == std::string::npos) comma = s.size();
        const std::string item = s.substr(pos, comma - pos);
        const std::size_t eq = item.find('=');
        if (eq != std::string::npos) kernel_times.emplace_back(item.substr(0, eq), std::atoll(item.c_str() + eq + 1));
        pos = comma + 1;
      }
    }
  }

  // At exit, after the program's atexit handlers (see SimExit).
  void write_counters() {
    const char* path = std::getenv("STEPSCOPE_SIM_COUNTERS");
    // Only a process that used the device writes: LD_PRELOAD also reaches
    // the wrappers (timeout, env, a shell) that start the program.
    if (path == nullptr || *path == '\0' || getpid() != pid || counters.empty()) return;
    if (FILE* f = std::fopen(path, "w")) {
      for (const auto& [k, v] : counters) std::fprintf(f, "%s %llu\n", k.c_str(), static_cast<unsigned long long>(v));
      std::fprintf(f, "events_live %zu\n", live_events.size());
      std::fprintf(f, "cupti_subscribed_at_exit %d\n", subscribed ? 1 : 0);
      std::fclose(f);
    }
  }

  void count(const char* name, std::uint64_t n = 1) { counters[name] += n; }

  std::int64_t cupti_time(std::int64_t mono) const {
    return timestamp_callback != nullptr ? mono : mono + realtime_offset;
  }
};

Sim& sim() {
  static Sim* s = new Sim();  // never destroyed: threads may still call CUDA during exit
  return *s;
}
struct SimExit {
  ~SimExit() {
    std::lock_guard<std::mutex> lock(sim().mu);
    sim().write_counters();
  }
};
SimExit g_sim_exit;  // constructed at load, so destroyed after the program's atexit handlers

thread_local int t_device = 0;
thread_local cudaError_t t_last_error = cudaSuccess;
thread_local cudaStreamCaptureMode t_capture_mode = cudaStreamCaptureModeGlobal;
thread_local Stream* t_per_thread[kMaxDevices] = {};
thread_local std::vector<std::pair<std::uint32_t, std::uint64_t>> t_external_ids;  // (kind, id)
thread_local std::uint8_t* t_activity_buffer = nullptr;  // this thread's per-thread buffer while unflushed

// The driver library: cudart loads libcuda.so.1 on the program's first CUDA
// call; so does the simulator (a stub with that name), so that
// stepscope::detail::device_in_use() sees what it would on a GPU machine.
void load_driver_once() {
  static std::once_flag once;
  std::call_once(once, [] {
#ifdef STEPSCOPE_SIM_DRIVER
    (void)dlopen(STEPSCOPE_SIM_DRIVER, RTLD_NOW | RTLD_GLOBAL);
#endif
  });
}

// ---- CUPTI side of every runtime call ----------------------------------------

struct CallName {
  std::uint32_t cbid;
  const char* name;
};
#define SIM_CB(fn) \
  { CUPTI_RUNTIME_TRACE_CBID_##fn, #fn }
const CallName kCallNames[] = {
    SIM_CB(cudaGetDeviceCount_v3020),
    SIM_CB(cudaGetDevice_v3020),
    SIM_CB(cudaSetDevice_v3020),
    SIM_CB(cudaGetDeviceProperties_v12000),
    SIM_CB(cudaMemGetInfo_v3020),
    SIM_CB(cudaGetLastError_v3020),
    SIM_CB(cudaStreamCreate_v3020),
    SIM_CB(cudaStreamCreateWithFlags_v5000),
    SIM_CB(cudaStreamDestroy_v5050),
    SIM_CB(cudaStreamSynchronize_v3020),
    SIM_CB(cudaStreamQuery_v3020),
    SIM_CB(cudaStreamIsCapturing_v10000),
    SIM_CB(cudaStreamBeginCapture_v10000),
    SIM_CB(cudaStreamEndCapture_v10000),
    SIM_CB(cudaThreadExchangeStreamCaptureMode_v10010),
    SIM_CB(cudaStreamWaitEvent_v3020),
    SIM_CB(cudaEventCreate_v3020),
    SIM_CB(cudaEventCreateWithFlags_v3020),
    SIM_CB(cudaEventDestroy_v3020),
    SIM_CB(cudaEventRecord_v3020),
    SIM_CB(cudaEventQuery_v3020),
    SIM_CB(cudaEventSynchronize_v3020),
    SIM_CB(cudaEventElapsedTime_v3020),
    SIM_CB(cudaDeviceSynchronize_v3020),
    SIM_CB(cudaDeviceReset_v3020),
    SIM_CB(cudaMalloc_v3020),
    SIM_CB(cudaFree_v3020),
    SIM_CB(cudaMallocHost_v3020),
    SIM_CB(cudaFreeHost_v3020),
    SIM_CB(cudaMemcpy_v3020),
    SIM_CB(cudaMemcpyAsync_v3020),
    SIM_CB(cudaMemcpyPeer_v4000),
    SIM_CB(cudaMemcpyPeerAsync_v4000),
    SIM_CB(cudaMemset_v3020),
    SIM_CB(cudaMemsetAsync_v3020),
    SIM_CB(cudaLaunchKernel_v7000),
    SIM_CB(__cudaLaunchKernel_v13000),
    SIM_CB(__cudaLaunchKernel_ptsz_v13000),
    SIM_CB(cudaGraphInstantiate_v10000),
    SIM_CB(cudaGraphLaunch_v10000),
    SIM_CB(cudaStreamGetDevice_v12080),
    SIM_CB(cudaStreamGetFlags_v5050),
};
#undef SIM_CB

// One runtime call as CUPTI sees it: enter/exit callbacks (outside the
// simulator's lock: the subscriber may call CUDA) and a RUNTIME record.
class ApiCall {
 public:
  explicit ApiCall(std::uint32_t cbid, const char* name) : cbid_(cbid), name_(name) {
    load_driver_once();
    Sim& s = sim();
    if (getpid() != s.pid) {
      std::lock_guard<std::mutex> lock(s.mu);
      s.count("calls_in_forked_child");
    }
    correlation_ = ++s.correlation;
    start_ = now_ns();
    invoke(CUPTI_API_ENTER);
  }
  ~ApiCall() {
    invoke(CUPTI_API_EXIT);
    Sim& s = sim();
    std::lock_guard<std::mutex> lock(s.mu);
    s.count("runtime_calls");
    if (s.enabled_kinds.count(CUPTI_ACTIVITY_KIND_RUNTIME) && !s.runtime_records_off.count(cbid_)) {
      Record r;
      r.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
      r.start = start_;
      r.end = now_ns();
      r.cbid = cbid_;
      r.correlation = correlation_;
      r.thread = thread_id();
      push_record(s, r);
      request_thread_buffer(lock);
    }
    if (s.enabled_kinds.count(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) && !t_external_ids.empty()) {
      Record r;
      r.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
      r.correlation = correlation_;
      r.external_kind = t_external_ids.back().first;
      r.external_id = t_external_ids.back().second;
      push_record(s, r);
    }
  }
  std::uint32_t correlation() const { return correlation_; }
  // This thread's first record since its buffer was last flushed: the
  // buffer request (and CUPTI's zeroing) happen here, on the calling thread.
  static void request_thread_buffer(std::lock_guard<std::mutex>&) {
    Sim& s = sim();
    if (!s.per_thread_attr || s.buffer_request == nullptr) return;
    for (const auto& b : s.thread_buffers)
      if (b.first == t_activity_buffer) return;  // still has an unflushed buffer
    CUpti_BuffersCallbackRequestFunc request = s.buffer_request;
    const std::uint8_t zeroed_by_client = s.zeroed_out_attr;
    s.mu.unlock();  // the client's callback runs without the simulator's lock
    const std::int64_t t0 = now_ns();
    std::uint8_t* buffer = nullptr;
    std::size_t size = 0, max_records = 0;
    request(&buffer, &size, &max_records);
    if (buffer != nullptr && !zeroed_by_client)
      std::memset(buffer, 0, size);  // "CUPTI will zero out the buffer in the main thread"
    const std::int64_t spent = now_ns() - t0;
    s.mu.lock();
    s.count("cupti_buffer_requests_in_api_calls");
    s.count("cupti_request_ns_in_api_calls", static_cast<std::uint64_t>(spent));
    if (!zeroed_by_client && buffer != nullptr) s.count("cupti_bytes_zeroed_in_api_calls", size);
    if (buffer == nullptr || size < 512) return;
    t_activity_buffer = buffer;
    s.thread_buffers.emplace_back(buffer, size);
  }
  static void push_record(Sim& s, const Record& r) {
    if (s.queue.size() >= s.queue_capacity) {
      ++s.dropped;
      s.count("cupti_records_dropped");
      return;
    }
    s.queue.push_back(r);
  }

 private:
  void invoke(CUpti_ApiCallbackSite site) {
    Sim& s = sim();
    CUpti_CallbackFunc fn = nullptr;
    void* user = nullptr;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      if (s.subscribed && (s.enabled_domains.count(CUPTI_CB_DOMAIN_RUNTIME_API) ||
                           s.enabled_callbacks.count({CUPTI_CB_DOMAIN_RUNTIME_API, cbid_}))) {
        fn = s.callback;
        user = s.callback_userdata;
      }
    }
    if (fn == nullptr) return;
    CUpti_CallbackData data{};
    data.callbackSite = site;
    data.functionName = name_;
    data.correlationId = correlation_;
    fn(user, CUPTI_CB_DOMAIN_RUNTIME_API, cbid_, &data);
  }
  std::uint32_t cbid_;
  const char* name_;
  std::uint32_t correlation_ = 0;
  std::int64_t start_ = 0;
};

#define SIM_API(fn) ApiCall api_call_(CUPTI_RUNTIME_TRACE_CBID_##fn, #fn)

cudaError_t fail(cudaError_t e) {
  if (e != cudaSuccess && e != cudaErrorNotReady) t_last_error = e;
  return e;
}

// Called with the lock held by every call that needs a context.
cudaError_t need_context(Sim& s) {
  if (s.sticky != cudaSuccess) return s.sticky;
  if (s.device_count == 0) return cudaErrorNoDevice;
  Device& d = s.devices[t_device];
  if (!d.context_active) {
    d.context_active = true;
    d.context_id = s.next_context_id++;
    d.bytes_in_use += kContextBytes;
    s.count(("contexts_created_device" + std::to_string(t_device)).c_str());
  }
  return cudaSuccess;
}

Stream* resolve_stream(Sim& s, cudaStream_t handle, bool per_thread_default) {
  if (handle == cudaStreamLegacy || (handle == nullptr && !per_thread_default)) return &s.devices[t_device].legacy;
  if (handle == cudaStreamPerThread || handle == nullptr) {
    Stream*& p = t_per_thread[t_device];
    if (p == nullptr) {
      p = new Stream();
      p->device = t_device;
      p->per_thread = true;
      p->id = s.next_stream_id++;
      s.live_streams.insert(p);
    }
    return p;
  }
  auto* st = reinterpret_cast<Stream*>(handle);
  if (!s.live_streams.count(st)) {
    s.count("invalid_handle_uses");
    return nullptr;
  }
  return st;
}

// With the lock held: the context (created if needed) and the stream, or
// the error the call returns.
cudaError_t context_stream(Sim& s, cudaStream_t handle, Stream*& out) {
  if (cudaError_t e = need_context(s); e != cudaSuccess) return e;
  out = resolve_stream(s, handle, false);
  return out != nullptr ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

std::vector<Stream*> blocking_streams(Sim& s, int device) {
  std::vector<Stream*> out;
  for (const void* p : s.live_streams) {
    auto* st = const_cast<Stream*>(static_cast<const Stream*>(p));
    if (st->device == device && st->blocking) out.push_back(st);
  }
  return out;
}

// Device time at which the next operation queued on `st` may start, and the
// legacy stream's barrier semantics.
std::int64_t ready_time(Sim& s, Stream& st) {
  std::int64_t t = std::max(now_ns(), st.tail_ns);
  if (st.legacy) {
    for (Stream* b : blocking_streams(s, st.device)) t = std::max(t, b->tail_ns);
  } else if (st.blocking) {
    t = std::max(t, s.devices[st.device].legacy.tail_ns);
  }
  return t;
}
void advance(Sim& s, Stream& st, std::int64_t end) {
  st.tail_ns = end;
  if (st.legacy)
    for (Stream* b : blocking_streams(s, st.device)) b->tail_ns = std::max(b->tail_ns, end);
}

bool any_global_capture(Sim& s, std::uint32_t caller) {
  for (const void* p : s.live_streams) {
    const auto* st = static_cast<const Stream*>(p);
    if (st->capture != cudaStreamCaptureStatusActive) continue;
    if (st->capture_mode == cudaStreamCaptureModeGlobal) return true;
    if (st->capture_mode == cudaStreamCaptureModeThreadLocal && st->capture_thread == caller) return true;
  }
  return false;
}

// A "potentially unsafe" call (cudaEventQuery, cudaMemGetInfo, cudaMalloc,
// synchronisation) while a capture is active in global mode invalidates it,
// unless this thread relaxed its capture interaction mode.
cudaError_t check_unsafe(Sim& s) {
  if (t_capture_mode == cudaStreamCaptureModeRelaxed) return cudaSuccess;
  if (!any_global_capture(s, thread_id())) return cudaSuccess;
  for (const void* p : s.live_streams) {
    auto* st = const_cast<Stream*>(static_cast<const Stream*>(p));
    if (st->capture == cudaStreamCaptureStatusActive) st->capture = cudaStreamCaptureStatusInvalidated;
  }
  s.count("capture_invalidations");
  return cudaErrorStreamCaptureUnsupported;
}

std::int64_t kernel_time(Sim& s, const char* name, void** args) {
  if (s.next_ns >= 0) {
    const std::int64_t t = s.next_ns;
    s.next_ns = -1;
    return t;
  }
  if (args != nullptr && args[0] != nullptr)
    for (const std::string& part : s.time_from_argument)
      if (std::strstr(name, part.c_str()) != nullptr)
        return static_cast<std::int64_t>(*static_cast<const unsigned long long*>(args[0]));
  for (auto it = s.kernel_times.rbegin(); it != s.kernel_times.rend(); ++it)
    if (std::strstr(name, it->first.c_str()) != nullptr) return it->second;
  return s.default_kernel_ns;
}

// Queues one operation (or adds it to the graph under capture).
cudaError_t enqueue(Sim& s, Stream& st, const Op& op, std::uint32_t correlation) {
  if (st.capture == cudaStreamCaptureStatusActive) {
    st.graph->ops.push_back(op);
    return cudaSuccess;
  }
  if (st.capture == cudaStreamCaptureStatusInvalidated) return cudaErrorStreamCaptureInvalidated;
  const std::int64_t start = ready_time(s, st);
  const std::int64_t end = start + op.duration_ns;
  // The device idled between two operations of this stream (the host fell
  // behind): tests of device-paced figures read it ("device_gap_ns").
  if (st.tail_ns > 0 && start > st.tail_ns) s.count("device_gap_ns", static_cast<std::uint64_t>(start - st.tail_ns));
  advance(s, st, end);
  Record r;
  r.start = start;
  r.end = end;
  r.device = static_cast<std::uint32_t>(st.device);
  r.context = s.devices[st.device].context_id;
  r.stream = st.id;
  r.correlation = correlation;
  r.bytes = op.bytes;
  switch (op.kind) {
    case Op::kernel:
      r.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
      s.names.emplace_back(op.name);
      r.name = s.names.back().c_str();
      s.count("kernels");
      break;
    case Op::memcpy:
      // act: "For peer to peer memory copy, use the kind CUPTI_ACTIVITY_KIND_MEMCPY2".
      r.kind =
          op.copy_kind == CUPTI_ACTIVITY_MEMCPY_KIND_PTOP ? CUPTI_ACTIVITY_KIND_MEMCPY2 : CUPTI_ACTIVITY_KIND_MEMCPY;
      r.copy_kind = op.copy_kind;
      r.src_kind = op.src_kind;
      r.dst_kind = op.dst_kind;
      r.src_device = static_cast<std::uint32_t>(op.src_device);
      r.dst_device = static_cast<std::uint32_t>(op.dst_device);
      s.count(r.kind == CUPTI_ACTIVITY_KIND_MEMCPY2 ? "peer_memcpys" : "memcpys");
      break;
    case Op::memset:
      r.kind = CUPTI_ACTIVITY_KIND_MEMSET;
      s.count("memsets");
      break;
  }
  if (s.enabled_kinds.count(r.kind) ||
      (r.kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && s.enabled_kinds.count(CUPTI_ACTIVITY_KIND_KERNEL)))
    ApiCall::push_record(s, r);
  return cudaSuccess;
}

// How the host waits for the device (STEPSCOPE_SIM_DRIVER_WAIT*): asleep, or
// yielding in a loop as the CUDA driver does (kernel CPU time).
void sleep_until(std::int64_t t) {
  static const bool spin = [] {
    const char* v = std::getenv("STEPSCOPE_SIM_DRIVER_WAIT");
    return v != nullptr && std::strcmp(v, "spin") == 0;
  }();
  static const std::int64_t fault_pages = env_int("STEPSCOPE_SIM_DRIVER_WAIT_FAULT_PAGES", 0);
  if (fault_pages > 0 && now_ns() < t) {
    const std::size_t bytes = static_cast<std::size_t>(fault_pages) * 4096;
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) {
      for (std::size_t i = 0; i < bytes; i += 4096) static_cast<volatile char*>(p)[i] = 1;
      munmap(p, bytes);
    }
  }
  for (std::int64_t n = now_ns(); n < t; n = now_ns()) {
    if (spin)
      sched_yield();
    else
      std::this_thread::sleep_for(std::chrono::nanoseconds(std::min<std::int64_t>(t - n, 1'000'000)));
  }
}

// A full launch queue (STEPSCOPE_SIM_LAUNCH_QUEUE): the host waits, without
// the lock, until the oldest operation in flight on `st` ends.
std::size_t launch_queue_depth() {
  static const auto depth =
      static_cast<std::size_t>(std::max<std::int64_t>(0, env_int("STEPSCOPE_SIM_LAUNCH_QUEUE", 0)));
  return depth;
}
void wait_for_queue_slot(std::unique_lock<std::mutex>& lock, Sim& s, Stream& st) {
  const std::size_t depth = launch_queue_depth();
  if (depth == 0 || st.capture != cudaStreamCaptureStatusNone) return;
  for (;;) {
    const std::int64_t now = now_ns();
    while (!st.in_flight.empty() && st.in_flight.front() <= now) st.in_flight.pop_front();
    if (st.in_flight.size() < depth) break;
    const std::int64_t until = st.in_flight.front();
    s.count("launch_queue_full");
    lock.unlock();
    sleep_until(until);
    lock.lock();
  }
}

// Synchronising call: waits (without the lock) for device time `until`,
// counted and recorded as CUPTI SYNCHRONIZATION activity.
void host_wait(std::unique_lock<std::mutex>& lock, Sim& s, std::int64_t until, std::uint32_t type,
               std::uint32_t correlation, std::uint32_t stream) {
  s.count("sync_calls");
  const std::int64_t start = now_ns();
  lock.unlock();
  sleep_until(until);
  lock.lock();
  if (s.enabled_kinds.count(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION)) {
    Record r;
    r.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
    r.start = start;
    r.end = now_ns();
    r.sync_type = type;
    r.correlation = correlation;
    r.stream = stream;
    r.context = s.devices[t_device].context_id;
    ApiCall::push_record(s, r);
  }
}

std::uint8_t memory_kind(Sim& s, const void* p, bool device_side) {
  if (device_side) return CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  auto it = s.pinned.upper_bound({a, ~std::uintptr_t{0}});
  if (it != s.pinned.begin() && a < std::prev(it)->second) return CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
  return CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
}

Op copy_op(Sim& s, void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  Op op;
  op.kind = Op::memcpy;
  op.bytes = bytes;
  const bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  const bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  op.copy_kind = kind == cudaMemcpyHostToDevice     ? CUPTI_ACTIVITY_MEMCPY_KIND_HTOD
                 : kind == cudaMemcpyDeviceToHost   ? CUPTI_ACTIVITY_MEMCPY_KIND_DTOH
                 : kind == cudaMemcpyDeviceToDevice ? CUPTI_ACTIVITY_MEMCPY_KIND_DTOD
                                                    : CUPTI_ACTIVITY_MEMCPY_KIND_HTOH;
  op.src_kind = memory_kind(s, src, src_dev);
  op.dst_kind = memory_kind(s, dst, dst_dev);
  const bool pageable =
      op.src_kind == CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE || op.dst_kind == CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
  const double gbps = (src_dev && dst_dev) ? s.device_gbps : pageable ? s.pageable_gbps : s.pinned_gbps;
  op.duration_ns = static_cast<std::int64_t>(static_cast<double>(bytes) / gbps);  // GB/s = bytes/ns
  if (s.next_ns >= 0) {
    op.duration_ns = s.next_ns;
    s.next_ns = -1;
  }
  return op;
}

// The programmed CUPTI cost of one launch (cupti_launch_ns), paid on the
// calling thread, outside the simulator's lock, while kernel activity is on.
void pay_cupti_launch_cost(Sim& s) {
  std::int64_t cost = 0;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.cupti_launch_ns > 0 && (s.enabled_kinds.count(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) ||
                                  s.enabled_kinds.count(CUPTI_ACTIVITY_KIND_KERNEL))) {
      cost = s.cupti_launch_ns;
      s.count("cupti_launch_cost_paid");
    }
  }
  for (const std::int64_t until = now_ns() + cost; cost > 0 && now_ns() < until;) {
  }
}

cudaError_t launch(std::uint32_t correlation, const void* func, void** args, cudaStream_t stream,
                   bool per_thread_default) {
  Sim& s = sim();
  pay_cupti_launch_cost(s);
  std::unique_lock<std::mutex> lock(s.mu);
  if (cudaError_t e = need_context(s); e != cudaSuccess) return fail(e);
  Stream* st = resolve_stream(s, stream, per_thread_default);
  if (st == nullptr) return fail(cudaErrorInvalidResourceHandle);
  wait_for_queue_slot(lock, s, *st);
  Op op;
  auto it = s.kernel_names.find(func);
  op.name = it != s.kernel_names.end() ? it->second.c_str() : "kernel";
  op.duration_ns = kernel_time(s, op.name, args);
  const cudaError_t e = enqueue(s, *st, op, correlation);
  if (launch_queue_depth() > 0 && st->capture == cudaStreamCaptureStatusNone) st->in_flight.push_back(st->tail_ns);
  s.count("launches");
  if (s.lose_after_launches >= 0 && static_cast<std::int64_t>(s.counters["launches"]) >= s.lose_after_launches) {
    s.sticky = cudaErrorLaunchFailure;
    s.count("device_lost");
  }
  return fail(e);
}

// ---- CUPTI record layouts -----------------------------------------------------

std::size_t record_size(CUpti_ActivityKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      return sizeof(CUpti_ActivityKernel10);
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      return sizeof(CUpti_ActivityMemcpy6);
    case CUPTI_ACTIVITY_KIND_MEMCPY2:
      return sizeof(CUpti_ActivityMemcpyPtoP4);
    case CUPTI_ACTIVITY_KIND_MEMSET:
      return sizeof(CUpti_ActivityMemset4);
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
      return sizeof(CUpti_ActivitySynchronization2);
    case CUPTI_ACTIVITY_KIND_RUNTIME:
      return sizeof(CUpti_ActivityAPI);
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION:
      return sizeof(CUpti_ActivityExternalCorrelation);
    default:
      return 0;
  }
}
std::size_t aligned(std::size_t n) {
  return (n + 7) & ~std::size_t{7};
}

// The fields kernel, memcpy and memset records share.
template <typename T>
T* device_record(std::uint8_t* out, const Record& r, std::uint64_t start, std::uint64_t end) {
  auto* x = new (out) T{};
  x->kind = r.kind;
  x->start = start;
  x->end = end;
  x->deviceId = r.device;
  x->contextId = r.context;
  x->streamId = r.stream;
  x->correlationId = r.correlation;
  return x;
}

// Writes `r` as its real CUPTI struct; a kernel still running at a forced
// flush gets end = 0 (as CUPTI hands incomplete records back).
void write_record(const Sim& s, const Record& r, std::uint8_t* out, bool incomplete) {
  const std::uint64_t start = static_cast<std::uint64_t>(s.cupti_time(r.start));
  const std::uint64_t end = incomplete ? 0 : static_cast<std::uint64_t>(s.cupti_time(r.end));
  switch (r.kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      auto* k = device_record<CUpti_ActivityKernel10>(out, r, start, end);
      k->name = r.name;
      k->gridX = k->gridY = k->gridZ = k->blockX = k->blockY = k->blockZ = 1;
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      auto* m = device_record<CUpti_ActivityMemcpy6>(out, r, start, end);
      m->copyKind = r.copy_kind;
      m->srcKind = r.src_kind;
      m->dstKind = r.dst_kind;
      m->bytes = r.bytes;
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY2: {
      auto* m = device_record<CUpti_ActivityMemcpyPtoP4>(out, r, start, end);
      m->copyKind = r.copy_kind;
      m->srcKind = m->dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
      m->bytes = r.bytes;
      m->srcDeviceId = r.src_device;
      m->dstDeviceId = r.dst_device;
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      auto* m = device_record<CUpti_ActivityMemset4>(out, r, start, end);
      m->bytes = r.bytes;
      m->memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
      break;
    }
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
      auto* y = new (out) CUpti_ActivitySynchronization2{};
      y->kind = r.kind;
      y->type = static_cast<CUpti_ActivitySynchronizationType>(r.sync_type);
      y->start = start;
      y->end = end;
      y->correlationId = r.correlation;
      y->contextId = r.context;
      y->streamId = r.stream;
      break;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME: {
      auto* a = new (out) CUpti_ActivityAPI{};
      a->kind = r.kind;
      a->cbid = r.cbid;
      a->start = start;
      a->end = end;
      a->processId = static_cast<std::uint32_t>(s.pid);
      a->threadId = r.thread;
      a->correlationId = r.correlation;
      break;
    }
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
      auto* x = new (out) CUpti_ActivityExternalCorrelation{};
      x->kind = r.kind;
      x->externalKind = static_cast<CUpti_ExternalCorrelationKind>(r.external_kind);
      x->externalId = r.external_id;
      x->correlationId = r.correlation;
      break;
    }
    default:
      break;
  }
}

bool is_device_record(CUpti_ActivityKind k) {
  return k == CUPTI_ACTIVITY_KIND_KERNEL || k == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
         k == CUPTI_ACTIVITY_KIND_MEMCPY || k == CUPTI_ACTIVITY_KIND_MEMCPY2 || k == CUPTI_ACTIVITY_KIND_MEMSET;
}

}  // namespace

// ---- side API (tests) -----------------------------------------------------------

SIM_EXPORT void simcuda_set_kernel_ns(const char* name_part, std::int64_t ns) {
  std::lock_guard<std::mutex> lock(sim().mu);
  sim().kernel_times.emplace_back(name_part, ns);
}
SIM_EXPORT void simcuda_set_next_ns(std::int64_t ns) {
  std::lock_guard<std::mutex> lock(sim().mu);
  sim().next_ns = ns;
}
SIM_EXPORT void simcuda_register_kernel(const void* func, const char* name) {
  std::lock_guard<std::mutex> lock(sim().mu);
  sim().kernel_names[func] = name;
}
SIM_EXPORT void simcuda_lose_device() {
  std::lock_guard<std::mutex> lock(sim().mu);
  sim().sticky = cudaErrorLaunchFailure;
  sim().count("device_lost");
}
SIM_EXPORT std::uint64_t simcuda_counter(const char* name) {
  std::lock_guard<std::mutex> lock(sim().mu);
  if (std::strcmp(name, "events_live") == 0) return sim().live_events.size();
  if (std::strcmp(name, "cupti_subscribed") == 0) return sim().subscribed ? 1 : 0;
  auto it = sim().counters.find(name);
  return it != sim().counters.end() ? it->second : 0;
}

// ---- driver entry points handed out by cudaGetDriverEntryPointByVersion ---------

namespace {
CUresult CUDAAPI sim_cuDeviceGet(CUdevice* device, int ordinal) {
  if (ordinal < 0 || ordinal >= sim().device_count) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI sim_cuDevicePrimaryCtxGetState(CUdevice device, unsigned int* flags, int* active) {
  std::lock_guard<std::mutex> lock(sim().mu);
  if (device < 0 || device >= sim().device_count) return CUDA_ERROR_INVALID_DEVICE;
  *flags = 0;
  *active = sim().devices[device].context_active ? 1 : 0;
  return CUDA_SUCCESS;
}
}  // namespace

// ---- CUDA runtime -----------------------------------------------------------------

SIM_EXPORT cudaError_t cudaGetDeviceCount(int* count) {
  SIM_API(cudaGetDeviceCount_v3020);
  std::lock_guard<std::mutex> lock(sim().mu);
  *count = sim().device_count;
  return sim().device_count > 0 ? cudaSuccess : fail(cudaErrorNoDevice);
}
SIM_EXPORT cudaError_t cudaDriverGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}
SIM_EXPORT cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}
SIM_EXPORT cudaError_t cudaGetDevice(int* device) {
  SIM_API(cudaGetDevice_v3020);
  *device = t_device;
  return cudaSuccess;
}
SIM_EXPORT cudaError_t cudaSetDevice(int device) {
  SIM_API(cudaSetDevice_v3020);
  Sim& s = sim();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.sticky != cudaSuccess) return fail(s.sticky);
  if (device < 0 || device >= s.device_count) return fail(cudaErrorInvalidDevice);
  t_device = device;
  return fail(need_context(s));  // CUDA 12+: cudaSetDevice initialises the primary context
}
SIM_EXPORT cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  SIM_API(cudaGetDeviceProperties_v12000);
  if (device < 0 || device >= sim().device_count) return fail(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof(prop->name), "stepscope simulated GPU %d", device);
  prop->totalGlobalMem = kDeviceBytes;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 132;
  return cudaSuccess;
}
SIM_EXPORT cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  SIM_API(cudaMemGetInfo_v3020);
  Sim& s = sim();
  std::lock_guard<std::mutex> lock(s.mu);
  if (cudaError_t e = need_context(s); e != cudaSuccess) return fail(e);
  if (cudaError_t e = check_unsafe(s); e != cudaSuccess) return fail(e);
  *total_bytes = kDeviceBytes;
  *free_bytes = kDeviceBytes - static_cast<std::size_t>(s.devices[t_device].bytes_in_use);
  return cudaSuccess;
}
SIM_EXPORT cudaError_t cudaGetLastError() {
  const cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  if (sim().sticky != cudaSuccess) return sim().sticky;
  return e;
}
SIM_EXPORT cudaError_t cudaPeekAtLastError() {
  return sim().sticky != cudaSuccess ? sim().sticky : t_last_error;
}
SIM_EXPORT const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
    case cudaErrorStreamCaptureImplicit:
      return "cudaErrorStreamCaptureImplicit";
    case cudaErrorStreamCaptureUnsupported:
      return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated:
      return "cudaErrorStreamCaptureInvalidated";
    default:
      return "cudaErrorSimulated";
  }
}
SIM_EXPORT const char* cudaGetErrorString(cudaError_t e) {
  return e == cudaSuccess ? "no error" : "simulated CUDA error";
}
SIM_EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned int, unsigned long long,
                                                        cudaDriverEntryPointQueryResult* status) {
  *fn = nullptr;
  if (std::strcmp(symbol, "cuDevicePrimaryCtxGetState") == 0)
    *fn = reinterpret_cast<void*>(&sim_cuDevicePrimaryCtxGetState);
  if (std::strcmp(symbol, "cuDeviceGet") == 0) *fn = reinterpret_cast<void*>(&sim_cuDeviceGet);
  if (status != nullptr) *status = *fn != nullptr ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return *fn != nullptr ? cudaSuccess : fail(cudaErrorSymbolNotFound);
}

// Streams
SIM_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t* out, unsigned int flags) {
  SIM_API(cudaStreamCreateWithFlags_v5000);
  Sim& s = sim();
  std::lock_guard<std::mutex> lock(s.mu);
  if (cudaError_t e = need_context(s); e != cudaSuccess) return fail(e);
  auto* st = new Stream();
  st->device = t_device;
  st->flags = flags;
  st->blocking = (flags & cudaStreamNonBlocking) == 0;
  st->id = s.next_stream_id++;
  s.live_streams.insert(st);
  *out = reinterpret_cast<cudaStream_t>(st);
  return cudaSuccess;
}
SIM_EXPORT cudaError_t cudaStreamCreate(cudaStream_t* out) {
  return cudaStreamCreateWithFlags(out, cudaStreamDefault);
}
SIM_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  SIM_API(cudaStreamDestroy_v5050);
  std::lock_guard<std::mutex> lock(sim().mu);
  if (!sim().live_streams.erase(stream)) return fail(cudaErrorInvalidResourceHandle);
  return cudaSuccess;  // the object is kept: a later use is detected, not a crash
}
SIM_EXPORT cudaError_t cudaStreamGetDevice(cudaStream_t stream, int* device) {
  SIM_API(cudaStreamGetDevice_v12080);
  Sim& s = sim();
  std::lock_guard<std::mutex> lock(s.mu);
  Stream* st = resolve_stream(s, stream, false);
  if (st == nullptr) return fail(cudaErrorInvalidResourceHandle);
  *device = st->device;
  return cudaSuccess;
}
SIM_EXPORT cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned int* flags) {
  SIM_API(cudaStreamGetFlags_v5050);
  Sim& s = sim();
  std::lock_guard<std::mutex> lock(s.mu);
  Stream* st = resolve_stream(s, stream, false);
  if (st == nullptr) return fail(cudaErrorInvalidResourceHandle);
  *flags = st->flags;
  return cudaSuccess;
}
SIM_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  SIM_API(cudaStreamSynchronize_v3020);
  Sim& s = sim();
  std::unique_lock<std::mutex> lock(s.mu);
  if (cudaError_t e = need_context(s); e != cudaSuccess) return fail(e);
  if (cudaError_t e = check_unsafe(s); e != cudaSuccess) return fail(e);
  Stream* st = resolve_stream(s, stream, false);
  if (st == nullptr) return fail(cudaErrorInvalidResourceHandle);
  const std::int64_t until = st->legacy ? ready_time(s, *st) : st->tail_ns;
  host_wait(lock, s, until, CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE, api_call_.correlation(), st->id);
  return cudaSuccess;
}
SIM_EXPORT cudaError_t cudaStreamQuery(cudaStream_t stream) {
  SIM_API(cudaStreamQuery_v3020);
  Sim& s = sim();
  std::lock_guard<std::mutex> lock(s.mu);
  Stream* st = nullptr;
  if (cudaError_t e = context_stream(s, stream, st); e != cudaSuccess) return fail(e);
  return now_ns() >= st->tail_ns ? cudaSuccess : cudaErrorNotReady;
}
SIM_EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  SIM_API(cudaStreamIsCapturing_v10000);
  Sim& s = sim();
  std::lock_guard<std::mutex> lock(s.mu);
  s.count("capture_checks");
  Stream* st = nullptr;
  if (cudaError_t e = context_stream(s, stream, st); e != cudaSuccess) return fail(e);
  if (st->legacy) {
    // The legacy stream while a blocking stream captures (rt: cudaStreamIsCapturing).
    for (Stream* b : blocking_streams(s, st->device))
      if (b->capture == cudaStreamCaptureStatusActive) return fail(cudaErrorStreamCaptureImplicit);
  }
  *status = st->capture;
  return cudaSuccess;
}
SIM_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  SIM_API(cudaStreamBeginCapture_v10000);
  Sim& s = sim();
  std::lock_guard<std::mutex> lock(s.mu);
  if (cudaError_t e = need_context(s); e != cudaSuccess) return fail(e);
  Stream* st = resolve_stream(s, stream, false);
  if (st == nullptr || st->legacy) return fail(cudaErrorStreamCaptureUnsupported);
  if (st->capture != cudaStreamCaptureStatusNone) return fail(cudaErrorIllegalState);
  st->capture = cudaStreamCaptureStatusActive;
  st->capture_mode = mode;
  st->capture_thread = thread_id();
  st->graph = new Graph();
  return cudaSuccess;
}
SIM_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  SIM_API(cudaStreamEndCapture_v10000);
  Sim& s = sim();
  std::lock_guard<std::mutex> lock(s.mu);
  Stream* st = resolve_stream(s, stream, false);
  if (st == nullptr || st->capture == cudaStreamCaptureStatusNone) return fail(cudaErrorIllegalState);
  const bool invalidated = st->capture == cudaStreamCaptureStatusInvalidated;
  st->capture = cudaStreamCaptureStatusNone;
  *graph = invalidated ? nullptr : reinterpret_cast<cudaGraph_t>(st->graph);
  st->graph = nullptr;
  return invalidated ? fail(cudaErrorStreamCaptureInvalidated) : cudaSuccess;
}
SIM_EXPORT cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  SIM_API(cudaThreadExchangeStreamCaptureMode_v10010);
  Sim& s = sim();
  std::lock_guard<std::mutex> lock(s.mu);
  // Allocates per-device runtime state on the current device (mscclpp #757).
  if (cudaError_t e = need_context(s); e != cudaSuccess) return fail(e);
  std::swap(*mode, t_capture_mode);
  return cudaSuccess;
}
SIM_EXPORT cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  SIM_API(cudaGraphInstantiate_v10000);
  if (graph == nullptr) return fail(cudaErrorInvalidValue);
  *exec = reinterpret_cast<cudaGraphExec_t>(graph);  // the same node list
  return cudaSuccess;
}
SIM_EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  SIM_API(cudaGraphLaunch_v10000);
  Sim& s = sim();
  std::lock_guard<std::mutex> lock(s.mu);
  if (cudaError_t e = need_context(s); e != cudaSuccess) return fail(e);
  Stream* st = resolve_stream(s, stream, false);
  if (st == nullptr || exec == nullptr) return fail(cudaErrorInvalidResourceHandle);
  for (const Op& op : reinterpret_cast<Graph*>(exec)->ops)
    if (cudaError_t e = enqueue(s, *st, op, api_call_.correlation()); e != cudaSuccess) return fail(e);
  s.count("graph_launches");
  return cudaSuccess;
}
SIM_EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t) {
  return cudaSuccess;
}
SIM_EXPORT cudaError_t cudaGraphExecDestroy(cudaGraphExec_t) {
  return cudaSuccess;
}

// Events
SIM_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t* out, unsigned int flags) {
  SIM_API(cudaEventCreateWithFlags_v3020);
  Sim& s = sim();
  std::lock_guard<std::mutex> lock(s.mu);
  if (cudaError_t e = need_context(s); e != cudaSuccess) return fail(e);
  auto* ev = new Event();
  ev->device = t_device;
  ev->flags = flags;
  s.live_events.insert(ev);
  s.count("events_created");
  *out = reinterpret_cast<cudaEvent_t>(ev);
  return cudaSuccess;
}
SIM_EXPORT cudaError_t cudaEventCreate(cudaEvent_t* out) {
  return cudaEventCreateWithFlags(out, cudaEventDefault);
}
SIM_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t event) {
  SIM_API(cudaEventDestroy_v3020);
  std::lock_guard<std::mutex> lock(sim().mu);
  if (!sim().live_events.erase(event)) {
    sim().count("invalid_handle_uses");
    return fail(cudaErrorInvalidResourceHandle);
  }
  return cudaSuccess;
}
namespace {
Event* live_event(Sim& s, cudaEvent_t e) {
  if (!s.live_events.count(e)) {
    s.count("invalid_handle_uses");
    return nullptr;
  }
  return reinterpret_cast<Event*>(e);
}
}  // namespace
SIM_EXPORT cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  SIM_API(cudaEventRecord_v3020);
  Sim& s = sim();
  std::lock_guard<std::mutex> lock(s.mu);
  if (cudaError_t e = need_context(s); e != cudaSuccess) return fail(e);
  Event* ev = live_event(s, event);
  Stream* st = resolve_stream(s, stream, false);
  if (ev == nullptr || st == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (ev->device != st->device) {  // "event and stream must be on the same CUDA context"
    s.count("event_record_wrong_device");
    return fail(cudaErrorInvalidResourceHandle);
  }
  if (st->capture == cudaStreamCaptureStatusActive) {
    s.count("event_records_in_capture");  // becomes an event-record node of the user's graph
    return cudaSuccess;
  }
  if (st->legacy) {
    for (Stream* b : blocking_streams(s, st->device))
      if (b->capture == cudaStreamCaptureStatusActive) {
        b->capture = cudaStreamCaptureStatusInvalidated;  // implicit dependency on a capturing stream
        s.count("capture_invalidations");
        return fail(cudaErrorStreamCaptureImplicit);
      }
  }
  const std::int64_t t = ready_time(s, *st);
  advance(s, *st, t);
  ev->recorded = true;
  ev->ts_ns = t;
  s.count("event_records");
  if (st->legacy) s.count("event_records_legacy_stream");
  return cudaSuccess;
}
SIM_EXPORT cudaError_t cudaEventQuery(cudaEvent_t event) {
  SIM_API(cudaEventQuery_v3020);
  Sim& s = sim();
  std::lock_guard<std::mutex> lock(s.mu);
  if (cudaError_t e = need_context(s); e != cudaSuccess) return fail(e);
  if (cudaError_t e = check_unsafe(s); e != cudaSuccess) return fail(e);
  Event* ev = live_event(s, event);
  if (ev == nullptr) return fail(cudaErrorInvalidResourceHandle);
  s.count("event_queries");
  if (!ev->recorded) return cudaSuccess;
  return now_ns() >= ev->ts_ns ? cudaSuccess : cudaErrorNotReady;
}
SIM_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  SIM_API(cudaEventSynchronize_v3020);
  Sim& s = sim();
  std::unique_lock<std::mutex> lock(s.mu);
  if (cudaError_t e = need_context(s); e != cudaSuccess) return fail(e);
  Event* ev = live_event(s, event);
  if (ev == nullptr) return fail(cudaErrorInvalidResourceHandle);
  host_wait(lock, s, ev->recorded ? ev->ts_ns : 0, CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE,
            api_call_.correlation(), 0);
  return cudaSuccess;
}
SIM_EXPORT cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  SIM_API(cudaEventElapsedTime_v3020);
  Sim& s = sim();
  std::lock_guard<std::mutex> lock(s.mu);
  if (cudaError_t e = need_context(s); e != cudaSuccess) return fail(e);
  Event* a = live_event(s, start);
  Event* b = live_event(s, end);
  if (a == nullptr || b == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (!a->recorded || !b->recorded) return fail(cudaErrorInvalidResourceHandle);
  if ((a->flags | b->flags) & cudaEventDisableTiming) return fail(cudaErrorInvalidResourceHandle);
  const std::int64_t now = now_ns();
  if (now < a->ts_ns || now < b->ts_ns) return cudaErrorNotReady;
  *ms = static_cast<float>(static_cast<double>(b->ts_ns - a->ts_ns) * 1e-6);
  return cudaSuccess;
}
SIM_EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  SIM_API(cudaStreamWaitEvent_v3020);
  Sim& s = sim();
  std::lock_guard<std::mutex> lock(s.mu);
  if (cudaError_t e = need_context(s); e != cudaSuccess) return fail(e);
  Event* ev = live_event(s, event);
  Stream* st = resolve_stream(s, stream, false);
  if (ev == nullptr || st == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (ev->recorded) st->tail_ns = std::max(st->tail_ns, ev->ts_ns);
  return cudaSuccess;
}

// Device
SIM_EXPORT cudaError_t cudaDeviceSynchronize() {
  SIM_API(cudaDeviceSynchronize_v3020);
  Sim& s = sim();
  std::unique_lock<std::mutex> lock(s.mu);
  if (cudaError_t e = need_context(s); e != cudaSuccess) return fail(e);
  if (cudaError_t e = check_unsafe(s); e != cudaSuccess) return fail(e);
  std::int64_t until = s.devices[t_device].legacy.tail_ns;
  for (const void* p : s.live_streams) {
    const auto* st = static_cast<const Stream*>(p);
    if (st->device == t_device) until = std::max(until, st->tail_ns);
  }
  host_wait(lock, s, until, CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE, api_call_.correlation(), 0);
  return cudaSuccess;
}
SIM_EXPORT cudaError_t cudaDeviceReset() {
  SIM_API(cudaDeviceReset_v3020);
  Sim& s = sim();
  CUpti_CallbackFunc fn = nullptr;
  void* user = nullptr;
  std::uint32_t context = 0;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    Device& d = s.devices[t_device];
    if (!d.context_active) return cudaSuccess;
    if (s.subscribed &&
        s.enabled_callbacks.count({CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING})) {
      fn = s.callback;
      user = s.callback_userdata;
    }
    context = d.context_id;
  }
  if (fn != nullptr) {
    CUpti_ResourceData data{};
    data.context = reinterpret_cast<CUcontext>(static_cast<std::uintptr_t>(context));
    fn(user, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING, &data);
  }
  std::lock_guard<std::mutex> lock(s.mu);
  Device& d = s.devices[t_device];
  // Every event and stream of the context is gone: a later use is counted
  // (invalid_handle_uses), which on a GPU is undefined behaviour.
  for (auto it = s.live_events.begin(); it != s.live_events.end();)
    it = static_cast<const Event*>(*it)->device == t_device ? s.live_events.erase(it) : std::next(it);
  for (auto it = s.live_streams.begin(); it != s.live_streams.end();)
    it = static_cast<const Stream*>(*it)->device == t_device ? s.live_streams.erase(it) : std::next(it);
  t_per_thread[t_device] = nullptr;
  d.context_active = false;
  d.bytes_in_use = 0;
  d.legacy.tail_ns = 0;
  s.count("device_resets");
  return cudaSuccess;
}

// Memory
SIM_EXPORT cudaError_t cudaMalloc(void** p, std::size_t bytes) {
  SIM_API(cudaMalloc_v3020);
  Sim& s = sim();
  std::lock_guard<std::mutex> lock(s.mu);
  if (cudaError_t e = need_context(s); e != cudaSuccess) return fail(e);
  if (cudaError_t e = check_unsafe(s); e != cudaSuccess) return fail(e);
  *p = std::malloc(std::max<std::size_t>(bytes, 1));  // host memory stands in for device memory
  s.devices[t_device].bytes_in_use += static_cast<std::int64_t>(bytes);
  return *p != nullptr ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}
SIM_EXPORT cudaError_t cudaFree(void* p) {
  SIM_API(cudaFree_v3020);
  Sim& s = sim();
  std::lock_guard<std::mutex> lock(s.mu);
  if (cudaError_t e = need_context(s); e != cudaSuccess) return fail(e);  // cudaFree(0): the classic context init
  std::free(p);
  return cudaSuccess;
}
SIM_EXPORT cudaError_t cudaMallocHost(void** p, std::size_t bytes) {
  SIM_API(cudaMallocHost_v3020);
  Sim& s = sim();
  std::lock_guard<std::mutex> lock(s.mu);
  if (cudaError_t e = need_context(s); e != cudaSuccess) return fail(e);
  *p = std::malloc(std::max<std::size_t>(bytes, 1));
  if (*p == nullptr) return fail(cudaErrorMemoryAllocation);
  const auto a = reinterpret_cast<std::uintptr_t>(*p);
  s.pinned.insert({a, a + bytes});
  return cudaSuccess;
}
SIM_EXPORT cudaError_t cudaFreeHost(void* p) {
  SIM_API(cudaFreeHost_v3020);
  Sim& s = sim();
  std::lock_guard<std::mutex> lock(s.mu);
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  for (auto it = s.pinned.begin(); it != s.pinned.end(); ++it)
    if (it->first == a) {
      s.pinned.erase(it);
      break;
    }
  std::free(p);
  return cudaSuccess;
}
SIM_EXPORT cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                                       cudaStream_t stream) {
  SIM_API(cudaMemcpyAsync_v3020);
  Sim& s = sim();
  std::lock_guard<std::mutex> lock(s.mu);
  Stream* st = nullptr;
  if (cudaError_t e = context_stream(s, stream, st); e != cudaSuccess) return fail(e);
  return fail(enqueue(s, *st, copy_op(s, dst, src, bytes, kind), api_call_.correlation()));
}
SIM_EXPORT cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  SIM_API(cudaMemcpy_v3020);
  Sim& s = sim();
  std::unique_lock<std::mutex> lock(s.mu);
  if (cudaError_t e = need_context(s); e != cudaSuccess) return fail(e);
  Stream& st = s.devices[t_device].legacy;
  if (cudaError_t e = enqueue(s, st, copy_op(s, dst, src, bytes, kind), api_call_.correlation()); e != cudaSuccess)
    return fail(e);
  // Synchronous with respect to the host: returns when the copy is done.
  s.count("implicit_sync_calls");
  const std::int64_t until = st.tail_ns;
  lock.unlock();
  sleep_until(until);
  return cudaSuccess;
}
// Peer copies: run on the stream's device (the current device's legacy
// stream for cudaMemcpyPeer) at peer bandwidth (100 GB/s, an NVLink-class
// figure); CUPTI reports them as MEMCPY2 records with both device ids.
namespace {
cudaError_t peer_copy(Sim& s, Stream& st, int dst_device, int src_device, std::size_t bytes,
                      std::uint32_t correlation) {
  if (dst_device < 0 || dst_device >= s.device_count || src_device < 0 || src_device >= s.device_count)
    return cudaErrorInvalidDevice;
  Op op;
  op.kind = Op::memcpy;
  op.bytes = bytes;
  op.copy_kind = CUPTI_ACTIVITY_MEMCPY_KIND_PTOP;
  op.src_kind = op.dst_kind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  op.src_device = src_device;
  op.dst_device = dst_device;
  op.duration_ns = static_cast<std::int64_t>(static_cast<double>(bytes) / s.peer_gbps);
  if (s.next_ns >= 0) {
    op.duration_ns = s.next_ns;
    s.next_ns = -1;
  }
  return enqueue(s, st, op, correlation);
}
}  // namespace
SIM_EXPORT cudaError_t cudaMemcpyPeerAsync(void*, int dst_device, const void*, int src_device, std::size_t bytes,
                                           cudaStream_t stream) {
  SIM_API(cudaMemcpyPeerAsync_v4000);
  Sim& s = sim();
  std::lock_guard<std::mutex> lock(s.mu);
  Stream* st = nullptr;
  if (cudaError_t e = context_stream(s, stream, st); e != cudaSuccess) return fail(e);
  return fail(peer_copy(s, *st, dst_device, src_device, bytes, api_call_.correlation()));
}
SIM_EXPORT cudaError_t cudaMemcpyPeer(void*, int dst_device, const void*, int src_device, std::size_t bytes) {
  SIM_API(cudaMemcpyPeer_v4000);
  Sim& s = sim();
  std::unique_lock<std::mutex> lock(s.mu);
  if (cudaError_t e = need_context(s); e != cudaSuccess) return fail(e);
  Stream& st = s.devices[t_device].legacy;
  if (cudaError_t e = peer_copy(s, st, dst_device, src_device, bytes, api_call_.correlation()); e != cudaSuccess)
    return fail(e);
  s.count("implicit_sync_calls");  // synchronous with respect to the host
  const std::int64_t until = st.tail_ns;
  lock.unlock();
  sleep_until(until);
  return cudaSuccess;
}
SIM_EXPORT cudaError_t cudaMemsetAsync(void*, int, std::size_t bytes, cudaStream_t stream) {
  SIM_API(cudaMemsetAsync_v3020);
  Sim& s = sim();
  std::lock_guard<std::mutex> lock(s.mu);
  Stream* st = nullptr;
  if (cudaError_t e = context_stream(s, stream, st); e != cudaSuccess) return fail(e);
  Op op;
  op.kind = Op::memset;
  op.bytes = bytes;
  op.duration_ns = static_cast<std::int64_t>(static_cast<double>(bytes) / s.device_gbps);
  if (s.next_ns >= 0) {
    op.duration_ns = s.next_ns;
    s.next_ns = -1;
  }
  return fail(enqueue(s, *st, op, api_call_.correlation()));
}
SIM_EXPORT cudaError_t cudaMemset(void* p, int v, std::size_t bytes) {
  return cudaMemsetAsync(p, v, bytes, nullptr);
}

// Kernels: cudaLaunchKernel, and what nvcc 13 emits for <<<>>>.
SIM_EXPORT cudaError_t cudaLaunchKernel(const void* func, dim3, dim3, void** args, std::size_t, cudaStream_t stream) {
  SIM_API(cudaLaunchKernel_v7000);
  return launch(api_call_.correlation(), func, args, stream, false);
}
SIM_EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3, dim3, void** args, std::size_t,
                                          cudaStream_t stream) {
  SIM_API(__cudaLaunchKernel_v13000);
  return launch(api_call_.correlation(), kernel, args, stream, false);
}
SIM_EXPORT cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3, dim3, void** args, std::size_t,
                                               cudaStream_t stream) {
  SIM_API(__cudaLaunchKernel_ptsz_v13000);
  return launch(api_call_.correlation(), kernel, args, stream, true);
}
SIM_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* func) {
  *kernel = reinterpret_cast<cudaKernel_t>(const_cast<void*>(func));  // the host stub is the handle
  return cudaSuccess;
}
namespace {
struct LaunchConfig {
  dim3 grid, block;
  std::size_t shared = 0;
  void* stream = nullptr;
};
thread_local std::vector<LaunchConfig> t_launch_configs;
}  // namespace
SIM_EXPORT unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, std::size_t shared, void* stream) {
  t_launch_configs.push_back(LaunchConfig{grid, block, shared, stream});
  return 0;
}
SIM_EXPORT cudaError_t __cudaPopCallConfiguration(dim3* grid, dim3* block, std::size_t* shared, void* stream) {
  if (t_launch_configs.empty()) return cudaErrorInvalidConfiguration;
  const LaunchConfig c = t_launch_configs.back();
  t_launch_configs.pop_back();
  *grid = c.grid;
  *block = c.block;
  *shared = c.shared;
  *static_cast<void**>(stream) = c.stream;
  return cudaSuccess;
}
SIM_EXPORT void** __cudaRegisterFatBinary(void* fatbin) {
  static void* handles[64];
  static std::atomic<int> next{0};
  void** h = &handles[next.fetch_add(1) % 64];
  *h = fatbin;
  return h;
}
SIM_EXPORT void __cudaRegisterFatBinaryEnd(void**) {}
SIM_EXPORT void __cudaUnregisterFatBinary(void**) {}
SIM_EXPORT void __cudaRegisterFunction(void**, const char* host_fun, char*, const char* device_name, int, uint3*,
                                       uint3*, dim3*, dim3*, int*) {
  std::lock_guard<std::mutex> lock(sim().mu);
  sim().kernel_names[host_fun] = device_name;  // mangled device symbol, e.g. _Z11spin_kernely
}
SIM_EXPORT void __cudaRegisterVar(void**, char*, char*, const char*, int, std::size_t, int, int) {}

// ---- CUPTI ----------------------------------------------------------------------------

SIM_EXPORT CUptiResult cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback, void* userdata) {
  Sim& s = sim();
  std::lock_guard<std::mutex> lock(s.mu);
  s.count("cupti_subscribe_calls");
  if (s.subscribed) return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  s.subscribed = true;
  s.callback = callback;
  s.callback_userdata = userdata;
  *subscriber = reinterpret_cast<CUpti_SubscriberHandle>(&s);
  return CUPTI_SUCCESS;
}
SIM_EXPORT CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle subscriber) {
  Sim& s = sim();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.subscribed || subscriber != reinterpret_cast<CUpti_SubscriberHandle>(&s)) return CUPTI_ERROR_INVALID_PARAMETER;
  s.subscribed = false;
  s.callback = nullptr;
  s.enabled_callbacks.clear();
  s.enabled_domains.clear();
  s.count("cupti_unsubscribe_calls");
  return CUPTI_SUCCESS;
}
SIM_EXPORT CUptiResult cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle, CUpti_CallbackDomain domain,
                                           CUpti_CallbackId cbid) {
  std::lock_guard<std::mutex> lock(sim().mu);
  if (enable)
    sim().enabled_callbacks.insert({domain, cbid});
  else
    sim().enabled_callbacks.erase({domain, cbid});
  return CUPTI_SUCCESS;
}
SIM_EXPORT CUptiResult cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle, CUpti_CallbackDomain domain) {
  std::lock_guard<std::mutex> lock(sim().mu);
  if (enable)
    sim().enabled_domains.insert(domain);
  else
    sim().enabled_domains.erase(domain);
  return CUPTI_SUCCESS;
}
SIM_EXPORT CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
  std::lock_guard<std::mutex> lock(sim().mu);
  if (record_size(kind) == 0) return CUPTI_ERROR_NOT_COMPATIBLE;
  sim().enabled_kinds.insert(kind);
  return CUPTI_SUCCESS;
}
SIM_EXPORT CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind) {
  std::lock_guard<std::mutex> lock(sim().mu);
  sim().enabled_kinds.erase(kind);
  return CUPTI_SUCCESS;
}
SIM_EXPORT CUptiResult cuptiActivityEnableRuntimeApi(CUpti_CallbackId cbid, uint8_t enable) {
  std::lock_guard<std::mutex> lock(sim().mu);
  if (!sim().enabled_kinds.count(CUPTI_ACTIVITY_KIND_RUNTIME))
    return CUPTI_ERROR_INVALID_OPERATION;  // act: enable RUNTIME first
  if (enable)
    sim().runtime_records_off.erase(cbid);
  else
    sim().runtime_records_off.insert(cbid);
  return CUPTI_SUCCESS;
}
SIM_EXPORT CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                                      CUpti_BuffersCallbackCompleteFunc complete) {
  if (request == nullptr || complete == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  std::lock_guard<std::mutex> lock(sim().mu);
  sim().buffer_request = request;
  sim().buffer_complete = complete;
  return CUPTI_SUCCESS;
}
SIM_EXPORT CUptiResult cuptiActivitySetAttribute(CUpti_ActivityAttribute attr, size_t* size, void* value) {
  if (size == nullptr || value == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  std::lock_guard<std::mutex> lock(sim().mu);
  switch (attr) {
    case CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER:
      if (*size != sizeof(std::uint8_t)) return CUPTI_ERROR_INVALID_PARAMETER;
      sim().zeroed_out_attr = *static_cast<std::uint8_t*>(value);
      return CUPTI_SUCCESS;
    case CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER:
      if (*size != sizeof(std::uint8_t)) return CUPTI_ERROR_INVALID_PARAMETER;
      // act: before the buffer callbacks are registered and any kind enabled.
      if (sim().buffer_request != nullptr || !sim().enabled_kinds.empty()) return CUPTI_ERROR_INVALID_OPERATION;
      sim().per_thread_attr = *static_cast<std::uint8_t*>(value);
      return CUPTI_SUCCESS;
    default:
      return CUPTI_ERROR_NOT_COMPATIBLE;
  }
}
SIM_EXPORT CUptiResult cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc fn) {
  std::lock_guard<std::mutex> lock(sim().mu);
  if (!sim().enabled_kinds.empty()) return CUPTI_ERROR_INVALID_OPERATION;  // act: before any kind is enabled
  sim().timestamp_callback = fn;
  return CUPTI_SUCCESS;
}
SIM_EXPORT CUptiResult cuptiGetTimestamp(uint64_t* timestamp) {
  *timestamp = static_cast<std::uint64_t>(sim().cupti_time(now_ns()));
  return CUPTI_SUCCESS;
}
SIM_EXPORT CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext, uint32_t, size_t* dropped) {
  if (dropped == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  std::lock_guard<std::mutex> lock(sim().mu);
  *dropped = sim().dropped;
  sim().dropped = 0;  // "reset to zero when this function returns"
  return CUPTI_SUCCESS;
}
SIM_EXPORT CUptiResult cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t id) {
  t_external_ids.emplace_back(static_cast<std::uint32_t>(kind), id);
  return CUPTI_SUCCESS;
}
SIM_EXPORT CUptiResult cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind, uint64_t* id) {
  if (t_external_ids.empty()) return CUPTI_ERROR_QUEUE_EMPTY;
  if (id != nullptr) *id = t_external_ids.back().second;
  t_external_ids.pop_back();
  return CUPTI_SUCCESS;
}
SIM_EXPORT CUptiResult cuptiGetCallbackName(CUpti_CallbackDomain domain, uint32_t cbid, const char** name) {
  if (domain != CUPTI_CB_DOMAIN_RUNTIME_API || name == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  for (const CallName& c : kCallNames)
    if (c.cbid == cbid) {
      *name = c.name;
      return CUPTI_SUCCESS;
    }
  return CUPTI_ERROR_INVALID_PARAMETER;
}
SIM_EXPORT CUptiResult cuptiGetResultString(CUptiResult result, const char** str) {
  *str = result == CUPTI_SUCCESS                                    ? "CUPTI_SUCCESS"
         : result == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED ? "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"
                                                                    : "CUPTI_ERROR (simulated)";
  return CUPTI_SUCCESS;
}
SIM_EXPORT CUptiResult cuptiActivityGetNextRecord(uint8_t* buffer, size_t valid, CUpti_Activity** record) {
  std::size_t offset = 0;
  if (*record != nullptr) {
    offset = static_cast<std::size_t>(reinterpret_cast<std::uint8_t*>(*record) - buffer);
    offset += aligned(record_size((*record)->kind));
  }
  if (offset + sizeof(CUpti_Activity) > valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  auto* next = reinterpret_cast<CUpti_Activity*>(buffer + offset);
  if (offset + record_size(next->kind) > valid || record_size(next->kind) == 0) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  *record = next;
  return CUPTI_SUCCESS;
}
// Hands the queued records to the client. Without CUPTI_ACTIVITY_FLAG_FLUSH_FORCED
// only device records whose work has ended are delivered (CUPTI keeps the
// rest); forced, everything, with end = 0 for work still running.
SIM_EXPORT CUptiResult cuptiActivityFlushAll(uint32_t flag) {
  Sim& s = sim();
  const bool forced = (flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) != 0;
  std::vector<std::pair<Record, bool>> out;  // record, incomplete
  std::vector<std::pair<std::uint8_t*, std::size_t>> thread_buffers;
  CUpti_BuffersCallbackRequestFunc request = nullptr;
  CUpti_BuffersCallbackCompleteFunc complete = nullptr;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    request = s.buffer_request;
    complete = s.buffer_complete;
    if (request == nullptr || complete == nullptr) return CUPTI_SUCCESS;
    const std::int64_t now = now_ns();
    std::deque<Record> kept;
    for (const Record& r : s.queue) {
      const bool running = is_device_record(r.kind) && r.end > now;
      if (running && !forced)
        kept.push_back(r);
      else
        out.emplace_back(r, running);
    }
    s.queue.swap(kept);
    s.count("cupti_flushes");
    // Buffers the threads requested are filled first; a flush hands them all back.
    thread_buffers.swap(s.thread_buffers);
  }
  std::size_t i = 0;
  while (i < out.size()) {
    std::uint8_t* buffer = nullptr;
    std::size_t size = 0, max_records = 0;
    if (!thread_buffers.empty()) {
      buffer = thread_buffers.back().first;
      size = thread_buffers.back().second;
      thread_buffers.pop_back();
    } else {
      request(&buffer, &size, &max_records);
    }
    if (buffer == nullptr || size < 512) {
      // No buffer: the records that would have gone into it are dropped.
      std::lock_guard<std::mutex> lock(s.mu);
      s.dropped += out.size() - i;
      s.count("cupti_records_dropped", out.size() - i);
      if (buffer != nullptr) complete(nullptr, 0, buffer, size, 0);
      break;
    }
    std::size_t used = 0, n = 0;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      while (i < out.size()) {
        const std::size_t need = aligned(record_size(out[i].first.kind));
        if (used + need > size || (max_records != 0 && n >= max_records)) break;
        // With ZEROED_OUT_ACTIVITY_BUFFER the client promised zeros where
        // records go (checked here, on the flushing thread, not in the call).
        if (s.zeroed_out_attr)
          for (std::size_t b = used; b < used + need; ++b)
            if (buffer[b] != 0) {
              s.count("cupti_buffers_not_zeroed_by_client");
              break;
            }
        write_record(s, out[i].first, buffer + used, out[i].second);
        used += need;
        ++n;
        ++i;
      }
      s.count("cupti_records_delivered", n);
    }
    complete(nullptr, 0, buffer, size, used);
  }
  for (const auto& b : thread_buffers) complete(nullptr, 0, b.first, b.second, 0);  // unused: back, empty
  return CUPTI_SUCCESS;
}

// ---- NVTX (injection: NVTX_INJECTION64_PATH names this library) -----------------

namespace {
thread_local int t_nvtx_depth = 0;
int NVTX_API sim_nvtx_push(nvtxDomainHandle_t, const nvtxEventAttributes_t* attributes) {
  std::lock_guard<std::mutex> lock(sim().mu);
  sim().count("nvtx_pushes");
  if (attributes == nullptr || attributes->version != NVTX_VERSION) sim().count("nvtx_bad_attributes");
  return t_nvtx_depth++;
}
int NVTX_API sim_nvtx_pop(nvtxDomainHandle_t) {
  std::lock_guard<std::mutex> lock(sim().mu);
  sim().count("nvtx_pops");
  if (t_nvtx_depth == 0) {
    sim().count("nvtx_unbalanced_pops");
    return -1;
  }
  return --t_nvtx_depth;
}
nvtxDomainHandle_t NVTX_API sim_nvtx_domain_create(const char*) {
  static int domain;
  return reinterpret_cast<nvtxDomainHandle_t>(&domain);
}
}  // namespace

SIM_EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
  const auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (callbacks == nullptr) return 0;
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size) || table == nullptr) return 0;
  if (size > NVTX_CBID_CORE2_DomainRangePushEx)
    *table[NVTX_CBID_CORE2_DomainRangePushEx] = reinterpret_cast<NvtxFunctionPointer>(&sim_nvtx_push);
  if (size > NVTX_CBID_CORE2_DomainRangePop)
    *table[NVTX_CBID_CORE2_DomainRangePop] = reinterpret_cast<NvtxFunctionPointer>(&sim_nvtx_pop);
  if (size > NVTX_CBID_CORE2_DomainCreateA)
    *table[NVTX_CBID_CORE2_DomainCreateA] = reinterpret_cast<NvtxFunctionPointer>(&sim_nvtx_domain_create);
  return 1;
}

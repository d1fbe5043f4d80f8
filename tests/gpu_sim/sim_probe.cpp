// The instrumented programs tests/gpu_sim/gpu_sim_test.cpp runs on the
// simulated device, one mode per process (the report is written at exit).
// Kernels are host functions named through the simulator's side API and
// launched with cudaLaunchKernel; their device time is programmed.
//   sim_probe MODE [STEPS]    (modes: see main)
// Prints key=value lines the tests read (sync calls seen inside the steps,
// what a second CUPTI client got, ...).
#include <stepscope/cuda.hpp>
#include <stepscope/stepscope.hpp>

#include "gpu_sim/simcuda.h"

#include <cuda_runtime_api.h>
#include <cupti.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

void forward_kernel() {}
void tiny_kernel() {}
void long_kernel() {}
void slow_kernel() {}

constexpr std::int64_t kMs = 1'000'000;

void name_kernels() {
  simcuda::register_kernel(reinterpret_cast<const void*>(&forward_kernel), "forward_kernel");
  simcuda::register_kernel(reinterpret_cast<const void*>(&tiny_kernel), "tiny_kernel");
  simcuda::register_kernel(reinterpret_cast<const void*>(&long_kernel), "long_kernel");
  simcuda::register_kernel(reinterpret_cast<const void*>(&slow_kernel), "slow_kernel");
}

void launch(void (*fn)(), cudaStream_t stream) {
  (void)cudaLaunchKernel(reinterpret_cast<const void*>(fn), dim3(1), dim3(1), nullptr, 0, stream);
}

void busy_wait_us(int us) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  while (std::chrono::steady_clock::now() < until) {
  }
}

cudaStream_t non_blocking_stream() {
  cudaStream_t s = nullptr;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) std::exit(2);
  return s;
}

// The tutorial's step: forward launches 5 ms of device work and returns.
// A host timer around it measures the launch; the phase's events measure the work.
int async_forward(int steps, bool bind) {
  simcuda::set_kernel_ns("forward", 5 * kMs);
  cudaStream_t stream = non_blocking_stream();
  if (bind) stepscope::set_stream(stream);
  const std::uint64_t syncs_before = simcuda::counter("sync_calls");
  double host_ms = 0;
  for (int i = 0; i < steps; ++i) {
    STEPSCOPE_STEP();
    STEPSCOPE_PHASE_KIND("forward", stepscope::PhaseKind::compute);
    const auto t0 = std::chrono::steady_clock::now();
    launch(forward_kernel, stream);
    host_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  std::printf("sync_calls_during_steps=%llu\n",
              static_cast<unsigned long long>(simcuda::counter("sync_calls") - syncs_before));
  std::printf("host_timer_forward_ms=%.4f\n", host_ms / steps);
  (void)cudaStreamSynchronize(stream);  // outside the steps
  return 0;
}

// A worker forked after the parent used the device (a DataLoader worker
// under STEPSCOPE_CHILDREN=1): it records its own phases, host-timed.
int fork_child(int steps) {
  if (const int rc = async_forward(steps, true); rc != 0) return rc;
  const pid_t pid = ::fork();
  if (pid < 0) return 2;
  if (pid == 0) {
    for (int i = 0; i < 20; ++i) {
      STEPSCOPE_PHASE_KIND("decode", stepscope::PhaseKind::input);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::exit(0);
  }
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return 3;
  std::printf("child=%d\n", static_cast<int>(pid));
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 4;
}

// A phase on a user stream inside an otherwise unbound thread.
int user_stream(int steps) {
  simcuda::set_kernel_ns("forward", 3 * kMs);
  cudaStream_t copy = non_blocking_stream();
  for (int i = 0; i < steps; ++i) {
    STEPSCOPE_STEP();
    STEPSCOPE_PHASE_STREAM("h2d", copy);
    launch(forward_kernel, copy);
  }
  (void)cudaStreamSynchronize(copy);
  return 0;
}

int capture(int steps) {
  simcuda::set_kernel_ns("forward", 1 * kMs);
  cudaStream_t stream = non_blocking_stream();
  stepscope::set_stream(stream);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  {
    STEPSCOPE_STEP();
    if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) != cudaSuccess) return 3;
    for (int k = 0; k < 4; ++k) {
      STEPSCOPE_PHASE("captured");
      launch(forward_kernel, stream);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // collector ticks during the capture
    }
    if (cudaStreamEndCapture(stream, &graph) != cudaSuccess) {
      std::printf("capture=invalidated\n");
      return 4;
    }
    if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) return 5;
  }
  for (int i = 0; i < steps; ++i) {
    STEPSCOPE_STEP();
    STEPSCOPE_PHASE_KIND("graph", stepscope::PhaseKind::compute);
    if (cudaGraphLaunch(exec, stream) != cudaSuccess) return 6;
  }
  (void)cudaStreamSynchronize(stream);
  std::printf("capture=ok\n");
  return 0;
}

// The host far ahead of a slow device: more phases in flight than the
// thread's event slots (256).
int pressure(int steps) {
  simcuda::set_kernel_ns("forward", 1 * kMs);
  cudaStream_t stream = non_blocking_stream();
  stepscope::set_stream(stream);
  for (int i = 0; i < steps; ++i) {
    STEPSCOPE_STEP();
    for (int k = 0; k < 40; ++k) {
      STEPSCOPE_PHASE("layer");
      launch(forward_kernel, stream);
    }
  }
  (void)cudaStreamSynchronize(stream);
  return 0;
}

// Three device programs for the CUPTI verdicts.
int scheduling(int steps) {  // tiny kernels, the host busy between launches
  simcuda::set_kernel_ns("tiny", 5'000);
  cudaStream_t stream = non_blocking_stream();
  stepscope::set_stream(stream);
  for (int i = 0; i < steps; ++i) {
    STEPSCOPE_STEP();
    STEPSCOPE_PHASE_KIND("forward", stepscope::PhaseKind::compute);
    for (int k = 0; k < 40; ++k) {
      launch(tiny_kernel, stream);
      busy_wait_us(100);  // Python-side op overhead
    }
  }
  (void)cudaStreamSynchronize(stream);
  return 0;
}
int launch_bound(int steps) {  // 20 tiny launches per step in two phases, 20 us of host work each
  simcuda::set_kernel_ns("tiny", 2'000);
  (void)cudaFree(nullptr);  // CUDA in use before the first scope, as in a real program: device timing from step 1
  const auto launches = [] {
    for (int k = 0; k < 10; ++k) {
      launch(tiny_kernel, nullptr);
      busy_wait_us(20);
    }
  };
  for (int i = 0; i < steps; ++i) {
    STEPSCOPE_STEP();
    {
      STEPSCOPE_PHASE("forward");
      launches();
    }
    STEPSCOPE_PHASE("backward");
    launches();
  }
  (void)cudaDeviceSynchronize();
  return 0;
}
int compute(int steps) {  // long kernels, one sync per step (loss.item())
  simcuda::set_kernel_ns("long", 15 * kMs);
  cudaStream_t stream = non_blocking_stream();
  stepscope::set_stream(stream);
  for (int i = 0; i < steps; ++i) {
    STEPSCOPE_STEP();
    {
      STEPSCOPE_PHASE_KIND("forward", stepscope::PhaseKind::compute);
      for (int k = 0; k < 3; ++k) launch(long_kernel, stream);
    }
    STEPSCOPE_PHASE_KIND("loss_item", stepscope::PhaseKind::compute);
    (void)cudaStreamSynchronize(stream);
  }
  return 0;
}
int memory(int steps) {  // pageable host-to-device copies dominate
  simcuda::set_kernel_ns("tiny", 100'000);
  cudaStream_t stream = non_blocking_stream();
  stepscope::set_stream(stream);
  constexpr std::size_t kBytes = 32u << 20;  // 8 ms at the simulated 4 GB/s pageable bandwidth
  std::vector<char> host(kBytes);
  void* device = nullptr;
  if (cudaMalloc(&device, kBytes) != cudaSuccess) return 2;
  for (int i = 0; i < steps; ++i) {
    STEPSCOPE_STEP();
    {
      STEPSCOPE_PHASE_KIND("h2d", stepscope::PhaseKind::memory);
      (void)cudaMemcpyAsync(device, host.data(), kBytes, cudaMemcpyHostToDevice, stream);
    }
    STEPSCOPE_PHASE_KIND("forward", stepscope::PhaseKind::compute);
    launch(tiny_kernel, stream);
    (void)cudaStreamSynchronize(stream);
  }
  return 0;
}
// Input-bound: the device idles while the step waits for its batch.
int input(int steps) {
  simcuda::set_kernel_ns("forward", 1 * kMs);
  cudaStream_t stream = non_blocking_stream();
  stepscope::set_stream(stream);
  for (int i = 0; i < steps; ++i) {
    STEPSCOPE_STEP();
    {
      STEPSCOPE_PHASE_KIND("next_batch", stepscope::PhaseKind::input);
      std::this_thread::sleep_for(std::chrono::milliseconds(8));
    }
    STEPSCOPE_PHASE_KIND("forward", stepscope::PhaseKind::compute);
    launch(forward_kernel, stream);
    (void)cudaStreamSynchronize(stream);
  }
  return 0;
}

// The H200's libtorch conv net as users write it (issue 27): no stream
// binding, kernels on the legacy stream, nothing waits in the loop, so the
// device runs behind the host; with STEPSCOPE_SIM_LAUNCH_QUEUE the host blocks
// wherever the queue fills (the optimizer's many small launches queue behind
// the backward's long kernels). With `item`, each step ends reading the loss
// back (loss.item(): a synchronous 4-byte copy that waits for the step's work).
// Device truth per step: 4 x 7.5 + 4 x 13.5 + 40 x 0.02 = 84.8 ms (the
// H200's 8.48 ms ten times over, so that a host starved of CPU on a busy
// 2-core machine still runs ahead); the optimizer's 0.8 ms of it is 0.9%.
// With `slow_every` > 0, every slow_every-th step's backward kernels run 3x
// longer (4 x 40.5 ms: a 192.8 ms step).
int behind(int steps, bool item, int slow_every = 0) {
  simcuda::set_kernel_ns("forward", 7'500'000);
  simcuda::set_kernel_ns("long", 13'500'000);
  simcuda::set_kernel_ns("slow", 40'500'000);
  simcuda::set_kernel_ns("tiny", 20'000);
  void* loss_device = nullptr;
  if (cudaMalloc(&loss_device, sizeof(float)) != cudaSuccess) return 2;
  float loss = 0;
  for (int i = 0; i < steps; ++i) {
    STEPSCOPE_STEP();
    {
      STEPSCOPE_PHASE_KIND("data", stepscope::PhaseKind::input);
      busy_wait_us(20);
    }
    {
      STEPSCOPE_PHASE_KIND("forward", stepscope::PhaseKind::compute);
      for (int k = 0; k < 4; ++k) launch(forward_kernel, nullptr);
    }
    {
      STEPSCOPE_PHASE_KIND("backward", stepscope::PhaseKind::compute);
      const bool slow = slow_every > 0 && (i + 1) % slow_every == 0;
      for (int k = 0; k < 4; ++k) launch(slow ? slow_kernel : long_kernel, nullptr);
    }
    {
      STEPSCOPE_PHASE_KIND("optimizer", stepscope::PhaseKind::compute);
      for (int k = 0; k < 40; ++k) launch(tiny_kernel, nullptr);
    }
    if (item) {
      STEPSCOPE_PHASE_KIND("loss_item", stepscope::PhaseKind::other);
      (void)cudaMemcpy(&loss, loss_device, sizeof(float), cudaMemcpyDeviceToHost);
    }
  }
  (void)cudaDeviceSynchronize();
  std::printf("loss=%g\n", static_cast<double>(loss));
  return 0;
}

// The device goes away in the middle of step `steps / 2`, inside a phase.
int lost(int steps) {
  simcuda::set_kernel_ns("forward", 1 * kMs);
  cudaStream_t stream = non_blocking_stream();
  stepscope::set_stream(stream);
  for (int i = 0; i < steps; ++i) {
    STEPSCOPE_STEP();
    STEPSCOPE_PHASE_KIND("forward", stepscope::PhaseKind::compute);
    launch(forward_kernel, stream);
    if (i == steps / 2) simcuda::lose_device();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return 0;
}

// No CUDA call at all (a CPU-only program linked with CUDA-enabled stepscope).
int cpu_only(int steps) {
  for (int i = 0; i < steps; ++i) {
    STEPSCOPE_STEP();
    STEPSCOPE_PHASE("work");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return 0;
}

// One rank of a one-process-per-GPU job: only device 1 is used; a loader
// thread binds a device-1 stream without calling cudaSetDevice itself.
int rank_on_device1(int steps) {
  simcuda::set_kernel_ns("forward", 1 * kMs);
  if (cudaSetDevice(1) != cudaSuccess) return 2;
  cudaStream_t stream = non_blocking_stream();
  cudaStream_t copy = non_blocking_stream();
  stepscope::set_stream(stream);
  std::thread loader([copy, steps] {
    stepscope::set_stream(copy);
    for (int i = 0; i < steps; ++i) {
      STEPSCOPE_STEP();
      STEPSCOPE_PHASE_KIND("prefetch", stepscope::PhaseKind::memory);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  for (int i = 0; i < steps; ++i) {
    STEPSCOPE_STEP();
    STEPSCOPE_PHASE_KIND("forward", stepscope::PhaseKind::compute);
    launch(forward_kernel, stream);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  loader.join();
  (void)stepscope::snapshot();  // a user thread polling the device (review S5)
  (void)cudaStreamSynchronize(stream);
  return 0;
}

// One process, two GPUs: the steps run on device 1 (busy ~20%), another
// thread keeps device 0 busy with work stepscope does not time (C14).
int two_gpus(int steps) {
  simcuda::set_kernel_ns("forward", 1 * kMs);
  simcuda::set_kernel_ns("long", 10 * kMs);
  std::atomic<bool> stop{false};
  std::thread other([&stop] {
    if (cudaSetDevice(0) != cudaSuccess) return;
    cudaStream_t s = non_blocking_stream();
    while (!stop.load()) {
      launch(long_kernel, s);
      (void)cudaStreamSynchronize(s);
    }
  });
  if (cudaSetDevice(1) != cudaSuccess) return 2;
  cudaStream_t stream = non_blocking_stream();
  stepscope::set_stream(stream);
  for (int i = 0; i < steps; ++i) {
    STEPSCOPE_STEP();
    STEPSCOPE_PHASE_KIND("forward", stepscope::PhaseKind::compute);
    launch(forward_kernel, stream);
    (void)cudaStreamSynchronize(stream);
    std::this_thread::sleep_for(std::chrono::milliseconds(4));
  }
  stop.store(true);
  other.join();
  return 0;
}

// One process, two GPUs, both timed (C14): a thread per device runs the
// steps. Device 0 computes 4 ms per step and sends 48 MiB to device 1 with
// cudaMemcpyPeerAsync (0.5 ms at the simulator's 100 GB/s); device 1
// computes 1 ms per step and then waits ~3 ms on the host. Device 0 holds
// 256 MiB, device 1 64 MiB (plus each primary context's 512 MiB).
int multi_gpu(int steps) {
  simcuda::set_kernel_ns("long", 4 * kMs);
  simcuda::set_kernel_ns("forward", 1 * kMs);
  constexpr std::size_t kPeerBytes = 48u << 20;
  auto device_loop = [steps](int device) {
    if (cudaSetDevice(device) != cudaSuccess) std::exit(2);
    void* buffer = nullptr;
    if (cudaMalloc(&buffer, device == 0 ? 256u << 20 : 64u << 20) != cudaSuccess) std::exit(2);
    cudaStream_t stream = non_blocking_stream();
    stepscope::set_stream(stream);
    for (int i = 0; i < steps; ++i) {
      STEPSCOPE_STEP();
      if (device == 0) {
        {
          STEPSCOPE_PHASE_KIND("forward_gpu0", stepscope::PhaseKind::compute);
          launch(long_kernel, stream);
        }
        STEPSCOPE_PHASE_KIND("send_to_gpu1", stepscope::PhaseKind::communication);
        (void)cudaMemcpyPeerAsync(buffer, 1, buffer, 0, kPeerBytes, stream);
      } else {
        {
          STEPSCOPE_PHASE_KIND("forward_gpu1", stepscope::PhaseKind::compute);
          launch(forward_kernel, stream);
        }
        (void)cudaStreamSynchronize(stream);
        std::this_thread::sleep_for(std::chrono::milliseconds(3));
      }
      (void)cudaStreamSynchronize(stream);
    }
  };
  std::thread second(device_loop, 1);
  device_loop(0);
  second.join();
  return 0;
}

// Context created inside step 1, no set_stream (review C12).
int late_context(int steps) {
  int n = 0;
  (void)cudaGetDeviceCount(&n);  // the driver is loaded: stepscope starts its backend early
  simcuda::set_kernel_ns("forward", 1 * kMs);
  for (int i = 0; i < steps; ++i) {
    STEPSCOPE_STEP();
    if (i == 0) (void)cudaFree(nullptr);
    STEPSCOPE_PHASE_KIND("forward", stepscope::PhaseKind::compute);
    launch(forward_kernel, nullptr);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  (void)cudaDeviceSynchronize();
  return 0;
}

// The NVIDIA-samples ending: cudaDeviceReset before returning from main.
int reset(int steps) {
  async_forward(steps, true);
  (void)cudaDeviceReset();
  return 0;
}

// A kernel still running when the run ends: CUPTI's forced flush hands it
// back with end = 0.
int running_at_exit(int steps) {
  async_forward(steps, true);
  simcuda::set_kernel_ns("long", 3000 * kMs);
  cudaStream_t s = non_blocking_stream();
  launch(long_kernel, s);
  std::printf("report=%s\n", stepscope::finish().c_str());
  return 0;
}

// After stepscope finished, another CUPTI client (torch.profiler) subscribes.
int second_client(int steps) {
  async_forward(steps, true);
  (void)stepscope::finish();
  CUpti_SubscriberHandle handle = nullptr;
  const CUptiResult r = cuptiSubscribe(
      &handle, [](void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}, nullptr);
  std::printf("second_subscribe=%d\n", static_cast<int>(r));
  if (r == CUPTI_SUCCESS) (void)cuptiUnsubscribe(handle);
  return 0;
}

// fork() inside a timed phase; the child closes the phase and exits
// (CUDA may not be used in a forked child before exec: C16).
int fork_in_phase(int steps) {
  async_forward(steps, true);
  cudaStream_t stream = non_blocking_stream();
  stepscope::set_stream(stream);
  pid_t child = -1;
  {
    STEPSCOPE_STEP();
    STEPSCOPE_PHASE_KIND("forked", stepscope::PhaseKind::compute);
    launch(forward_kernel, stream);
    child = fork();
    if (child == 0) {
      // The scopes close here, in the child.
    }
  }
  if (child == 0) {
    std::printf("child_cuda_calls=%llu\n", static_cast<unsigned long long>(simcuda::counter("calls_in_forked_child")));
    std::fflush(stdout);
    _exit(0);
  }
  int status = 0;
  (void)waitpid(child, &status, 0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: sim_probe MODE [STEPS]\n");
    return 64;
  }
  name_kernels();
  const std::string mode = argv[1];
  const int steps = argc >= 3 ? std::atoi(argv[2]) : 20;
  if (mode == "async") return async_forward(steps, true);
  if (mode == "behind") return behind(steps, false);
  if (mode == "behind-item") return behind(steps, true);
  if (mode == "behind-periodic") return behind(steps, false, 8);
  if (mode == "unbound") return async_forward(steps, false);
  if (mode == "user-stream") return user_stream(steps);
  if (mode == "capture") return capture(steps);
  if (mode == "pressure") return pressure(steps);
  if (mode == "scheduling") return scheduling(steps);
  if (mode == "compute") return compute(steps);
  if (mode == "launch-bound") return launch_bound(steps);
  if (mode == "memory") return memory(steps);
  if (mode == "input") return input(steps);
  if (mode == "lost") return lost(steps);
  if (mode == "cpu") return cpu_only(steps);
  if (mode == "fork-child") return fork_child(steps);
  if (mode == "device1") return rank_on_device1(steps);
  if (mode == "two-gpus") return two_gpus(steps);
  if (mode == "multi-gpu") return multi_gpu(steps);
  if (mode == "late-context") return late_context(steps);
  if (mode == "reset") return reset(steps);
  if (mode == "running-at-exit") return running_at_exit(steps);
  if (mode == "second-client") return second_client(steps);
  if (mode == "fork") return fork_in_phase(steps);
  std::fprintf(stderr, "sim_probe: unknown mode %s\n", mode.c_str());
  return 64;
}

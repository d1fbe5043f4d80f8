// The tutorial's central mistake, next to what stepscope measures: a training
// step timed with a host clock and no synchronisation. The forward kernel
// runs ~5 ms on the device, but a kernel launch returns as soon as the work
// is queued, so the host timer reports the launch (microseconds), not the
// work. stepscope's phase records CUDA events on the same stream, so the
// report's device section has the phase's real device time.
//   stepscope_host_timer_trap [--steps N]
//   scripts/gpu-sim build/examples/cuda/stepscope_host_timer_trap   (no GPU needed)
// Prints both; exits 0 (host side only) without a usable GPU.
#include <stepscope/cuda.hpp>

#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

// Spins for `ns` nanoseconds of the GPU's global timer (one thread): a
// stand-in for a forward pass of known length.
__global__ void forward_kernel(unsigned long long ns) {
  unsigned long long start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

constexpr unsigned long long kForwardNs = 5'000'000;  // 5 ms of device work per step

}  // namespace

int main(int argc, char** argv) {
  int steps = 40;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[i + 1]);
  int devices = 0;
  const bool gpu = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
  if (!gpu) {
    (void)cudaGetLastError();
    std::printf("no usable GPU: nothing to time on the device (try scripts/gpu-sim)\n");
    return 0;
  }
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return 1;
  stepscope::set_stream(stream);  // this thread's phases are timed on `stream`

  double host_timer_ms = 0;
  for (int i = 0; i < steps; ++i) {
    STEPSCOPE_STEP();
    STEPSCOPE_PHASE_KIND("forward", stepscope::PhaseKind::compute);
    // The trap: a host clock around asynchronous work, no cudaStreamSynchronize.
    const auto t0 = std::chrono::steady_clock::now();
    forward_kernel<<<1, 1, 0, stream>>>(kForwardNs);
    host_timer_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  (void)cudaStreamSynchronize(stream);  // once, after the loop: outside every step
  const stepscope::Report report = stepscope::snapshot();
  double device_ms = -1, host_ms = -1;
  for (const auto& p : report.phases)
    if (p.name == "forward") {
      host_ms = p.host_ms.mean;
      if (p.device_ms) device_ms = p.device_ms->mean;
    }
  std::printf("forward, host timer around the launch:  %.3f ms per step\n", host_timer_ms / steps);
  std::printf("forward, stepscope host time:           %.3f ms per step\n", host_ms);
  if (device_ms >= 0)
    std::printf("forward, stepscope device time:         %.3f ms per step (the work)\n", device_ms);
  else
    std::printf("forward, stepscope device time:         not measured yet (see the report's device section)\n");
  return 0;
}

// The instrumented CUDA program the cuda tests and scripts/gpu-check run as
// a separate process (the report is written once, at exit).
//   gpu_probe spin US STEPS    — each step: one phase around one kernel that
//                                spins US microseconds on the GPU clock; no
//                                synchronisation inside the steps
//   gpu_probe overhead BATCHES — per-scope host cost with device events
//                                (prints overhead_ns_per_scope=...)
//   gpu_probe capture STEPS    — phases inside a CUDA-graph capture, then a
//                                phase around each cudaGraphLaunch
//   gpu_probe multi-gpu STEPS  — two GPUs in one process, a thread each
//                                (review C14): GPU 0 spins 2000 us and sends
//                                48 MiB to GPU 1 per step (cudaMemcpyPeerAsync),
//                                GPU 1 spins 500 us; each step ends with a
//                                sync. Prints devices=N; needs N >= 2
//   gpu_probe second-client STEPS — a second CUPTI activity client (no
//                                subscriber, as Kineto's activity-only use)
//                                registers its buffer callbacks after step 5
//                                (review S3); prints what it received
// Without a usable GPU every mode still runs its host side and exits 0.
#include <stepscope/cuda.hpp>

#include <cuda_runtime.h>
#include <cupti.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace {

// Spins for `ns` nanoseconds of the GPU's global timer (one thread).
__global__ void spin_kernel(unsigned long long ns) {
  unsigned long long start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

bool have_gpu() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    return false;
  }
  return true;
}

int spin(int us, int steps) {
  const bool gpu = have_gpu();
  cudaStream_t stream = nullptr;
  if (gpu && cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return 2;
  stepscope::set_stream(stream);
  for (int i = 0; i < steps; ++i) {
    STEPSCOPE_STEP();
    STEPSCOPE_PHASE_KIND("spin", stepscope::PhaseKind::compute);
    if (gpu)
      spin_kernel<<<1, 1, 0, stream>>>(static_cast<unsigned long long>(us) * 1000ull);
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  if (gpu && cudaStreamSynchronize(stream) != cudaSuccess) return 3;  // outside the steps
  std::printf("launches=%d\n", gpu ? steps : 0);
  return 0;
}

int overhead(int batches) {
  const bool gpu = have_gpu();
  cudaStream_t stream = nullptr;
  if (gpu) (void)cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  stepscope::set_stream(stream);
  constexpr int kPerBatch = 100;  // below the per-thread slot pool (256)
  double total_ns = 0;
  for (int b = 0; b < batches; ++b) {
    STEPSCOPE_STEP();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kPerBatch; ++i) {
      STEPSCOPE_PHASE("empty");
    }
    total_ns += std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    std::this_thread::sleep_for(std::chrono::milliseconds(12));  // let the collector give the slots back
  }
  std::printf("overhead_ns_per_scope=%.1f\n", total_ns / (static_cast<double>(batches) * kPerBatch));
  return 0;
}

int capture(int steps) {
  if (!have_gpu()) return 0;
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return 2;
  stepscope::set_stream(stream);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  {
    STEPSCOPE_STEP();
    if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) != cudaSuccess) return 3;
    for (int k = 0; k < 4; ++k) {
      STEPSCOPE_PHASE("captured");  // must not record events into the capture
      spin_kernel<<<1, 1, 0, stream>>>(250000ull);
    }
    if (cudaStreamEndCapture(stream, &graph) != cudaSuccess) return 4;
    if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) return 5;
  }
  for (int i = 0; i < steps; ++i) {
    STEPSCOPE_STEP();
    STEPSCOPE_PHASE_KIND("graph", stepscope::PhaseKind::compute);
    if (cudaGraphLaunch(exec, stream) != cudaSuccess) return 6;
  }
  if (cudaStreamSynchronize(stream) != cudaSuccess) return 7;
  return 0;
}

int multi_gpu(int steps) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    n = 0;
  }
  std::printf("devices=%d\n", n);
  if (n < 2) return 0;
  constexpr std::size_t kPeerBytes = 48u << 20;
  void* peer_buffer = nullptr;  // on GPU 1, the copies' destination
  if (cudaSetDevice(1) != cudaSuccess || cudaMalloc(&peer_buffer, kPeerBytes) != cudaSuccess) return 2;
  std::atomic<int> failed{0};
  auto loop = [&](int device) {
    void* buffer = nullptr;
    cudaStream_t stream = nullptr;
    if (cudaSetDevice(device) != cudaSuccess || cudaMalloc(&buffer, kPeerBytes) != cudaSuccess ||
        cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
      failed = 3;
      return;
    }
    stepscope::set_stream(stream);
    for (int i = 0; i < steps; ++i) {
      STEPSCOPE_STEP();
      if (device == 0) {
        {
          STEPSCOPE_PHASE_KIND("spin_gpu0", stepscope::PhaseKind::compute);
          spin_kernel<<<1, 1, 0, stream>>>(2000000ull);
        }
        STEPSCOPE_PHASE_KIND("send_to_gpu1", stepscope::PhaseKind::communication);
        if (cudaMemcpyPeerAsync(peer_buffer, 1, buffer, 0, kPeerBytes, stream) != cudaSuccess) failed = 4;
      } else {
        STEPSCOPE_PHASE_KIND("spin_gpu1", stepscope::PhaseKind::compute);
        spin_kernel<<<1, 1, 0, stream>>>(500000ull);
      }
      if (cudaStreamSynchronize(stream) != cudaSuccess) failed = 5;
    }
  };
  std::thread second(loop, 1);
  loop(0);
  second.join();
  return failed.load();
}

// The second client's side: counts the kernel records it is handed.
std::atomic<unsigned long long> g_second_kernels{0}, g_second_buffers{0};
void CUPTIAPI second_request(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, 1u << 20));
  *size = *buffer != nullptr ? (1u << 20) : 0;
  *max_records = 0;
}
void CUPTIAPI second_complete(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  ++g_second_buffers;
  CUpti_Activity* record = nullptr;
  while (buffer != nullptr && cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS)
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) ++g_second_kernels;
  std::free(buffer);  // stepscope's buffers are malloc'ed too
}

int second_client(int steps) {
  if (!have_gpu()) return 0;
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return 2;
  stepscope::set_stream(stream);
  CUptiResult registered = CUPTI_SUCCESS;
  for (int i = 0; i < steps; ++i) {
    if (i == 5) {
      registered = cuptiActivityRegisterCallbacks(second_request, second_complete);
      (void)cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    }
    STEPSCOPE_STEP();
    STEPSCOPE_PHASE_KIND("spin", stepscope::PhaseKind::compute);
    spin_kernel<<<1, 1, 0, stream>>>(200000ull);
    (void)cudaStreamSynchronize(stream);
  }
  (void)cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::printf("second_client_register=%d\nsecond_client_buffers=%llu\nsecond_client_kernels=%llu\n",
              static_cast<int>(registered), g_second_buffers.load(), g_second_kernels.load());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 4 && std::strcmp(argv[1], "spin") == 0) return spin(std::atoi(argv[2]), std::atoi(argv[3]));
  if (argc >= 3 && std::strcmp(argv[1], "overhead") == 0) return overhead(std::atoi(argv[2]));
  if (argc >= 3 && std::strcmp(argv[1], "capture") == 0) return capture(std::atoi(argv[2]));
  if (argc >= 3 && std::strcmp(argv[1], "multi-gpu") == 0) return multi_gpu(std::atoi(argv[2]));
  if (argc >= 3 && std::strcmp(argv[1], "second-client") == 0) return second_client(std::atoi(argv[2]));
  std::fprintf(stderr, "usage: gpu_probe spin US STEPS | overhead BATCHES | capture STEPS\n");
  return 64;
}

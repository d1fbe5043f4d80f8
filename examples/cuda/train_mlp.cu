// A small MLP trained with hand-written CUDA kernels, instrumented with
// stepscope, with switches that inject a known bottleneck:
//   stepscope_cuda_mlp [--steps N] [--inject slow-input|pageable-copy|tiny-kernels]
// slow-input     the data phase sleeps 8 ms per step (expected verdict: io)
// pageable-copy  the batch is copied from pageable memory, 64 MiB per step (memory)
// tiny-kernels   the hidden layer is updated by 2000 one-element kernels (scheduling)
// Without a usable GPU it runs the host side only, says so and exits 0.
#include <stepscope/cuda.hpp>

#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kBatch = 512, kIn = 1024, kHidden = 1024, kOut = 16;

// out[b][j] = act(sum_k in[b][k] * w[k][j]); 16x16 tiles in shared memory.
__global__ void matmul(const float* in, const float* w, float* out, int rows, int inner, int cols, bool relu) {
  __shared__ float a[16][16], b[16][16];
  const int r = blockIdx.y * 16 + threadIdx.y, c = blockIdx.x * 16 + threadIdx.x;
  float acc = 0;
  for (int t = 0; t < inner; t += 16) {
    a[threadIdx.y][threadIdx.x] = (r < rows && t + threadIdx.x < inner) ? in[r * inner + t + threadIdx.x] : 0.f;
    b[threadIdx.y][threadIdx.x] = (c < cols && t + threadIdx.y < inner) ? w[(t + threadIdx.y) * cols + c] : 0.f;
    __syncthreads();
    for (int k = 0; k < 16; ++k) acc += a[threadIdx.y][k] * b[k][threadIdx.x];
    __syncthreads();
  }
  if (r < rows && c < cols) out[r * cols + c] = relu && acc < 0 ? 0.f : acc;
}

// A crude gradient step: w -= lr * g (g stands in for the backward pass).
__global__ void sgd(float* w, const float* g, int n, float lr) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) w[i] -= lr * g[i % (kBatch * kHidden)];
}

__global__ void fill(float* p, int n, float v) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v * static_cast<float>((i * 2654435761u) % 1000) * 1e-3f;
}

dim3 grid_for(int rows, int cols) {
  return dim3((cols + 15) / 16, (rows + 15) / 16);
}

bool check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "cuda_mlp: %s failed: %s\n", what, cudaGetErrorString(e));
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 60;
  std::string inject;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
      steps = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--inject") == 0 && i + 1 < argc)
      inject = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--steps N] [--inject slow-input|pageable-copy|tiny-kernels]\n", argv[0]);
      return 64;
    }
  }
  if (!inject.empty() && inject != "slow-input" && inject != "pageable-copy" && inject != "tiny-kernels") {
    std::fprintf(stderr, "cuda_mlp: unknown --inject '%s'\n", inject.c_str());
    return 64;
  }
  stepscope::set_config("batch_size", kBatch);
  stepscope::set_config("inject", inject.empty() ? "none" : inject);

  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    (void)cudaGetLastError();
    std::printf("cuda_mlp: no usable CUDA device; running the host side only (see the report's device.status)\n");
    for (int s = 0; s < steps; ++s) {
      STEPSCOPE_STEP();
      STEPSCOPE_PHASE("data");
      std::this_thread::sleep_for(std::chrono::microseconds(inject == "slow-input" ? 8000 : 200));
    }
    return 0;
  }

  cudaStream_t stream = nullptr;
  float *x = nullptr, *w1 = nullptr, *w2 = nullptr, *h = nullptr, *y = nullptr;
  const std::size_t copy_floats = inject == "pageable-copy" ? (64u << 20) / sizeof(float) : kBatch * kIn;
  float* device_batch = nullptr;
  if (!check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate") ||
      !check(cudaMalloc(&x, sizeof(float) * kBatch * kIn), "cudaMalloc") ||
      !check(cudaMalloc(&w1, sizeof(float) * kIn * kHidden), "cudaMalloc") ||
      !check(cudaMalloc(&w2, sizeof(float) * kHidden * kOut), "cudaMalloc") ||
      !check(cudaMalloc(&h, sizeof(float) * kBatch * kHidden), "cudaMalloc") ||
      !check(cudaMalloc(&y, sizeof(float) * kBatch * kOut), "cudaMalloc") ||
      !check(cudaMalloc(&device_batch, sizeof(float) * copy_floats), "cudaMalloc"))
    return 1;
  // Host batch: pinned normally (async copies), pageable when injected.
  float* host_batch = nullptr;
  std::vector<float> pageable;
  if (inject == "pageable-copy") {
    pageable.assign(copy_floats, 0.5f);
    host_batch = pageable.data();
  } else if (!check(cudaMallocHost(&host_batch, sizeof(float) * copy_floats), "cudaMallocHost")) {
    return 1;
  }
  fill<<<(kIn * kHidden + 255) / 256, 256, 0, stream>>>(w1, kIn * kHidden, 0.01f);
  fill<<<(kHidden * kOut + 255) / 256, 256, 0, stream>>>(w2, kHidden * kOut, 0.01f);
  stepscope::set_stream(stream);

  for (int s = 0; s < steps; ++s) {
    STEPSCOPE_STEP();
    {
      STEPSCOPE_PHASE("data");
      if (inject == "slow-input") std::this_thread::sleep_for(std::chrono::milliseconds(8));
      for (std::size_t i = 0; i < copy_floats; i += 4096) host_batch[i] = static_cast<float>(s);
    }
    {
      STEPSCOPE_PHASE("h2d");
      check(cudaMemcpyAsync(device_batch, host_batch, sizeof(float) * copy_floats, cudaMemcpyHostToDevice, stream),
            "copy");
      check(cudaMemcpyAsync(x, device_batch, sizeof(float) * kBatch * kIn, cudaMemcpyDeviceToDevice, stream), "copy");
    }
    {
      STEPSCOPE_PHASE("forward");
      matmul<<<grid_for(kBatch, kHidden), dim3(16, 16), 0, stream>>>(x, w1, h, kBatch, kIn, kHidden, true);
      matmul<<<grid_for(kBatch, kOut), dim3(16, 16), 0, stream>>>(h, w2, y, kBatch, kHidden, kOut, false);
    }
    {
      STEPSCOPE_PHASE("backward");
      matmul<<<grid_for(kBatch, kHidden), dim3(16, 16), 0, stream>>>(x, w1, h, kBatch, kIn, kHidden, false);
    }
    {
      STEPSCOPE_PHASE("optimizer");
      if (inject == "tiny-kernels") {
        for (int k = 0; k < 2000; ++k) sgd<<<1, 1, 0, stream>>>(w1 + k, h, 1, 1e-4f);
      } else {
        sgd<<<(kIn * kHidden + 255) / 256, 256, 0, stream>>>(w1, h, kIn * kHidden, 1e-4f);
      }
    }
    // The loss read-back a real loop does: the one synchronisation per step.
    float loss = 0;
    {
      STEPSCOPE_PHASE("d2h");
      check(cudaMemcpyAsync(&loss, y, sizeof(float), cudaMemcpyDeviceToHost, stream), "copy");
      check(cudaStreamSynchronize(stream), "sync");
    }
    if (s % 20 == 0) std::printf("step %d loss %.4f\n", s, loss);
  }
  const std::string path = stepscope::finish();
  stepscope::Report report;
  std::string error;
  if (!path.empty() && stepscope::load_report(path, report, error))
    std::printf("verdict: %s (confidence %.2f), device status %s\n", report.bottleneck.category.c_str(),
                report.bottleneck.confidence, report.device.status.c_str());
  return 0;
}

// Helpers of the CUDA backend around the runtime API: which errors mean the
// device is gone, scoped device and capture-mode switches, the fallback
// backend and the start-up probe (cuda_backend.cpp's cold parts).
#pragma once

#include "core/device_backend.hpp"

#include <cuda_runtime_api.h>

#include <string>
#include <utility>

namespace stepscope {
inline namespace v1 {
namespace detail::cuda {

// Errors after which the context is unusable: every later call returns them
// (sticky errors), or the device has gone away.
inline bool device_failed(cudaError_t e) noexcept {
  switch (e) {
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalAddress:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
    case cudaErrorDevicesUnavailable:
    case cudaErrorContextIsDestroyed:
    case cudaErrorCudartUnloading:
    case cudaErrorUnknown:
      return true;
    default:
      return false;
  }
}

// PyTorch's MaybeSetDevice: make `device` current on this thread for the
// scope, and switch back only when the previous device's primary context is
// active. Restoring to a device without a context (a fresh thread's device 0)
// would create one there: ~0.5 GiB on another rank's GPU (review C1).
class DeviceScope {
 public:
  template <typename ContextActive>
  DeviceScope(int device, ContextActive&& context_active) noexcept {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      (void)cudaGetLastError();
      previous_ = -1;
    }
    if (previous_ == device) {
      ok_ = true;
      return;
    }
    ok_ = cudaSetDevice(device) == cudaSuccess;
    if (!ok_) (void)cudaGetLastError();
    restore_ = ok_ && previous_ >= 0 && context_active(previous_);
  }
  ~DeviceScope() {
    if (restore_) (void)cudaSetDevice(previous_);
  }
  bool ok() const noexcept { return ok_; }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
  bool ok_ = false, restore_ = false;
};

// The collector's CUDA calls must not invalidate a user's CUDA-graph capture
// in global mode (cudaEventQuery and cudaMemGetInfo count as "unsafe" there):
// relax this thread's capture interaction mode while they run.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() noexcept {
    if (cudaThreadExchangeStreamCaptureMode(&mode_) != cudaSuccess) {
      (void)cudaGetLastError();
      ok_ = false;
    }
  }
  ~RelaxedCaptureMode() {
    if (ok_) (void)cudaThreadExchangeStreamCaptureMode(&mode_);
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
  bool ok_ = true;
};

// Host timing only; the report says why.
class FallbackBackend final : public DeviceBackend {
 public:
  FallbackBackend(std::string status, std::string reason) : status_(std::move(status)), reason_(std::move(reason)) {}
  void on_record(const PhaseRecord&) override {}
  void poll(Aggregator&) override {}
  void finish(Aggregator&, DeviceInfo& info) override {
    info.enabled = false;
    info.status = status_;
    info.reason = reason_;
  }

 private:
  std::string status_, reason_;
};

inline std::string cuda_error(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

// Why the CUDA runtime cannot be used here, as (status, reason); empty status
// when a device is usable. Never creates a context; returns in about a
// millisecond without a driver (cudart fails to load libcuda.so.1).
inline std::pair<std::string, std::string> probe_cuda(int& device_count) {
  device_count = 0;
  int driver = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) (void)cudaGetLastError();
  const cudaError_t e = cudaGetDeviceCount(&device_count);
  if (e == cudaSuccess && device_count > 0) return {};
  (void)cudaGetLastError();
  if (e == cudaSuccess || e == cudaErrorNoDevice) {
    device_count = 0;
    return {"no_device", "no CUDA device visible (CUDA_VISIBLE_DEVICES, container or machine without a GPU)"};
  }
  device_count = 0;
  if (driver == 0 || e == cudaErrorStubLibrary)
    return {"no_driver", "no NVIDIA driver found (libcuda.so.1 could not be loaded; " + cuda_error(e) + ")"};
  int runtime = 0;
  (void)cudaRuntimeGetVersion(&runtime);
  if (e == cudaErrorInsufficientDriver)
    return {"driver_too_old", "the NVIDIA driver (CUDA " + std::to_string(driver / 1000) + "." +
                                  std::to_string(driver % 1000 / 10) +
                                  ") is older than the CUDA runtime stepscope was built with (" +
                                  std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10) + ")"};
  return {"cuda_error", "the CUDA runtime could not start (" + cuda_error(e) + ")"};
}

}  // namespace detail::cuda
}  // namespace v1
}  // namespace stepscope

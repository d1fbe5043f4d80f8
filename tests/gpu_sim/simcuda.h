// Side API of the test-only CUDA simulator (libstepscope_cudasim.so), for
// programs run under it (scripts/gpu-sim, the gpu-sim tests). Looked up with
// dlsym, so a program that includes this still runs on a real GPU or without
// any: every helper is then a no-op returning false / 0.
//
//   simcuda::set_kernel_ns("forward", 5'000'000);   // every "forward*" kernel: 5 ms of device time
//   simcuda::set_next_ns(2'000'000);                 // the next kernel/copy/memset only
//   simcuda::register_kernel(&fake_fn, "forward");   // name a host pointer passed to cudaLaunchKernel
//   simcuda::counter("sync_calls");                  // see docs/gpu.md for the counter names
#pragma once

#include <dlfcn.h>

#include <cstdint>

namespace simcuda {

inline void* symbol(const char* name) noexcept {
  return dlsym(RTLD_DEFAULT, name);
}

// True when the program runs on the simulator.
inline bool active() noexcept {
  return symbol("simcuda_counter") != nullptr;
}

inline bool set_kernel_ns(const char* name_part, std::int64_t ns) noexcept {
  auto fn = reinterpret_cast<void (*)(const char*, std::int64_t)>(symbol("simcuda_set_kernel_ns"));
  if (fn == nullptr) return false;
  fn(name_part, ns);
  return true;
}

inline bool set_next_ns(std::int64_t ns) noexcept {
  auto fn = reinterpret_cast<void (*)(std::int64_t)>(symbol("simcuda_set_next_ns"));
  if (fn == nullptr) return false;
  fn(ns);
  return true;
}

inline bool register_kernel(const void* host_function, const char* name) noexcept {
  auto fn = reinterpret_cast<void (*)(const void*, const char*)>(symbol("simcuda_register_kernel"));
  if (fn == nullptr) return false;
  fn(host_function, name);
  return true;
}

// From now on every CUDA call fails with a sticky error (the device is gone).
inline bool lose_device() noexcept {
  auto fn = reinterpret_cast<void (*)()>(symbol("simcuda_lose_device"));
  if (fn == nullptr) return false;
  fn();
  return true;
}

inline std::uint64_t counter(const char* name) noexcept {
  auto fn = reinterpret_cast<std::uint64_t (*)(const char*)>(symbol("simcuda_counter"));
  return fn != nullptr ? fn(name) : 0;
}

}  // namespace simcuda

// src/core/torch_grad.cpp — is a steps() loop an evaluation loop from its
// start? torch's gradient mode on this thread, read from libtorch where the
// process has it loaded (no build dependency on torch): c10::GradMode, a
// thread-local flag that torch::NoGradGuard and Python's torch.no_grad() set.
// Its own object file: only what uses steps() links dlopen.
#include <stepscope/steps.hpp>

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstring>

namespace stepscope {
inline namespace v1 {
namespace detail {
namespace {

using GradModeEnabled = bool (*)();
constexpr const char* kGradModeSymbol = "_ZN3c108GradMode10is_enabledEv";  // c10::GradMode::is_enabled()

// libc10 in the global scope (a C++ program linked with libtorch), else
// loaded locally (Python's torch._C): found among the loaded objects and
// opened without loading anything. Null without libtorch.
GradModeEnabled find_grad_mode() noexcept {
  if (void* symbol = ::dlsym(RTLD_DEFAULT, kGradModeSymbol)) return reinterpret_cast<GradModeEnabled>(symbol);
  void* found = nullptr;
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* out) -> int {
        const char* slash = info->dlpi_name != nullptr ? std::strrchr(info->dlpi_name, '/') : nullptr;
        const char* base = slash != nullptr ? slash + 1 : info->dlpi_name;
        if (base == nullptr || std::strncmp(base, "libc10.so", 9) != 0) return 0;
        if (void* handle = ::dlopen(info->dlpi_name, RTLD_NOW | RTLD_NOLOAD)) {
          *static_cast<void**>(out) = ::dlsym(handle, kGradModeSymbol);
          return 1;
        }
        return 0;
      },
      &found);
  return reinterpret_cast<GradModeEnabled>(found);
}

// A steps() loop on this thread began with gradients on: the thread trains.
thread_local bool t_loop_with_gradients = false;

}  // namespace

bool evaluates_from_start(bool trained) noexcept {
  // Resolved at the first loop that finds libtorch loaded (a Python import
  // after an earlier loop is found at the next loop); until then each loop
  // pays one dlsym and a walk of the loaded objects (not measured).
  static std::atomic<GradModeEnabled> resolved{nullptr};
  GradModeEnabled grad_mode = resolved.load(std::memory_order_acquire);
  if (grad_mode == nullptr) {
    grad_mode = find_grad_mode();
    if (grad_mode == nullptr) return false;
    resolved.store(grad_mode, std::memory_order_release);
  }
  if (grad_mode()) {
    t_loop_with_gradients = true;
    return false;
  }
  return trained || t_loop_with_gradients;
}

}  // namespace detail
}  // namespace v1
}  // namespace stepscope

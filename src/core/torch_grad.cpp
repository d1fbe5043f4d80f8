// src/core/torch_grad.cpp — is a steps() loop an evaluation loop from its
// start? torch's gradient mode on this thread, read from libtorch where the
// process has it loaded (no build dependency on torch): c10::GradMode, a
// thread-local flag that torch::NoGradGuard and Python's torch.no_grad() set.
// And the intra-op threads torch runs (at::get_num_threads), read on the same
// loop's thread, for the report (run.config.intra_op_threads).
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
using NumThreads = int (*)();
constexpr const char* kGradModeSymbol = "_ZN3c108GradMode10is_enabledEv";  // c10::GradMode::is_enabled()
constexpr const char* kNumThreadsSymbol = "_ZN2at15get_num_threadsEv";     // at::get_num_threads()

// A libtorch symbol in the global scope (a C++ program linked with libtorch),
// else in `library` loaded locally (Python's torch._C): found among the loaded
// objects and opened without loading anything. Null without libtorch.
void* find_torch_symbol(const char* symbol, const char* library) noexcept {
  if (void* found = ::dlsym(RTLD_DEFAULT, symbol)) return found;
  struct Search {
    const char* symbol;
    const char* library;
    void* found;
  } search{symbol, library, nullptr};
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) -> int {
        auto* s = static_cast<Search*>(data);
        const char* slash = info->dlpi_name != nullptr ? std::strrchr(info->dlpi_name, '/') : nullptr;
        const char* base = slash != nullptr ? slash + 1 : info->dlpi_name;
        if (base == nullptr || std::strncmp(base, s->library, std::strlen(s->library)) != 0) return 0;
        if (void* handle = ::dlopen(info->dlpi_name, RTLD_NOW | RTLD_NOLOAD)) {
          s->found = ::dlsym(handle, s->symbol);
          return 1;
        }
        return 0;
      },
      &search);
  return search.found;
}

std::atomic<int> g_intra_op_threads{0};

// A steps() loop on this thread began with gradients on: the thread trains.
thread_local bool t_loop_with_gradients = false;

}  // namespace

bool evaluates_from_start(bool trained) noexcept {
  // Resolved at the first loop that finds libtorch loaded (a Python import
  // after an earlier loop is found at the next loop); until then each loop
  // pays one dlsym and a walk of the loaded objects (not measured).
  static std::atomic<GradModeEnabled> resolved{nullptr};
  static std::atomic<NumThreads> threads{nullptr};
  GradModeEnabled grad_mode = resolved.load(std::memory_order_acquire);
  if (grad_mode == nullptr) {
    grad_mode = reinterpret_cast<GradModeEnabled>(find_torch_symbol(kGradModeSymbol, "libc10.so"));
    if (grad_mode == nullptr) return false;
    resolved.store(grad_mode, std::memory_order_release);
    threads.store(reinterpret_cast<NumThreads>(find_torch_symbol(kNumThreadsSymbol, "libtorch_cpu.so")),
                  std::memory_order_release);
  }
  if (const NumThreads num_threads = threads.load(std::memory_order_acquire)) {
    try {  // libtorch's function is not noexcept: a throw here would end the training run
      g_intra_op_threads.store(num_threads(), std::memory_order_relaxed);
    } catch (...) {
    }
  }
  if (grad_mode()) {
    t_loop_with_gradients = true;
    return false;
  }
  return trained || t_loop_with_gradients;
}

int torch_intra_op_threads() noexcept {
  return g_intra_op_threads.load(std::memory_order_relaxed);
}

}  // namespace detail
}  // namespace v1
}  // namespace stepscope

// stepscope/cuda.hpp — the CUDA stream a phase's device time is measured on.
//
//   #include <stepscope/cuda.hpp>
//
//   stepscope::set_stream(stream);               // this thread's phases time `stream`
//   { STEPSCOPE_PHASE("forward"); model.forward(batch, stream); }
//   { STEPSCOPE_PHASE_STREAM("h2d", copy_stream); copy(batch, copy_stream); }
//
// Each phase on a CUDA-enabled build records a CUDA event when it opens and
// one when it closes, on the thread's current stream (never synchronising);
// the collector later reads the time between them as the phase's device_ms.
// Without set_stream, phases inside a step on the step thread use the legacy
// default stream (stream 0); threads outside steps record device events only
// after set_stream. Phases opened while their stream is being captured into a
// CUDA graph record nothing (a phase around cudaGraphLaunch is timed as one
// unit); docs/gpu.md has the details.
//
// No CUDA header is needed: streams are passed as void* (a cudaStream_t).
// This header is only for libraries built with CUDA (CMake STEPSCOPE_CUDA):
// with a library built without it, compiling (CMake) or linking fails rather
// than silently measuring nothing.
#pragma once

#include <stepscope/export.hpp>
#include <stepscope/stepscope.hpp>

#include <cstddef>

#if defined(STEPSCOPE_WITH_CUDA) && !STEPSCOPE_WITH_CUDA
#error \
    "<stepscope/cuda.hpp> needs a stepscope library built with CUDA (configure it with -DSTEPSCOPE_CUDA=ON or AUTO on a machine with the CUDA toolkit)"
#endif

namespace stepscope {
inline namespace v1 {
namespace detail {
// Defined only by a CUDA-enabled library; the reference below makes a
// header/library mismatch a link error ("undefined reference to
// stepscope::detail::cuda_backend_abi_v1").
STEPSCOPE_API extern const int cuda_backend_abi_v1;
#if defined(__GNUC__) || defined(__clang__)
[[maybe_unused]] __attribute__((used)) static const int* const cuda_backend_link_check = &cuda_backend_abi_v1;
#endif
}  // namespace detail

// The stream this thread's phases record their events on (a cudaStream_t;
// nullptr is the legacy default stream). Binding a stream also turns device
// timing on for phases outside steps on this thread. Cheap: a thread-local store.
STEPSCOPE_API void set_stream(void* cuda_stream) noexcept;
// The stream bound on this thread (nullptr when none or the default stream).
STEPSCOPE_API void* current_stream() noexcept;
// Forgets the binding: back to the default behaviour described above.
STEPSCOPE_API void clear_stream() noexcept;

// Binds `cuda_stream` for its lifetime and restores the previous binding.
class ScopedStream {
 public:
  explicit ScopedStream(void* cuda_stream) noexcept;
  ~ScopedStream();
  ScopedStream(const ScopedStream&) = delete;
  ScopedStream& operator=(const ScopedStream&) = delete;
  ScopedStream(ScopedStream&&) = delete;
  ScopedStream& operator=(ScopedStream&&) = delete;
  static void* operator new(std::size_t) = delete;
  static void* operator new[](std::size_t) = delete;

 private:
  void* previous_;
  bool previous_bound_;
};

namespace detail {
STEPSCOPE_API bool stream_bound() noexcept;
STEPSCOPE_API void restore_stream(void* cuda_stream, bool bound) noexcept;
}  // namespace detail

inline ScopedStream::ScopedStream(void* cuda_stream) noexcept
    : previous_(current_stream()), previous_bound_(detail::stream_bound()) {
  set_stream(cuda_stream);
}
inline ScopedStream::~ScopedStream() {
  detail::restore_stream(previous_, previous_bound_);
}

}  // namespace v1
}  // namespace stepscope

#if STEPSCOPE_ENABLE
// A phase whose device time is measured on `cuda_stream`: the stream is bound
// before the phase opens and restored after it closes.
#define STEPSCOPE_PHASE_STREAM(name, cuda_stream)                                              \
  ::stepscope::ScopedStream STEPSCOPE_DETAIL_CONCAT(stepscope_stream_, __LINE__){cuda_stream}; \
  STEPSCOPE_PHASE(name)
#else
#define STEPSCOPE_PHASE_STREAM(name, cuda_stream) static_cast<void>(cuda_stream)
#endif

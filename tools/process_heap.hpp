// The CLI's heap, tuned once at start-up for a short-lived process that
// reads a whole trace: see process_heap.cpp for why and what it costs.
// The library never calls this (a training run's allocator is its own).
#pragma once

namespace stepscope_cli {

// Best effort and silent: on anything but glibc's allocator (sanitizers,
// valgrind, musl) or when the kernel says no, the heap stays as it was.
void prepare_process_heap() noexcept;

}  // namespace stepscope_cli

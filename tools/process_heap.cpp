// The CLI's heap on transparent huge pages (Linux, glibc).
//
// Why: `stepscope analyze` of the 15 MB V100 trace first-touches ~20 MB
// (the gzip bytes, the event blocks, the timeline). Each fresh 4 KiB page
// costs a page fault, and on this project's machines (paravirtualised
// guests) a fault costs ~18 us: 2 085 faults were a third of the command's
// CPU. Debian ships THP in "madvise" mode, so a 2 MiB page is only used for
// memory that asked for it; glibc's malloc never asks, and hands big blocks
// to fresh mmaps that it returns on free (so the next block faults again).
//
// What: one arena for all threads, blocks below 32 MiB from the brk heap,
// no trimming below 128 MiB, and the heap grown by 64 MiB of address space
// at once, madvised MADV_HUGEPAGE before anything touched it. Address space
// only: a huge page is backed when first touched, so the resident set grows
// by at most one 2 MiB page beyond what is used. The document itself
// (src/import/byte_source.cpp) asks for huge pages on its own.
//
// Measured (docs/benchmarks-import.md): page faults 2 085 -> ~600 for the
// V100 analyze. This is a process-wide allocator policy, right for a CLI
// that exits after one job and wrong for a library inside a training run,
// which is why it lives here and not in src/.
#include "process_heap.hpp"

#include <cstdint>
#include <cstdlib>

// After a libc header: <features.h> defines __GLIBC__.
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>
#define STEPSCOPE_CLI_TUNE_HEAP 1
#else
#define STEPSCOPE_CLI_TUNE_HEAP 0
#endif

namespace stepscope_cli {

#if STEPSCOPE_CLI_TUNE_HEAP && defined(MADV_HUGEPAGE) && defined(M_ARENA_MAX)
namespace {

constexpr std::uintptr_t kHugePage = std::uintptr_t{2} << 20;
constexpr int kHeapPadBytes = 64 << 20;         // address space added per brk growth
constexpr int kMmapThresholdBytes = 32 << 20;   // glibc's maximum for a dynamic threshold
constexpr int kTrimThresholdBytes = 128 << 20;  // above the pad: the growth is kept
constexpr std::size_t kGrowBytes = 256 << 10;   // more than the initial heap's free top

// Keeps the compiler from folding a malloc/free pair away.
void* volatile g_sink = nullptr;

std::uintptr_t align_up(std::uintptr_t v) {
  return (v + kHugePage - 1) & ~(kHugePage - 1);
}
std::uintptr_t align_down(std::uintptr_t v) {
  return v & ~(kHugePage - 1);
}

}  // namespace

void prepare_process_heap() noexcept {
  // One arena: a second thread's arena would be a 64 MiB mmap of its own,
  // not madvised (the importer's helper thread allocates half the events).
  if (mallopt(M_ARENA_MAX, 1) != 1 || mallopt(M_MMAP_THRESHOLD, kMmapThresholdBytes) != 1 ||
      mallopt(M_TRIM_THRESHOLD, kTrimThresholdBytes) != 1 || mallopt(M_TOP_PAD, kHeapPadBytes) != 1) {
    return;
  }
  // Grow the heap now: a block larger than the free top makes malloc extend
  // the brk by the block plus the pad. Only the block's header and the new
  // top's header (below `before + kGrowBytes`) are written; the rest of the
  // growth is untouched, so no 4 KiB page there stops a huge one.
  const auto before = reinterpret_cast<std::uintptr_t>(sbrk(0));
  void* grow = std::malloc(kGrowBytes);
  if (grow == nullptr) return;
  g_sink = grow;
  const auto end = reinterpret_cast<std::uintptr_t>(sbrk(0));
  const std::uintptr_t first = align_up(before + kGrowBytes + 4096);
  const std::uintptr_t last = align_down(end);
  // `end` not beyond `before`: the heap is not glibc's brk heap (valgrind,
  // a preloaded allocator) or the top had room; leave it alone.
  const bool grown = end > before && reinterpret_cast<std::uintptr_t>(grow) < before + kGrowBytes && last > first;
  std::free(grow);
  g_sink = nullptr;
  if (!grown || madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE) != 0) return;
  // A spacer up to the first huge page, never touched past its header: the
  // next blocks (the gzip bytes, the event blocks) start on huge pages
  // instead of in the 4 KiB pages below them. Deliberately kept.
  const std::uintptr_t top = reinterpret_cast<std::uintptr_t>(grow);
  if (first > top + 8192) g_sink = std::malloc(first - top - 4096);
}

#else

void prepare_process_heap() noexcept {}

#endif

}  // namespace stepscope_cli

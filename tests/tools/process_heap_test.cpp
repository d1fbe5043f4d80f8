// The CLI's heap tuning (tools/process_heap.cpp): after it, a large block
// comes from the brk heap, which asked for transparent huge pages, instead of
// a fresh mmap of 4 KiB pages that faults page by page and is unmapped on
// free. Only where the tuning applies (glibc, no sanitizer, THP not "never");
// elsewhere the call must simply change nothing and not crash.
#include "process_heap.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#include <unistd.h>
#define STEPSCOPE_TEST_HEAP_TUNED 1
#else
#define STEPSCOPE_TEST_HEAP_TUNED 0
#endif

namespace {

bool huge_pages_possible() {
  std::ifstream mode("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string text((std::istreambuf_iterator<char>(mode)), std::istreambuf_iterator<char>());
  return !text.empty() && text.find("[never]") == std::string::npos;
}

// The "THPeligible" line of the /proc/self/smaps mapping holding `address`:
// 1 when the kernel may back it with huge pages, 0 when not, -1 when unknown.
int thp_eligible(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(' ') != std::string::npos &&
        line.find(':') > line.find(' ')) {
      inside = at >= lo && at < hi;
      continue;
    }
    if (inside && line.rfind("THPeligible:", 0) == 0) return std::atoi(line.c_str() + 12) == 1 ? 1 : 0;
  }
  return -1;
}

}  // namespace

TEST_CASE("the CLI's heap serves large blocks from huge-page-eligible brk memory") {
  stepscope_cli::prepare_process_heap();
  stepscope_cli::prepare_process_heap();  // a second call is harmless
  // 4 MiB: glibc's default mmap threshold is 128 KiB, so untuned this block
  // is an mmap of its own outside the brk heap.
  constexpr std::size_t kBlock = std::size_t{4} << 20;
  char* block = static_cast<char*>(std::malloc(kBlock));
  REQUIRE(block != nullptr);
  std::memset(block, 1, kBlock);  // usable, as any block
#if STEPSCOPE_TEST_HEAP_TUNED
  const auto brk_end = reinterpret_cast<std::uintptr_t>(sbrk(0));
  const auto at = reinterpret_cast<std::uintptr_t>(block);
  CHECK(at + kBlock <= brk_end);  // inside the brk heap
  if (huge_pages_possible()) {
    const int eligible = thp_eligible(block + kBlock / 2);
    if (eligible >= 0) CHECK(eligible == 1);
  }
#endif
  std::free(block);
}

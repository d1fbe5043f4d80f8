// Built only by the cuda_header_mismatch test, which expects it to FAIL: it
// includes <stepscope/cuda.hpp> against a library without the CUDA backend.
#include <stepscope/cuda.hpp>

int main() {
  return 0;
}

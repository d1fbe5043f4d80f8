// Layering probe (tests/layering/CMakeLists.txt): a source that includes a
// header of the analysis layer. Compiled with the core layer's include root it
// must not compile (core may not include analysis, docs/architecture.md);
// with the run layer's root it must.
#include "analysis/facts.hpp"

int main() {
  return 0;
}

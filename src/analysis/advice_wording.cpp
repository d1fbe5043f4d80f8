// src/analysis/advice_wording.cpp — the analyzer's advice in the language of
// the report's source: an imported PyTorch trace gets torch.profiler's words.
// Here, not in src/import, because analyze() calls it last (so a re-analysed
// report keeps the wording) and the analyzer includes nothing above it.
#include <stepscope/analysis.hpp>

#include <cstring>
#include <string>
#include <utility>

namespace stepscope {
inline namespace v1 {

// (Declared in <stepscope/analysis.hpp>.) The analyzer words its advice for code that links
// stepscope (STEPSCOPE_PHASE); an imported trace came from a Python training loop, where the same advice is a
// torch.profiler.record_function range. Rewrites every piece of text the user reads, in place.
void reword_advice_for_trace(Report& r) {
  if (r.run.source != "kineto-import") return;
  static const std::pair<const char*, const char*> kPhrases[] = {
      {"STEPSCOPE_PHASE scopes with a kind (input, compute, memory, communication)",
       "torch.profiler.record_function(\"...\") ranges named after what they do (data, forward, backward, "
       "optimizer, h2d, allreduce)"},
      {"STEPSCOPE_PHASE scopes", "torch.profiler.record_function(\"...\") ranges"},
      {"STEPSCOPE_PHASE", "torch.profiler.record_function"},
      {"Run more steps (past the warm-up)",
       "Profile more steps (torch.profiler.schedule(wait=1, warmup=1, active=N) and prof.step() every iteration)"},
  };
  auto rewrite = [](std::string& text) {
    for (const auto& [from, to] : kPhrases) {
      const std::string needle = from;
      for (std::size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + std::strlen(to)))
        text.replace(at, needle.size(), to);
    }
  };
  rewrite(r.bottleneck.summary);
  for (auto& e : r.bottleneck.evidence) rewrite(e.sentence);
  for (auto& advice : r.bottleneck.recommendations) rewrite(advice);
  for (auto& f : r.findings) rewrite(f.message);
  for (auto& w : r.warnings) rewrite(w);
}

}  // namespace v1
}  // namespace stepscope

// src/analysis/advice_wording.cpp — the analyzer's advice in the language of
// the report's source: an imported PyTorch trace gets torch.profiler's words,
// a run driven by the Python package gets the package's.
// Here, not in src/import, because analyze() calls it last (so a re-analysed
// report keeps the wording) and the analyzer includes nothing above it.
#include <stepscope/analysis.hpp>

#include <cstring>
#include <string>
#include <utility>

namespace stepscope {
inline namespace v1 {

namespace {

// Rewrites every piece of text the user reads, in place.
template <std::size_t N>
void rewrite_all(Report& r, const std::pair<const char*, const char*> (&phrases)[N]) {
  auto rewrite = [&phrases](std::string& text) {
    for (const auto& [from, to] : phrases) {
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

// Python's spellings of the C++ calls the advice names.
void reword_for_python(Report& r) {
  static const std::pair<const char*, const char*> kPhrases[] = {
      {"STEPSCOPE_PHASE scopes with a kind (input, compute, memory, communication)",
       "`with stepscope.phase(\"...\", kind=...)` blocks (kind input, compute, memory, communication)"},
      {"STEPSCOPE_PHASE scopes", "`with stepscope.phase(\"...\")` blocks"},
      {"STEPSCOPE_PHASE", "stepscope.phase"},
      {"Iterate stepscope::steps(loader)", "Iterate stepscope.torch.steps(loader)"},
      {"stepscope::steps(loader)", "stepscope.torch.steps(loader)"},
      {"stepscope::next_step()", "stepscope.next_step()"},
      {"stepscope::note_collectives", "stepscope.note_collectives"},
      {"STEPSCOPE_STEP()", "`with stepscope.step():`"},
      {"intra-op threads x loader workers", "torch.set_num_threads() x DataLoader num_workers"},
      {"set intra-op threads to the physical cores", "torch.set_num_threads() to the physical cores"},
  };
  rewrite_all(r, kPhrases);
}

// An imported trace came from a Python training loop, where the advice is a
// torch.profiler.record_function range.
void reword_for_trace(Report& r) {
  static const std::pair<const char*, const char*> kPhrases[] = {
      {"STEPSCOPE_PHASE scopes with a kind (input, compute, memory, communication)",
       "torch.profiler.record_function(\"...\") ranges named after what they do (data, forward, backward, "
       "optimizer, h2d, allreduce)"},
      {"STEPSCOPE_PHASE scopes", "torch.profiler.record_function(\"...\") ranges"},
      {"STEPSCOPE_PHASE", "torch.profiler.record_function"},
      {"Run more steps (past the warm-up)",
       "Profile more steps (torch.profiler.schedule(wait=1, warmup=1, active=N) and prof.step() every iteration)"},
  };
  rewrite_all(r, kPhrases);
}

}  // namespace

// (Declared in <stepscope/analysis.hpp>.) The analyzer words its advice for
// code that links stepscope (STEPSCOPE_PHASE). A merged job reads as its
// ranks: imported traces (the trace clock) or a Python run (the frontend).
void reword_advice(Report& r) {
  const bool merged = r.run.source == "merge";
  if (r.run.source == "kineto-import" || (merged && r.run.clock_source == "trace")) {
    reword_for_trace(r);
    return;
  }
  const auto frontend = r.run.build.find("frontend");
  if ((r.run.source == "live" || merged) && frontend != r.run.build.end() && frontend->second == "python")
    reword_for_python(r);
}

}  // namespace v1
}  // namespace stepscope

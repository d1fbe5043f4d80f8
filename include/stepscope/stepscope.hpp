// stepscope/stepscope.hpp — measure what holds a training step back.
//
//   #include <stepscope/stepscope.hpp>
//
//   int main() {
//     stepscope::set_config("batch_size", 64);
//     for (auto& batch : stepscope::steps(*loader)) {  // one step per batch; the fetch is its "data" phase
//       { STEPSCOPE_PHASE("forward");   loss = model.forward(batch); }
//       { STEPSCOPE_PHASE("backward");  loss.backward(); }
//       { STEPSCOPE_PHASE("optimizer"); opt.step(); }
//     }
//   }  // at exit: stepscope-report.json + a summary table with the verdict on stderr
//
// Loops that are not a range-for mark their steps with a scope or a call:
//
//   for (int i = 0; i < steps; ++i) {
//     STEPSCOPE_STEP();                                   // the step is this scope
//     { STEPSCOPE_PHASE("data"); batch = next_batch(); }  // fetch inside it, so it is counted
//     ...
//   }
//   while (queue.pop(batch)) { stepscope::next_step(); ... }  // ends the last step, opens the next
//
// A range-for with STEPSCOPE_STEP() in its body misses the fetch in the loop
// header; the report's steps.coverage and the steps_coverage finding say so.
//
// Environment: STEPSCOPE=0 disables at run time; STEPSCOPE_OUT=path (with an
// optional {rank}); STEPSCOPE_WARMUP=N steps left out of the statistics.
// Compile time: STEPSCOPE_ENABLE=0 (CMake option STEPSCOPE_ENABLE=OFF) makes
// the macros expand to nothing while the functions below still link.
#pragma once

#include <stepscope/export.hpp>
#include <stepscope/report.hpp>
#include <stepscope/version.hpp>

#include <cstdint>
#include <string>

#ifndef STEPSCOPE_ENABLE
#define STEPSCOPE_ENABLE 1
#endif

// The scope classes compile either way; only the macros vanish when disabled.
#include <stepscope/phase.hpp>
// steps(range) and next_step(): step boundaries the way loops are written.
#include <stepscope/steps.hpp>
// site(name): phases named at run time (stepscope::ScopedPhase p{site}).
#include <stepscope/site.hpp>

namespace stepscope {
inline namespace v1 {

// Records one setting of the run in the report's run.config, so two reports
// can be compared ("change one variable at a time"). Thread-safe, cold path.
STEPSCOPE_API void set_config(const std::string& key, const std::string& value) noexcept;
STEPSCOPE_API void set_config(const std::string& key, const char* value) noexcept;
STEPSCOPE_API void set_config(const std::string& key, double value) noexcept;
inline void set_config(const std::string& key, int value) noexcept {
  set_config(key, static_cast<double>(value));
}
inline void set_config(const std::string& key, long value) noexcept {
  set_config(key, static_cast<double>(value));
}
inline void set_config(const std::string& key, long long value) noexcept {
  set_config(key, static_cast<double>(value));
}
inline void set_config(const std::string& key, unsigned value) noexcept {
  set_config(key, static_cast<double>(value));
}
inline void set_config(const std::string& key, unsigned long value) noexcept {
  set_config(key, static_cast<double>(value));
}

// Collectives a step ran (all-reduces, broadcasts...) and the bytes they
// moved, noted once per step or per backward pass: the communication advice
// tells a collective too small for bandwidth to matter (its latency is the
// cost: all-reduce less often) from one whose volume is (fp16 gradients,
// compression). stepscope.torch notes a DDP model's gradient buckets itself.
// Thread-safe, lock-free.
STEPSCOPE_API void note_collectives(std::uint64_t count, std::uint64_t bytes) noexcept;

// For a language binding that drives the run (the Python package calls
// set_frontend("python") when it loads): recorded as run.build["frontend"],
// and the analyzer words its advice in that language's calls. Cold path.
STEPSCOPE_API void set_frontend(const char* name) noexcept;

// Stops recording, drains every thread's records, analyses them, writes the
// JSON report and prints the summary. Idempotent: later calls do nothing and
// return the path written first. Called automatically at normal exit.
// Returns the path of the report written ("" when disabled or nothing written).
STEPSCOPE_API std::string finish() noexcept;

// True when stepscope is recording (compiled in, not disabled by STEPSCOPE=0,
// not finished, not in a forked child).
STEPSCOPE_API bool enabled() noexcept;

// A snapshot of the report as it stands now (collector state is drained
// first); the run goes on. Used by tests and the live progress line.
STEPSCOPE_API Report snapshot() noexcept;

// Overrides the rank detected from RANK / OMPI_COMM_WORLD_RANK / PMI_RANK /
// SLURM_PROCID (e.g. after MPI_Init). Call before finish().
STEPSCOPE_API void set_rank(int rank, int world_size) noexcept;

}  // namespace v1
}  // namespace stepscope

// ---- macros ----------------------------------------------------------------

#define STEPSCOPE_DETAIL_CONCAT_INNER(a, b) a##b
#define STEPSCOPE_DETAIL_CONCAT(a, b) STEPSCOPE_DETAIL_CONCAT_INNER(a, b)

#if STEPSCOPE_ENABLE

// Each call site owns one constant-initialised PhaseSite; `name` must be a
// string literal (or another constant expression). __COUNTER__ gives the
// site and the scope object names unique in the enclosing block.
#define STEPSCOPE_DETAIL_SCOPE(type, n, name, kind, is_step)                                                       \
  static constexpr ::stepscope::detail::PhaseSite STEPSCOPE_DETAIL_CONCAT(stepscope_site_, n){name, kind, is_step, \
                                                                                              __FILE__, __LINE__}; \
  ::stepscope::type STEPSCOPE_DETAIL_CONCAT(stepscope_scope_, n) {                                                 \
    &STEPSCOPE_DETAIL_CONCAT(stepscope_site_, n)                                                                   \
  }

#define STEPSCOPE_PHASE_KIND(name, kind) STEPSCOPE_DETAIL_SCOPE(ScopedPhase, __COUNTER__, name, kind, false)
#define STEPSCOPE_PHASE(name) STEPSCOPE_PHASE_KIND(name, ::stepscope::default_phase_kind(name))
#define STEPSCOPE_STEP() STEPSCOPE_DETAIL_SCOPE(ScopedStep, __COUNTER__, "step", ::stepscope::PhaseKind::other, true)

#else  // STEPSCOPE_ENABLE

#define STEPSCOPE_PHASE_KIND(name, kind) static_cast<void>(0)
#define STEPSCOPE_PHASE(name) static_cast<void>(0)
#define STEPSCOPE_STEP() static_cast<void>(0)

#endif  // STEPSCOPE_ENABLE

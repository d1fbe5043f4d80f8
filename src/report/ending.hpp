// src/report/ending.hpp (not installed) — how a run and its steps ended, in
// words, for the summary and the HTML page: a snapshot (the run never ended by itself), a
// merge of snapshots, a signal that ended the run, a signal the program
// caught, an uncaught exception. Empty for a run that ended by itself.
// Never throws.
#pragma once

#include <stepscope/report.hpp>

#include <string>
#include <vector>

namespace stepscope {
inline namespace v1 {
namespace detail {

std::vector<std::string> run_ending_notes(const Report& r) noexcept;

// The steps left out of the statistics besides warm-up, in words: steps no
// next call ended, steps that held steps (loops of steps), next_step() calls
// that did nothing. Empty when there are none.
std::vector<std::string> steps_left_out_notes(const StepStats& s) noexcept;

// "type: message" ("type" when there is no message), printable (text/printable.hpp).
std::string exception_text(const Report::UncaughtException& e);

}  // namespace detail
}  // namespace v1
}  // namespace stepscope

// src/report/ending.hpp (not installed) — how a run ended, in words, for the
// summary and the HTML page: a snapshot (the run never ended by itself), a
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

// "type: message" ("type" when there is no message), printable (text/printable.hpp).
std::string exception_text(const Report::UncaughtException& e);

}  // namespace detail
}  // namespace v1
}  // namespace stepscope

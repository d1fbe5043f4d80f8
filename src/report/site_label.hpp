// src/report/site_label.hpp (not installed) — a phase's call site in words,
// for the summary and the HTML page. A C++ site is its file:line; the two
// sites that are not a place in a file say what they are: the phases Python
// (stepscope.phase()) or stepscope::site() named at run time, and the
// steps() loop / next_step() called from Python (its fetch is the step's
// data phase). A user who names a phase "data" and also loops with steps()
// sees both under one phase: these words tell them apart.
#pragma once

#include "text/printable.hpp"

#include <stepscope/report.hpp>
#include <stepscope/site.hpp>

#include <string>

namespace stepscope {
inline namespace v1 {
namespace detail {

inline std::string call_site_label(const PhaseCallSite& site) {
  if (site.file == kRuntimeSiteFile) return "stepscope.phase() / stepscope::site() (named at run time)";
  if (site.file == "(python)") return "the steps() loop's fetch / next_step() (Python)";  // python/src/module.cpp
  if (site.file == "(other call sites)") return site.file;
  return printable(site.file) + ":" + std::to_string(site.line);  // from a report file: made safe to print
}

}  // namespace detail
}  // namespace v1
}  // namespace stepscope

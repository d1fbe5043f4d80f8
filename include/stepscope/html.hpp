// stepscope/html.hpp — a report as one self-contained HTML page.
//
//   stepscope::Report report;
//   std::string error;
//   if (stepscope::load_report("stepscope-report.json", report, error) &&
//       stepscope::write_html_report(report, "report.html", error)) { ... }
//
// The page needs no network: CSS, charts (inline SVG) and the few lines of
// script it has are all inside the file, so it can be attached to a ticket or
// opened on an air-gapped cluster. It shows the verdict with its evidence
// first, then the step breakdown over the run, per-phase distributions, the
// what-if projections, findings, warnings and dropped records, and the run's
// configuration. Every text from the report (phase names, config values) is
// HTML-escaped: they come from users.
#pragma once

#include <stepscope/export.hpp>
#include <stepscope/report.hpp>

#include <string>

namespace stepscope {
inline namespace v1 {

// The page as a string. Never throws (out of memory gives a minimal page).
STEPSCOPE_API std::string html_report(const Report& report);

// Writes html_report() to `path` (temporary file + rename). False with `error`
// set to the reason ("No space left on device"; the caller names the path).
STEPSCOPE_API bool write_html_report(const Report& report, const std::string& path, std::string& error);

}  // namespace v1
}  // namespace stepscope

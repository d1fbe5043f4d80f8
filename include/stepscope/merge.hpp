// stepscope/merge.hpp — one job report from the reports of its ranks.
//
//   std::vector<stepscope::Report> ranks(world);
//   std::string error;
//   for (int r = 0; r < world; ++r)
//     if (!stepscope::load_report("stepscope-report.rank" + std::to_string(r) + ".json", ranks[r], error)) ...
//   stepscope::Report job = stepscope::merge_reports(ranks, error);
//   if (job.ranks) std::cout << stepscope::format_multi_rank(job);  // stragglers, waiting, imbalance
//
// The merged report carries the job-level facts (per-kind means over ranks,
// merged phase distributions) plus the `ranks` section: per rank, per phase
// and per step the min / median / max across ranks and which rank holds them,
// load imbalance, stragglers (robust statistics, chronic vs one-off), and
// communication split into the collective itself and waiting for the slowest
// rank. Its verdict (`bottleneck`) is the analyzer's on the merged facts,
// explained by the straggler evidence. Semantics: docs/multi-rank.md.
#pragma once

#include <stepscope/export.hpp>
#include <stepscope/report.hpp>

#include <string>
#include <vector>

namespace stepscope {
inline namespace v1 {

// Merges the reports of one job's ranks (any order). On failure (no reports,
// a report that is already a merge, different schema versions) returns an
// empty Report and sets `error`. Never throws. Time and memory are linear in
// ranks x (phases + step points): 1024 ranks merge in well under a second
// (docs/benchmarks-merge.md).
STEPSCOPE_API Report merge_reports(const std::vector<Report>& ranks, std::string& error);

// The same from the ranks' reports as JSON texts (what each rank sent over
// the job's transport: MPI, torch.distributed), texts[r] from rank r ("":
// that rank sent nothing). An unreadable text is left out with a warning in
// the job's `warnings`; a report without a rank takes r; each report's
// world_size becomes texts.size(). Never throws.
STEPSCOPE_API Report merge_report_texts(const std::vector<std::string>& texts, std::string& error);

// Writes a job report as each rank's own report is written: a job report
// that another job wrote to `path` while this process ran is not replaced
// (this one goes to <name>.pid<N>.json instead, with a warning in it and on
// stderr). `{pid}` in `path` is this process's id. Returns the path written;
// "" with `error` set on failure.
STEPSCOPE_API std::string write_job_report(Report& job, const std::string& path, std::string& error) noexcept;

// What the rank that merged a job prints: the table below, the job verdict
// and where the job report was written.
STEPSCOPE_API std::string format_job_written(const Report& merged, const std::string& path);

// A short human table of a merged report's `ranks` section: imbalance,
// communication split, stragglers and the slowest ranks ("" when absent).
STEPSCOPE_API std::string format_multi_rank(const Report& merged);

}  // namespace v1
}  // namespace stepscope

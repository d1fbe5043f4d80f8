// src/merge/merge_texts.cpp — a job report from the ranks' reports as JSON
// texts: what a rank hands to the merging rank over the job's own transport
// (src/mpi/mpi_gather.cpp over MPI, the Python package over torch.distributed).
#include <stepscope/merge.hpp>

#include <fmt/format.h>

#include <string>
#include <vector>

namespace stepscope {
inline namespace v1 {

Report merge_report_texts(const std::vector<std::string>& texts, std::string& error) {
  try {
    const int world = static_cast<int>(texts.size());
    std::vector<Report> reports;
    reports.reserve(texts.size());
    std::vector<std::string> unreadable;
    for (int r = 0; r < world; ++r) {
      const std::string& text = texts[static_cast<std::size_t>(r)];
      if (text.empty()) continue;
      Report one;
      std::string why;
      if (!report_from_json(text, one, why)) {
        unreadable.push_back(fmt::format("rank {} sent an unreadable report ({}); left out", r, why));
        continue;
      }
      if (one.run.rank < 0) one.run.rank = r;
      one.run.world_size = world;
      reports.push_back(std::move(one));
    }
    Report job = merge_reports(reports, error);
    if (job.ranks) job.warnings.insert(job.warnings.end(), unreadable.begin(), unreadable.end());
    return job;
  } catch (const std::exception& e) {
    error = std::string("merge failed: ") + e.what();
  } catch (...) {
    error = "merge failed";
  }
  return Report{};
}

std::string format_job_written(const Report& merged, const std::string& path) {
  std::string text = format_multi_rank(merged);
  text += "job verdict: " + merged.bottleneck.summary + "\n";
  text += "stepscope: merged job report written to " + path + "\n";
  return text;
}

}  // namespace v1
}  // namespace stepscope

// src/mpi/mpi_gather.cpp — gather every rank's report to one rank and merge.
#include <stepscope/merge.hpp>
#include <stepscope/mpi.hpp>
#include <stepscope/stepscope.hpp>

#include "run/runtime.hpp"  // run_settings(): the environment as the run time read it

#include <climits>
#include <cstdio>
#include <string>
#include <vector>

namespace stepscope {
inline namespace v1 {
namespace mpi {
namespace {

// This rank's final report: the one finish() wrote (exactly what is on
// disk), or a snapshot when nothing was written (disabled, unwritable path).
Report final_report() {
  const std::string path = finish();
  Report report;
  std::string error;
  if (!path.empty() && load_report(path, report, error)) return report;
  return snapshot();
}

}  // namespace

std::string finish_and_gather(MPI_Comm comm, const std::string& merged_path, int root) noexcept {
  try {
    int rank = 0, world = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &world);
    if (root < 0 || root >= world) root = 0;

    // Compact JSON: a rank's report is tens to hundreds of KiB.
    const std::string json = report_to_json(final_report(), -1);
    int size = json.size() > static_cast<std::size_t>(INT_MAX) ? 0 : static_cast<int>(json.size());

    std::vector<int> sizes(rank == root ? static_cast<std::size_t>(world) : 0);
    MPI_Gather(&size, 1, MPI_INT, sizes.data(), 1, MPI_INT, root, comm);
    std::vector<int> offsets;
    std::vector<char> all;
    bool fits = true;
    if (rank == root) {
      offsets.resize(static_cast<std::size_t>(world));
      long long total = 0;
      for (int r = 0; r < world; ++r) {
        offsets[static_cast<std::size_t>(r)] = static_cast<int>(total);
        total += sizes[static_cast<std::size_t>(r)];
        if (total > INT_MAX) fits = false;  // MPI_Gatherv displacements are int
      }
      if (!fits) {
        // Still take part in the collective, receiving nothing.
        for (int r = 0; r < world; ++r)
          sizes[static_cast<std::size_t>(r)] = 0, offsets[static_cast<std::size_t>(r)] = 0;
        total = 0;
      }
      all.resize(static_cast<std::size_t>(total) + 1);
    }
    // Every rank learns whether the root can receive (so none sends into a
    // buffer that is not there).
    int ok = fits ? 1 : 0;
    MPI_Bcast(&ok, 1, MPI_INT, root, comm);
    if (!ok) size = 0;
    MPI_Gatherv(json.data(), size, MPI_CHAR, all.data(), sizes.data(), offsets.data(), MPI_CHAR, root, comm);
    if (rank != root) return "";
    if (!ok) {
      std::fprintf(stderr, "stepscope: warning: the ranks' reports exceed 2 GiB together; not merged over MPI\n");
      return "";
    }

    std::vector<std::string> texts(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) {
      const int n = sizes[static_cast<std::size_t>(r)];
      if (n > 0)
        texts[static_cast<std::size_t>(r)].assign(all.data() + offsets[static_cast<std::size_t>(r)],
                                                  static_cast<std::size_t>(n));
    }
    all.clear();
    all.shrink_to_fit();
    std::string error;
    Report job = merge_report_texts(texts, error);
    if (!job.ranks) {
      std::fprintf(stderr, "stepscope: warning: cannot merge the ranks' reports: %s\n", error.c_str());
      return "";
    }
    const detail::Settings settings = detail::run_settings();
    std::string path = merged_path;
    if (path.empty()) path = settings.merged_out.empty() ? "stepscope-report.merged.json" : settings.merged_out;
    const std::string written = write_job_report(job, path, error);
    if (written.empty()) {
      std::fprintf(stderr, "stepscope: warning: cannot write the merged report to '%s': %s\n", path.c_str(),
                   error.c_str());
      return "";
    }
    if (!settings.quiet) std::fputs(format_job_written(job, written).c_str(), stderr);
    return written;
  } catch (...) {
    std::fputs("stepscope: warning: gathering the ranks' reports failed\n", stderr);
    return "";
  }
}

}  // namespace mpi
}  // namespace v1
}  // namespace stepscope

// stepscope/mpi.hpp — live aggregation of a multi-rank job through MPI.
//
// Optional component, built when MPI is found; the only stepscope header that
// includes <mpi.h>. In CMake:
//   find_package(stepscope CONFIG REQUIRED COMPONENTS mpi)
//   target_link_libraries(app PRIVATE stepscope::mpi)
//
//   MPI_Init(&argc, &argv);
//   int rank, world;
//   MPI_Comm_rank(MPI_COMM_WORLD, &rank);
//   MPI_Comm_size(MPI_COMM_WORLD, &world);
//   stepscope::set_rank(rank, world);
//   ... training loop with STEPSCOPE_STEP / STEPSCOPE_PHASE ...
//   stepscope::mpi::finish_and_gather(MPI_COMM_WORLD);  // every rank calls it
//   MPI_Finalize();
//
// Every rank finishes (writes its own report as usual), serialises it and
// sends it to `root` (MPI_Gather of the sizes, MPI_Gatherv of the JSON), so no
// shared file system is needed; `root` merges them (merge_reports) and writes
// the job report. Collective: every rank of `comm` must call it.
#pragma once

#include <stepscope/export.hpp>

#include <mpi.h>

#include <string>

namespace stepscope {
inline namespace v1 {
namespace mpi {

// Returns, on `root`, the path of the merged job report ("" on failure, with
// a warning on stderr) and "" on the other ranks. `merged_path` "" means
// STEPSCOPE_MERGED_OUT, else "stepscope-report.merged.json". Never throws;
// MPI errors follow the communicator's error handler.
STEPSCOPE_API std::string finish_and_gather(MPI_Comm comm, const std::string& merged_path = "", int root = 0) noexcept;

}  // namespace mpi
}  // namespace v1
}  // namespace stepscope

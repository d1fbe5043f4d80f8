// The MPI component as a user gets it from an installed stepscope:
// find_package(stepscope CONFIG REQUIRED COMPONENTS mpi) and stepscope::mpi.
// Runs as a one-rank job (MPI singleton): records steps, gathers to rank 0
// and checks that the merged job report loads back.
#include <stepscope/mpi.hpp>
#include <stepscope/stepscope.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  stepscope::set_rank(rank, world);
  for (int i = 0; i < 30; ++i) {
    STEPSCOPE_STEP();
    {
      STEPSCOPE_PHASE("forward");
      std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
    {
      STEPSCOPE_PHASE("allreduce");
      MPI_Barrier(MPI_COMM_WORLD);
    }
  }
  const std::string merged = stepscope::mpi::finish_and_gather(MPI_COMM_WORLD, "merged.json");
  int ok = 1;
  if (rank == 0) {
    stepscope::Report report;
    std::string error;
    ok = !merged.empty() && stepscope::load_report(merged, report, error) && report.steps.count == 25;
    std::printf("mpi consumer: merged report '%s' (%s), %llu steps, world %d\n", merged.c_str(),
                ok ? "ok" : error.c_str(), static_cast<unsigned long long>(report.steps.count), world);
  }
  MPI_Finalize();
  return ok ? 0 : 1;
}

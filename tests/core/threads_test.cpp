#include "core/threads.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <Eigen/Core>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace ringstep {
namespace {

TEST(Threads, ExplicitRequestWins) {
  EXPECT_EQ(resolve_threads(3, 8, 16), 3);
  EXPECT_EQ(resolve_threads(64, 1, 2), 64);
}

TEST(Threads, AutoSplitsCoresBetweenLocalRanks) {
  EXPECT_EQ(resolve_threads(0, 1, 16), 16);
  EXPECT_EQ(resolve_threads(0, 4, 16), 4);
  EXPECT_EQ(resolve_threads(0, 3, 16), 5);
  EXPECT_EQ(resolve_threads(0, 32, 16), 1);  // more ranks than cores: still one thread
  EXPECT_EQ(resolve_threads(0, 0, 16), 16);  // a nonsense rank count counts as one
  EXPECT_EQ(resolve_threads(0, 1), hardware_threads());
  EXPECT_GE(hardware_threads(), 1);
}

TEST(Threads, NegativeRequestIsInputError) { EXPECT_THROW(resolve_threads(-1, 1, 16), InputError); }

TEST(Threads, LocalRankCountFromEnvironment) {
  const char* vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"};
  for (const char* var : vars) unsetenv(var);
  EXPECT_EQ(local_rank_count(), 1);
  setenv("SLURM_NTASKS_PER_NODE", "2(x3)", 1);
  EXPECT_EQ(local_rank_count(), 2);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
  EXPECT_EQ(local_rank_count(), 4);  // Open MPI's own count takes precedence
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "junk", 1);
  EXPECT_EQ(local_rank_count(), 2);
  for (const char* var : vars) unsetenv(var);
}

// A rank has a spare core where its share of this process's CPUs (split between the local
// ranks, as auto splits them) exceeds its compute threads.
TEST(Threads, SpareCoreIsTheRanksShareOfTheCpusBeyondItsThreads) {
  const char* vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"};
  for (const char* var : vars) unsetenv(var);
  const int cpus = hardware_threads();
  EXPECT_EQ(rank_has_spare_core(1), cpus > 1);
  EXPECT_FALSE(rank_has_spare_core(cpus));
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(cpus).c_str(), 1);
  EXPECT_FALSE(rank_has_spare_core(1)) << "one CPU per rank: none to spare";
  for (const char* var : vars) unsetenv(var);
}

// A rank's index on its node (which GPU a cuda rank takes): 0 is a valid index, junk is not.
TEST(Threads, LocalRankFromEnvironment) {
  const char* vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"};
  for (const char* var : vars) unsetenv(var);
  EXPECT_EQ(local_rank(), 0);
  setenv("SLURM_LOCALID", "3", 1);
  EXPECT_EQ(local_rank(), 3);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
  EXPECT_EQ(local_rank(), 0);  // Open MPI's takes precedence, and 0 counts
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "junk", 1);
  EXPECT_EQ(local_rank(), 3);
  for (const char* var : vars) unsetenv(var);
}

// The job's rank and size before MPI starts (`train --dry-run`): Open MPI's, then MPICH's
// PMI, then Slurm's; a size of 0 or junk is no size.
TEST(Threads, LauncherRankAndWorldSizeFromEnvironment) {
  const char* vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID",
                        "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"};
  for (const char* var : vars) unsetenv(var);
  EXPECT_EQ(launcher_rank(), 0);
  EXPECT_EQ(launcher_world_size(), 1);
  setenv("SLURM_PROCID", "5", 1);
  setenv("SLURM_NTASKS", "16", 1);
  EXPECT_EQ(launcher_rank(), 5);
  EXPECT_EQ(launcher_world_size(), 16);
  setenv("PMI_RANK", "2", 1);
  setenv("PMI_SIZE", "0", 1);
  EXPECT_EQ(launcher_rank(), 2);
  EXPECT_EQ(launcher_world_size(), 16);
  setenv("OMPI_COMM_WORLD_RANK", "0", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  EXPECT_EQ(launcher_rank(), 0);
  EXPECT_EQ(launcher_world_size(), 4);
  for (const char* var : vars) unsetenv(var);
}

TEST(Threads, SetComputeThreadsReachesOpenMpAndEigen) {
  const int omp_before = omp_get_max_threads();
  const int eigen_before = Eigen::nbThreads();
  set_compute_threads(2);
  EXPECT_EQ(omp_get_max_threads(), 2);
  EXPECT_EQ(Eigen::nbThreads(), 2);
  omp_set_num_threads(omp_before);
  Eigen::setNbThreads(eigen_before);
}

}  // namespace
}  // namespace ringstep

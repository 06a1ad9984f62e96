// The launcher's environment -> rank, world, local rank and size (core/base/launch_env.hpp).
#include <cstdint>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "core/base/launch_env.hpp"

namespace shardcast::core {
namespace {

LaunchEnv fromMap(const std::map<std::string, std::string>& vars) {
    return launchEnv([&](std::string_view name) -> std::optional<std::string> {
        const auto found = vars.find(std::string(name));
        if (found == vars.end()) return std::nullopt;
        return found->second;
    });
}

void expectEnv(const LaunchEnv& e, Launcher launcher, int64_t rank, int64_t world, int64_t local_rank, int64_t local_size) {
    EXPECT_EQ(e.launcher, launcher);
    EXPECT_EQ(e.rank, rank);
    EXPECT_EQ(e.world_size, world);
    EXPECT_EQ(e.local_rank, local_rank);
    EXPECT_EQ(e.local_size, local_size);
}

TEST(LaunchEnvTest, NoLauncherIsAWorldOfOne) {
    const LaunchEnv e = fromMap({{"HOME", "/root"}});
    EXPECT_FALSE(e.launched());
    expectEnv(e, Launcher::None, 0, 1, 0, 1);
}

TEST(LaunchEnvTest, MpirunVariables) {
    const LaunchEnv e = fromMap({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "16"},
                                 {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
    expectEnv(e, Launcher::Mpirun, 5, 16, 1, 4);
}

// srun -N 2 -n 16 --ntasks-per-node 8: global rank 11 is task 3 of the second node.
TEST(LaunchEnvTest, SrunVariables) {
    const LaunchEnv e = fromMap({{"SLURM_PROCID", "11"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "3"},
                                 {"SLURM_NODEID", "1"}, {"SLURM_TASKS_PER_NODE", "8(x2)"}});
    expectEnv(e, Launcher::Srun, 11, 16, 3, 8);
}

TEST(LaunchEnvTest, SrunStepCountsWinOverTheAllocations) {
    const LaunchEnv e = fromMap({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "32"}, {"SLURM_STEP_NUM_TASKS", "4"},
                                 {"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "0"}, {"SLURM_TASKS_PER_NODE", "16(x2)"},
                                 {"SLURM_STEP_TASKS_PER_NODE", "4"}});
    EXPECT_EQ(e.world_size, 4);
    EXPECT_EQ(e.local_size, 4);
}

TEST(LaunchEnvTest, MpirunWinsInsideASlurmAllocation) {
    const LaunchEnv e = fromMap({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_LOCALID", "0"},
                                 {"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "8"}});
    EXPECT_EQ(e.launcher, Launcher::Mpirun);
    EXPECT_EQ(e.rank, 2);
    EXPECT_EQ(e.world_size, 8);
}

TEST(LaunchEnvTest, PartialOrMalformedSlurmVariablesAreNoLauncher) {
    EXPECT_FALSE(fromMap({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}}).launched());  // no SLURM_LOCALID
    EXPECT_FALSE(fromMap({{"SLURM_PROCID", "x"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "0"}}).launched());
}

TEST(LaunchEnvTest, UnknownTasksPerNodeGivesAtLeastTheRanksUpToThisOne) {
    const LaunchEnv e = fromMap({{"SLURM_PROCID", "6"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "2"}});
    EXPECT_EQ(e.local_size, 3);
}

TEST(LaunchEnvTest, SlurmTasksPerNode) {
    EXPECT_EQ(parseSlurmTasksPerNode("2(x3),1"), (std::vector<int64_t>{2, 2, 2, 1}));
    EXPECT_EQ(parseSlurmTasksPerNode("8"), (std::vector<int64_t>{8}));
    EXPECT_EQ(parseSlurmTasksPerNode("4,2(x2)"), (std::vector<int64_t>{4, 2, 2}));
    EXPECT_TRUE(parseSlurmTasksPerNode("2(x").empty());
    EXPECT_TRUE(parseSlurmTasksPerNode("a,2").empty());
}

}  // namespace
}  // namespace shardcast::core

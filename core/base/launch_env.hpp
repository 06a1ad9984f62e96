#pragma once
// Who this process is in a job of one process per rank, from its launcher's environment:
// OpenMPI's mpirun (OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK / _LOCAL_SIZE) or Slurm's srun
// (SLURM_PROCID, SLURM_STEP_NUM_TASKS or SLURM_NTASKS, SLURM_LOCALID, and the node's task count
// from SLURM_STEP_TASKS_PER_NODE or SLURM_TASKS_PER_NODE at SLURM_NODEID; srun(1) "OUTPUT
// ENVIRONMENT VARIABLES"). mpirun's variables win when both are set (mpirun inside a Slurm
// allocation). A pure function of the lookup, so it is tested without a launcher.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardcast::core {

enum class Launcher { None, Mpirun, Srun };

struct LaunchEnv {
    Launcher launcher = Launcher::None;  // None: a world of one process
    int64_t rank = 0;                    // world rank
    int64_t world_size = 1;
    int64_t local_rank = 0;              // rank on this machine: the GPU this process drives
    int64_t local_size = 1;              // processes on this machine
    bool launched() const { return launcher != Launcher::None; }
};

// An environment variable's value, nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(std::string_view name)>;

LaunchEnv launchEnv(const EnvLookup& env);
LaunchEnv processLaunchEnv();  // launchEnv over this process's environment (getenv)
std::string_view launcherName(Launcher launcher);  // "none", "mpirun", "srun"

// Slurm's compressed task counts per node, e.g. "2(x3),1" -> {2, 2, 2, 1}; empty when malformed.
std::vector<int64_t> parseSlurmTasksPerNode(std::string_view text);

}  // namespace shardcast::core

#pragma once
// One registration function per subcommand. Each adds its subcommand to the app; when the
// subcommand runs, it stores the process exit code in `exit_code`.
#include <cstdint>
#include <optional>
#include <string_view>

namespace CLI {
class App;
}

namespace shardcast::cli {

constexpr int kExitOk = 0;
constexpr int kExitRuntimeFailure = 1;
constexpr int kExitBadInput = 2;

// Prints "shardcast: error: MESSAGE" as exactly one line on stderr; returns kExitBadInput.
int reportInputError(std::string_view message);

// Whether progress may be drawn on stderr: it is a terminal. Under mpirun a rank's stderr is a
// pipe to mpirun whatever mpirun's is; scripts/mpirun.sh says in SHARDCAST_STDERR_IS_TTY whether
// its own stderr is a terminal.
bool stderrIsTerminal();

// An integer environment variable; empty when unset, empty or not an integer.
std::optional<int64_t> envInt(const char* name);

// Under mpirun, what a rank other than 0 returns where rank 0 reports an error before MPI starts:
// 0, so that it is never the job's first non-zero exit. mpirun aborts the job at the first rank
// that exits non-zero, which could kill rank 0 before its message is out; the job's exit status is
// still rank 0's.
constexpr int kOtherRankExit = kExitOk;

// Bad input seen by every rank of an mpirun / srun job before MPI starts: rank 0 (by the
// launcher's environment, core/base/launch_env.hpp; 0 without a launcher) reports it and returns kExitBadInput, the others return kOtherRankExit quietly,
// so the user reads one line however many ranks were started.
int rankZeroInputError(std::string_view message);

// `--backend cuda` on a machine without a usable GPU or driver (`why`: CUDA's error): one line on
// stderr, the same for every command; returns kExitRuntimeFailure.
int reportNoUsableGpu(std::string_view why);

// In `shardcast` (built without the CUDA backend): replaces this process with `shardcast-cuda`
// beside it, same command line and PID (so an mpirun / srun rank stays that rank). Returns only on
// failure, with the exit code (2: no shardcast-cuda was built). Not defined in `shardcast-cuda`.
int execCudaBinary();

// What to do for the CPU backend: install MPI and Eigen, rebuild, launch under mpirun (`command`:
// "run", "calibrate --backend cpu").
std::string installMpiHint(std::string_view command);

void registerPlanCommand(CLI::App& app, int& exit_code);
void registerModelsCommand(CLI::App& app, int& exit_code);
void registerGpusCommand(CLI::App& app, int& exit_code);
void registerSimulateCommand(CLI::App& app, int& exit_code);
void registerSweepCommand(CLI::App& app, int& exit_code);
void registerSearchCommand(CLI::App& app, int& exit_code);
void registerOptimizeCommand(CLI::App& app, int& exit_code);
void registerCompareCommand(CLI::App& app, int& exit_code);
void registerRunCommand(CLI::App& app, int& exit_code);
void registerCalibrateCommand(CLI::App& app, int& exit_code);
void registerDbCommand(CLI::App& app, int& exit_code);

}  // namespace shardcast::cli

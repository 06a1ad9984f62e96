#pragma once
// One registration function per subcommand. Each adds its subcommand to the app; when the
// subcommand runs, it stores the process exit code in `exit_code`.
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

void registerPlanCommand(CLI::App& app, int& exit_code);
void registerModelsCommand(CLI::App& app, int& exit_code);
void registerGpusCommand(CLI::App& app, int& exit_code);
void registerSimulateCommand(CLI::App& app, int& exit_code);
void registerSweepCommand(CLI::App& app, int& exit_code);
void registerSearchCommand(CLI::App& app, int& exit_code);
void registerCompareCommand(CLI::App& app, int& exit_code);
void registerRunCommand(CLI::App& app, int& exit_code);
void registerCalibrateCommand(CLI::App& app, int& exit_code);

}  // namespace shardcast::cli

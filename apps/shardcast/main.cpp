// The shardcast command: subcommand dispatch and exit codes (0 ok, 1 runtime failure, 2 bad input).
#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "apps/shardcast/commands.hpp"
#include "apps/shardcast/store_cli.hpp"
#include "apps/shardcast/trace_import_cli.hpp"
#include "core/base/launch_env.hpp"
#include "core/base/version.hpp"

namespace shardcast::cli {

std::optional<int64_t> envInt(const char* name) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    char* end = nullptr;
    const long long x = std::strtoll(v, &end, 10);
    if (end == v || *end != '\0') return std::nullopt;
    return x;
}

int rankZeroInputError(std::string_view message) {
    return core::processLaunchEnv().rank == 0 ? reportInputError(message) : kOtherRankExit;
}

std::string installMpiHint(std::string_view command) {
    return fmt::format("install MPI and Eigen (Debian/Ubuntu: apt-get install libopenmpi-dev openmpi-bin libeigen3-dev), "
                       "rebuild shardcast (cmake finds them and builds the CPU backend), and launch one process per rank "
                       "with `scripts/mpirun.sh -np N shardcast {} ...`",
                       command);
}

int reportNoUsableGpu(std::string_view why) {
    fmt::print(stderr, "shardcast: error: --backend cuda needs a usable NVIDIA GPU and driver, and this process has none: "
                       "{}\n", why);
    return kExitRuntimeFailure;
}

bool stderrIsTerminal() {
    if (const char* told = std::getenv("SHARDCAST_STDERR_IS_TTY"); told != nullptr) return std::string(told) == "1";
    return isatty(STDERR_FILENO) != 0;
}

int reportInputError(std::string_view message) {
    std::string one_line(message);
    for (char& c : one_line) {
        if (c == '\n' || c == '\r') c = ' ';
    }
    fmt::print(stderr, "shardcast: error: {}\n", one_line);
    return kExitBadInput;
}

}  // namespace shardcast::cli

int main(int argc, char** argv) {
    using namespace shardcast::cli;
    CLI::App app{"shardcast: plan PyTorch FSDP / ZeRO sharded training before the run", "shardcast"};
    app.set_version_flag("--version", "shardcast " + std::string(shardcast::core::kShardcastVersion));
    app.require_subcommand(1);
    app.get_formatter()->column_width(36);
    app.footer("Exit codes: 0 ok, 1 runtime failure, 2 bad input. `shardcast COMMAND --help` for details.\n");

    int exit_code = kExitOk;
    try {
        // Registration is inside the try: a clash between two commands' options is a bug that
        // must surface as exit 1 with a message, not as std::terminate.
        registerPlanCommand(app, exit_code);
        registerModelsCommand(app, exit_code);
        registerGpusCommand(app, exit_code);
        registerSimulateCommand(app, exit_code);
        registerSweepCommand(app, exit_code);
        registerSearchCommand(app, exit_code);
        registerOptimizeCommand(app, exit_code);
        registerCompareCommand(app, exit_code);
        registerImportTraceCommand(app, exit_code);
        registerRunCommand(app, exit_code);
        registerCalibrateCommand(app, exit_code);
        registerDbCommand(app, exit_code);
        // Every command reads or writes the store somewhere (--save, --profile NAME, db, compare).
        for (CLI::App* sub : app.get_subcommands({})) addDbOption(*sub);
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        return reportInputError(e.what());
    } catch (const std::exception& e) {
        fmt::print(stderr, "shardcast: internal error: {}\n", e.what());
        return kExitRuntimeFailure;
    } catch (...) {
        fmt::print(stderr, "shardcast: internal error: unknown exception\n");
        return kExitRuntimeFailure;
    }
    return exit_code;
}

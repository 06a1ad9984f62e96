// The CPU backend's commands in a build without MPI and Eigen (cmake found neither): each says
// what to install. Linked instead of backends/run_cpu.cpp and backends/calibrate_cpu.cpp.
#include <string>

#include "apps/shardcast/backends/calibrate_backend.hpp"
#include "apps/shardcast/backends/run_backend.hpp"
#include "apps/shardcast/commands.hpp"

namespace shardcast::cli {

int runOnCpu(const RunOptions&) {
    return reportInputError("this shardcast was built without the MPI CPU backend that `run` needs: " +
                            installMpiHint("run"));
}

int calibrateOnCpu(const CalibrateOptions&) {
    return reportInputError("this shardcast was built without the MPI CPU backend that `calibrate --backend cpu` "
                            "measures: " + installMpiHint("calibrate --backend cpu"));
}

}  // namespace shardcast::cli

#include "core/base/launch_env.hpp"

#include <charconv>
#include <cstdlib>

namespace shardcast::core {
namespace {

std::optional<int64_t> parseInt(std::string_view text) {
    int64_t value = 0;
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
    return value;
}

std::optional<int64_t> intVar(const EnvLookup& env, std::string_view name) {
    const std::optional<std::string> text = env(name);
    if (!text) return std::nullopt;
    return parseInt(*text);
}

}  // namespace

std::vector<int64_t> parseSlurmTasksPerNode(std::string_view text) {
    std::vector<int64_t> out;
    while (!text.empty()) {
        const size_t comma = text.find(',');
        std::string_view item = text.substr(0, comma);
        text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
        int64_t repeat = 1;
        if (const size_t open = item.find("(x"); open != std::string_view::npos) {
            if (item.back() != ')') return {};
            const auto r = parseInt(item.substr(open + 2, item.size() - open - 3));
            if (!r || *r < 1) return {};
            repeat = *r;
            item = item.substr(0, open);
        }
        const auto tasks = parseInt(item);
        if (!tasks || *tasks < 0) return {};
        out.insert(out.end(), static_cast<size_t>(repeat), *tasks);
    }
    return out;
}

LaunchEnv launchEnv(const EnvLookup& env) {
    LaunchEnv e;
    if (const auto size = intVar(env, "OMPI_COMM_WORLD_SIZE")) {
        e.launcher = Launcher::Mpirun;
        e.world_size = *size;
        e.rank = intVar(env, "OMPI_COMM_WORLD_RANK").value_or(0);
        e.local_rank = intVar(env, "OMPI_COMM_WORLD_LOCAL_RANK").value_or(0);
        e.local_size = intVar(env, "OMPI_COMM_WORLD_LOCAL_SIZE").value_or(1);
        return e;
    }
    const auto procid = intVar(env, "SLURM_PROCID");
    // A step's own count first: inside an sbatch script SLURM_NTASKS is the allocation's.
    auto tasks = intVar(env, "SLURM_STEP_NUM_TASKS");
    if (!tasks) tasks = intVar(env, "SLURM_NTASKS");
    const auto localid = intVar(env, "SLURM_LOCALID");
    if (procid && tasks && localid) {
        e.launcher = Launcher::Srun;
        e.rank = *procid;
        e.world_size = *tasks;
        e.local_rank = *localid;
        std::optional<std::string> per_node = env("SLURM_STEP_TASKS_PER_NODE");
        if (!per_node) per_node = env("SLURM_TASKS_PER_NODE");
        const std::vector<int64_t> counts = per_node ? parseSlurmTasksPerNode(*per_node) : std::vector<int64_t>{};
        const int64_t node = intVar(env, "SLURM_NODEID").value_or(0);
        // Unknown: at least the ranks up to this one share the machine.
        e.local_size = node >= 0 && node < static_cast<int64_t>(counts.size()) ? counts[static_cast<size_t>(node)]
                                                                                : e.local_rank + 1;
    }
    return e;
}

LaunchEnv processLaunchEnv() {
    return launchEnv([](std::string_view name) -> std::optional<std::string> {
        const char* value = std::getenv(std::string(name).c_str());
        if (value == nullptr) return std::nullopt;
        return std::string(value);
    });
}

std::string_view launcherName(Launcher launcher) {
    switch (launcher) {
        case Launcher::Mpirun: return "mpirun";
        case Launcher::Srun: return "srun";
        default: return "none";
    }
}

}  // namespace shardcast::core

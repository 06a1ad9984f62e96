#include <cstdio>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/shardcast/commands.hpp"
#include "core/model/model_io.hpp"
#include "core/plan/cluster.hpp"

namespace shardcast::cli {

namespace {

int runModels(bool as_json) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    const std::string row = "{:<20} {:<10} {:>18} {:>10} {:>7} {:>7} {:>7} {:>9} {:>8}\n";
    if (!as_json) {
        fmt::print("Bundled models ({})\n", core::bundledModelsDir().string());
        fmt::print(fmt::runtime(row), "name", "type", "params", "billions", "layers", "hidden", "heads",
                   "kv heads", "vocab");
    }
    for (const std::string& name : core::bundledModelNames()) {
        auto model = core::resolveModel(name);
        if (!model) {
            // A bundled file that does not load is a broken installation, not bad user input.
            fmt::print(stderr, "shardcast: error: {}\n", model.error().message);
            return kExitRuntimeFailure;
        }
        const core::ModelArch& a = model->arch;
        const int64_t params = model->numParams();
        const int64_t layers = a.layers > 0 ? a.layers : static_cast<int64_t>(model->blocks.size());
        if (as_json) {
            list.push_back({{"name", name},
                            {"type", a.model_type},
                            {"params", params},
                            {"layers", layers},
                            {"hidden", a.hidden},
                            {"heads", a.heads},
                            {"kv_heads", a.kv_heads},
                            {"vocab", a.vocab},
                            {"experts", a.experts}});
        } else {
            fmt::print(fmt::runtime(row), name, a.model_type, core::formatCount(params),
                       fmt::format("{:.2f}", static_cast<double>(params) / 1e9), layers, a.hidden, a.heads,
                       a.kv_heads, a.vocab);
        }
    }
    if (as_json) fmt::print("{}\n", list.dump(2));
    return kExitOk;
}

int runGpus(bool as_json) {
    if (as_json) {
        nlohmann::json list = nlohmann::json::array();
        for (const core::GpuSpec& g : core::gpuPresets()) list.push_back(core::gpuToJson(g));
        fmt::print("{}\n", list.dump(2));
        return kExitOk;
    }
    const std::string row = "{:<12} {:>12} {:>16} {:>10} {:>14} {:>15} {:>16}\n";
    fmt::print("GPU presets (names are case-insensitive; GiB = 2^30 bytes, GB = 1e9 bytes)\n");
    fmt::print(fmt::runtime(row), "name", "memory (GiB)", "bf16 (TFLOP/s)", "HBM (TB/s)", "NVLink (GB/s)",
               "network (GB/s)", "host link (GB/s)");
    for (const core::GpuSpec& g : core::gpuPresets()) {
        fmt::print(fmt::runtime(row), g.name,
                   fmt::format("{:.2f}", static_cast<double>(g.memory_bytes) / static_cast<double>(core::kGiB)),
                   fmt::format("{:.1f}", g.peak_flops_bf16 / 1e12), fmt::format("{:.2f}", g.hbm_bytes_per_s / 1e12),
                   fmt::format("{:.0f}", g.nvlink_bytes_per_s / 1e9), fmt::format("{:.1f}", g.network_bytes_per_s / 1e9),
                   fmt::format("{:.1f}", g.host_link_bytes_per_s / 1e9));
    }
    fmt::print("Link figures are per GPU, one direction.\n");
    return kExitOk;
}

}  // namespace

void registerModelsCommand(CLI::App& app, int& exit_code) {
    auto as_json = std::make_shared<bool>(false);
    CLI::App* cmd = app.add_subcommand("models", "List the bundled model configs (usable as --model NAME)");
    cmd->add_flag("--json", *as_json, "Print a JSON array instead of the table");
    cmd->callback([as_json, &exit_code] { exit_code = runModels(*as_json); });
}

void registerGpusCommand(CLI::App& app, int& exit_code) {
    auto as_json = std::make_shared<bool>(false);
    CLI::App* cmd = app.add_subcommand("gpus", "List the GPU presets (usable as --gpu NAME)");
    cmd->add_flag("--json", *as_json, "Print a JSON array of the presets instead of the table");
    cmd->callback([as_json, &exit_code] { exit_code = runGpus(*as_json); });
}

}  // namespace shardcast::cli

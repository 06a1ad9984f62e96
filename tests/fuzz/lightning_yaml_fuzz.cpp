// LightningCLI config YAML files (configs::importLightningYaml), as `--from-config FILE.yaml` reads
// those with a `trainer` key. A config that imports must give overrides that build a plan (with a
// model) or fail with an error, never crash.
#include <cstdint>
#include <string_view>

#include "configs/config_import.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace shardcast;
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    (void)configs::isLightningYaml(text);
    auto imported = configs::importLightningYaml(text, "fuzz.yaml");
    if (!imported) return 0;
    imported->overrides.model = "tiny-llama";
    auto plan = core::buildPlan(imported->overrides);
    if (plan) (void)core::validatePlan(*plan);
    return 0;
}

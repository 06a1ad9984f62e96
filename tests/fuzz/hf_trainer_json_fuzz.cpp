// HF Trainer TrainingArguments / fsdp_config JSON files (configs::importHfTrainerJson), as
// `--from-config FILE.json` reads them. A config that imports must give overrides that build a plan
// (with a model) or fail with an error, never crash. An fsdp_config given as a path is resolved
// against a folder that does not exist, so the target reads no file.
#include <cstdint>
#include <string_view>

#include "configs/config_import.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace shardcast;
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    auto imported = configs::importHfTrainerJson(text, "fuzz.json", "/nonexistent-fuzz-dir");
    if (!imported) return 0;
    imported->overrides.model = "tiny-llama";
    auto plan = core::buildPlan(imported->overrides);
    if (plan) (void)core::validatePlan(*plan);
    return 0;
}
